# The broker's half of the codec: what a broker sends (CONNACK, SUBACK) and
# decoding what a client sends (CONNECT, SUBSCRIBE, UNSUBSCRIBE). A board never
# needs it; test brokers and host tools do.
from .codec import Reader, _fit, _header, _u16, _check_pid
from .topics import check_filter, string
from . import inbound
from .errors import MQTTProtocolError
from .reasons import NAMES

_CONNACK = const(2)  # packet types (codec.py)
_SUBSCRIBE = const(8)
_SUBACK = const(9)
_UNSUBSCRIBE = const(10)


def feed(r, data):
    """Copies as much of data into Reader r as fits; returns the number of
    bytes taken. A client reads straight into r.tail(); test brokers and
    tools hand a Reader bytes they already hold."""
    room = r.tail()
    n = min(len(room), len(data))
    room[:n] = data[:n]
    r.end += n
    return n


def connack(buf, code, session_present=False, off=0):
    _fit(buf, off, 4)
    buf[off] = _CONNACK << 4
    buf[off + 1] = 2
    buf[off + 2] = 1 if session_present else 0
    buf[off + 3] = code
    return off + 4


def suback(buf, pid, codes, off=0):
    _check_pid(pid)
    i = _u16(buf, _header(buf, _SUBACK << 4, 2 + len(codes), off), pid)
    for c in codes:
        buf[i] = c
        i += 1
    return i


def _bad(why):
    raise MQTTProtocolError(why)


class BrokerReader(Reader):
    """A Reader that also decodes the packets only clients send."""

    def __init__(self, size=1024, level=4):
        super().__init__(size, level)
        inbound.ready(self)  # a broker decodes every PUBLISH a client sends

    def decode(self, type, flags, i, end):  # what Reader.next() calls for them
        self._body = i  # where filters() finds them
        self._body_end = end
        b = self.buf
        rl = end - i
        name = NAMES[type]
        if type == _SUBSCRIBE or type == _UNSUBSCRIBE:
            if rl < 2:
                _bad("%s without a message id" % name)
            self.pid = self._pid(i)
            j = i + 2
            if j == end:
                _bad("%s without a topic filter" % name)
            while j < end:
                k = string(self, j, end, name + " topic filter")
                try:
                    check_filter(b, j + 2, k)
                except ValueError as e:
                    _bad("%s: %s" % (name, e))
                j = k
                if type == _SUBSCRIBE:
                    if j >= end:
                        _bad("_SUBSCRIBE filter without a QoS byte")
                    if b[j] > 2:
                        _bad("_SUBSCRIBE requested QoS byte 0x%02x is invalid" % b[j])
                    j += 1
        else:  # CONNECT
            self._parse_connect(i, end)

    def _parse_connect(self, i, end):
        b = self.buf
        mv = self.mv
        j = string(self, i, end, "CONNECT protocol name")
        proto = bytes(mv[i + 2:j])
        if j + 4 > end:
            _bad("CONNECT variable header is truncated")
        level = b[j]
        if not ((proto == b"MQTT" and level == 4) or (proto == b"MQIsdp" and level == 3)):
            _bad("CONNECT protocol %r level %d is not MQTT 3.1.1 or 3.1" % (proto, level))
        f = b[j + 1]
        if f & 1:
            _bad("CONNECT reserved flag is set")
        if f & 0x18 == 0x18:
            _bad("CONNECT will QoS 3")
        if not f & 4 and f & 0x38:
            _bad("CONNECT will QoS or retain without a will")
        if f & 0x40 and not f & 0x80 and level == 4:
            _bad("CONNECT password without a user name")
        self.level = level
        self.clean = bool(f & 2)
        self.keepalive = b[j + 2] << 8 | b[j + 3]
        j += 4
        k = string(self, j, end, "CONNECT client id")
        self.client_id = mv[j + 2:k]
        self.will_topic = self.will_msg = self.user = self.password = None
        self.will_qos = (f >> 3) & 3
        self.will_retain = bool(f & 0x20)
        if f & 4:
            j = k
            k = string(self, j, end, "CONNECT will topic")
            self.will_topic = mv[j + 2:k]
            j = k
            k = string(self, j, end, "CONNECT will message")
            self.will_msg = mv[j + 2:k]
        if f & 0x80:
            j = k
            k = string(self, j, end, "CONNECT user name")
            self.user = mv[j + 2:k]
        if f & 0x40:
            j = k
            k = string(self, j, end, "CONNECT password")
            self.password = mv[j + 2:k]
        if k != end:
            _bad("CONNECT has %d bytes after its payload" % (end - k))

    def filters(self):
        """The (filter, QoS) pairs of the SUBSCRIBE just read; QoS is None for
        UNSUBSCRIBE."""
        b = self.buf
        j = self._body + 2
        while j < self._body_end:
            k = j + 2 + (b[j] << 8 | b[j + 1])
            if self.type == _SUBSCRIBE:
                yield self.mv[j + 2:k], b[k]
                k += 1
            else:
                yield self.mv[j + 2:k], None
            j = k



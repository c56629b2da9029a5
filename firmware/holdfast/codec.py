# MQTT 3.1 / 3.1.1 wire codec: encoders write into a caller-owned bytearray
# at offset off and return the offset just past the packet; Reader decodes packets out of a stream buffer.
# The subscription side (SUBSCRIBE, UNSUBSCRIBE, filters) is in topics.py,
# inbound PUBLISH and SUBACK parsing (and an oversize PUBLISH's skip) in
# inbound.py: both load on first use, inbound.py once messages can arrive.
# Nothing here allocates per packet except the memoryviews a decoded packet
# hands out (topic, payload, ...), which stay valid until the next call.

# MQTT's packet types. Private consts, as every const in the package: a
# module-level name costs about 100 bytes of heap on a board, so a module
# that needs one of these numbers keeps its own const.
_CONNECT = const(1)
_CONNACK = const(2)
_PUBLISH = const(3)
_PUBACK = const(4)
_PUBREC = const(5)
_PUBREL = const(6)
_PUBCOMP = const(7)
_SUBSCRIBE = const(8)
_SUBACK = const(9)
_UNSUBSCRIBE = const(10)
_UNSUBACK = const(11)
_PINGREQ = const(12)
_PINGRESP = const(13)
_DISCONNECT = const(14)

_MAX_REMAINING = const(268435455)
# What next() returns for a PUBLISH or SUBACK (or an oversize PUBLISH) while
# it has no decoders (inbound.ready() not called): the packet stays
# buffered; the session hands them over and asks again.
_UNDECODED = const(17)

# Error reasons, by number; their words are in reasons.py (topics.py and
# inbound.py have the numbers of their own).
_E_FIT = const(0)
_E_RL_MAX = const(1)
_E_STR_LONG = const(2)
_E_PID_RANGE = const(3)
_E_QOS = const(4)
_E_TOPIC_EMPTY = const(5)
_E_TOPIC_WILD = const(6)
_E_LEVEL = const(7)
_E_EMPTY_ID = const(8)
_E_KEEPALIVE = const(9)
_E_PW_NO_USER = const(10)
_E_DUP_QOS0 = const(11)
_E_PID_ZERO = const(17)
_E_RESERVED = const(20)
_E_QOS3 = const(21)
_E_DUP0 = const(22)
_E_FLAGS2 = const(23)
_E_FLAGS0 = const(24)
_E_FIFTH = const(25)
_E_RL2 = const(30)
_E_RL0 = const(31)
_E_CONNACK_FLAGS = const(32)
_E_CONNACK_CODE = const(33)
_E_FROM_CLIENT = const(36)
_E_TOO_LARGE = const(37)


def why(code, *args):
    """The words of error reason code (reasons.py), formatted with args."""
    from .reasons import text  # loaded only when there is an error to explain
    return text(code, args)


def protocol_error(code, *args):
    # The class loads with the first protocol error (errors/__init__.py says why).
    from .errors import MQTTProtocolError
    return MQTTProtocolError(why(code, *args))


def to_bytes(s):
    """A topic or payload given as str, as bytes (others as they are)."""
    return s.encode() if isinstance(s, str) else s


def _fit(buf, off, n):
    if off + n > len(buf):
        raise ValueError(why(_E_FIT, n, len(buf) - off))


def _length_size(n):
    """Bytes of remaining length n; ValueError above the MQTT maximum."""
    if n < 2097152:
        return 1 if n < 128 else 2 if n < 16384 else 3
    if n > _MAX_REMAINING:
        raise ValueError(why(_E_RL_MAX, n, _MAX_REMAINING))
    return 4


def put_length(buf, i, n):
    """Writes remaining length n at buf[i]; returns the offset after it."""
    if not 0 <= n <= _MAX_REMAINING:
        raise ValueError(why(_E_RL_MAX, n, _MAX_REMAINING))
    while True:
        d = n & 0x7F
        n >>= 7
        if not n:
            buf[i] = d
            return i + 1
        buf[i] = d | 0x80
        i += 1


def _header(buf, head, n, off=0):
    # Writes the fixed header (first byte head, remaining length n) at off;
    # returns the offset where the variable header starts.
    _fit(buf, off, 1 + _length_size(n) + n)
    buf[off] = head
    return put_length(buf, off + 1, n)


def _u16(buf, i, v):
    buf[i] = v >> 8
    buf[i + 1] = v & 0xFF
    return i + 2


def _str(buf, i, s):
    n = len(s)
    if n > 65535:
        raise ValueError(why(_E_STR_LONG, n))
    buf[i] = n >> 8
    buf[i + 1] = n & 0xFF
    i += 2
    buf[i:i + n] = s
    return i + n


def _check_pid(pid):
    if not 0 < pid < 65536:
        raise ValueError(why(_E_PID_RANGE, pid))


def _check_qos(qos):
    if not 0 <= qos <= 2:
        raise ValueError(why(_E_QOS, qos))


def check_topic(topic):
    """Raise ValueError unless topic is a valid topic name to publish to."""
    n = len(topic)
    if not n:
        raise ValueError(why(_E_TOPIC_EMPTY))
    if isinstance(topic, memoryview):
        for i in range(n):
            if topic[i] == 43 or topic[i] == 35:
                break
        else:
            return
    elif b"+" not in topic and b"#" not in topic:
        return
    raise ValueError(why(_E_TOPIC_WILD, bytes(topic)))


def connect(buf, client_id, clean=True, keepalive=0, will=None, user=None, password=None, level=4, off=0):
    """CONNECT; will: None, or (topic, message, qos, retain) as the
    client's set_last_will() keeps it. buf None: only checks, and returns
    the remaining length (Session.check_connect)."""
    # The protocol name as str, encoded here: a bytes constant would stay on
    # the heap as an object (from .mpy), a short str is an interned name.
    if level == 4:
        name = "MQTT"
    elif level == 3:
        name = "MQIsdp"
    else:
        raise ValueError(why(_E_LEVEL, level))
    cid = to_bytes(client_id)
    if not cid and (level == 3 or not clean):
        raise ValueError(why(_E_EMPTY_ID))
    if not 0 <= keepalive <= 65535:
        raise ValueError(why(_E_KEEPALIVE, keepalive))
    flags = 2 if clean else 0
    rl = 2 + len(name) + 4 + 2 + len(cid)
    if will:
        wt = to_bytes(will[0])
        wm = to_bytes(will[1])
        check_topic(wt)
        _check_qos(will[2])
        flags |= 4 | will[2] << 3 | (0x20 if will[3] else 0)
        rl += 4 + len(wt) + len(wm)
    if user is not None:
        user = to_bytes(user)
        flags |= 0x80
        rl += 2 + len(user)
    if password is not None:
        if user is None and level == 4:
            raise ValueError(why(_E_PW_NO_USER))
        password = to_bytes(password)
        flags |= 0x40
        rl += 2 + len(password)
    if buf is None:
        return rl
    i = _header(buf, _CONNECT << 4, rl, off)
    i = _str(buf, i, name.encode())
    buf[i] = level
    buf[i + 1] = flags
    i = _u16(buf, i + 2, keepalive)
    i = _str(buf, i, cid)
    if will:
        i = _str(buf, i, wt)
        i = _str(buf, i, wm)
    if user is not None:
        i = _str(buf, i, user)
    if password is not None:
        i = _str(buf, i, password)
    return i


def publish_size(topic, length, qos):
    """Bytes of a whole PUBLISH packet with a payload of length bytes."""
    rl = 2 + len(to_bytes(topic)) + length + (2 if qos else 0)
    return 1 + _length_size(rl) + rl


def publish(buf, topic, payload, qos=0, retain=False, dup=False, pid=0, off=0, skip=0):
    """PUBLISH of payload; returns the offset after it. skip: bytes passed
    over (left as they are) between the header and the payload, counted in
    the remaining length (MQTT 5's properties go there: mqtt5.session.out)."""
    payload = to_bytes(payload)
    n = len(payload)
    _check_qos(qos)
    topic = to_bytes(topic)
    check_topic(topic)
    rl = 2 + len(topic) + skip + n
    if qos:
        _check_pid(pid)
        rl += 2
    elif dup:
        raise ValueError(why(_E_DUP_QOS0))
    i = _header(buf, 0x30 | (8 if dup else 0) | qos << 1 | (1 if retain else 0), rl, off)
    i = _str(buf, i, topic)
    if qos:
        i = _u16(buf, i, pid)
    i += skip
    buf[i:i + n] = payload
    return i + n


def ack(buf, type, pid, off=0):
    """PUBACK, PUBREC, PUBREL, PUBCOMP or UNSUBACK for message id pid;
    PINGREQ, PINGRESP and DISCONNECT, which carry no id (pid is not looked
    at)."""
    if type >= _PINGREQ:
        return _header(buf, type << 4, 0, off)
    _check_pid(pid)
    return _u16(buf, _header(buf, type << 4 | (2 if type == _PUBREL else 0), 2, off), pid)


def shift(buf, start, end):
    """Moves buf[start:end] to the front; returns its length. In place: a
    slice copy would allocate on MicroPython, and overlap is safe this way."""
    n = end - start
    for k in range(n):
        buf[k] = buf[start + k]
    return n


class Reader:
    """Decodes MQTT packets from a stream into a fixed buffer.

    Read straight into tail() and add the count to end (test brokers and
    tools copy bytes in with broker.feed()); take packets out with next(),
    which returns the packet type, or 0 when the next packet is not complete
    yet. The fields of the packet
    just returned (pid, flags, topic, payload, ...) are attributes, valid until
    the next call. A PUBLISH bigger than the buffer is skipped whole, so the
    stream stays in step: next() returns 16 (SKIPPED) once its packet id is
    read (pid; 0 at QoS 0; flags, and length: its bytes), and passes over
    the rest as it arrives (inbound.big(), skip(): handed over by the
    session once messages can arrive, so that nothing is loaded or
    allocated when a message is too large for the heap it would take).
    PUBLISH and SUBACK are decoded by inbound.py too: until inbound.ready(r)
    hands them over, next() returns 17 (UNDECODED) and keeps the packet.
    Any MQTTProtocolError
    (a length that runs past its packet, any other packet type bigger than the
    buffer or than its type allows, ...) means the stream cannot be trusted
    any more: the link must go, and reset() before the next one.
    """

    # What a subclass decodes with its decode(type, flags, i, end): Reader5
    # (mqtt5/session.py) every packet at level 5; BrokerReader (broker.py) CONNECT,
    # SUBSCRIBE and UNSUBSCRIBE, which only travel to a broker and a client's
    # Reader refuses. Kept apart to spare a board's heap.
    decode = None

    def __init__(self, size=1024, level=4):
        self.buf = bytearray(size)
        self.mv = memoryview(self.buf)
        self.level = level
        self.type = 0
        self.flags = 0
        self.pid = 0
        self.topic = None
        self.payload = None
        self.code = 0
        self.session_present = False
        # The decoders of what a subscriber receives (inbound.py: PUBLISH,
        # SUBACK, an oversize PUBLISH passed over), handed over by the
        # session once messages can arrive (inbound.ready()): the codec
        # never imports them. pid_at and length: the oversize skip's state
        # (inbound.big() says what they hold).
        self.inbound = None
        self.pid_at = -2
        self.length = 0
        self.reset()

    def reset(self):
        """Forgets the stream, a packet half skipped too: a new connection."""
        # skip: bytes of an oversize PUBLISH still to pass over (0: none);
        # inbound.big() says the rest.
        self.start = self.end = self.skip = 0

    def tail(self):
        """Writable view of the free space after the buffered bytes."""
        if self.start == self.end:
            self.start = self.end = 0
            return self.mv
        if self.start:
            self.end = shift(self.buf, self.start, self.end)
            self.start = 0
        return self.mv[self.end:]

    def _pid(self, i):
        pid = self.buf[i] << 8 | self.buf[i + 1]
        if not pid:
            raise protocol_error(_E_PID_ZERO, self.type)
        return pid

    def next(self):
        if self.skip:  # the rest of an oversize PUBLISH
            t = self.inbound.skip(self)
            if t or self.skip:
                return t
        b = self.buf
        s = self.start
        end = self.end
        if end - s < 2:
            return 0
        first = b[s]
        type = first >> 4
        flags = first & 15
        if type == 0 or type == 15:
            raise protocol_error(_E_RESERVED, type)
        if type == _PUBLISH:
            if flags & 6 == 6:
                raise protocol_error(_E_QOS3)
            if flags & 8 and not flags & 6 and self.level > 3:
                raise protocol_error(_E_DUP0)
        elif type == _PUBREL or type == _SUBSCRIBE or type == _UNSUBSCRIBE:  # flags 0b0010 (3.1.1 2.2.2)
            if flags != 2 and not (flags == 10 and self.level == 3):
                raise protocol_error(_E_FLAGS2, type, flags)
        elif flags:
            raise protocol_error(_E_FLAGS0, type, flags)
        rl = 0
        shift = 0
        i = s + 1
        while True:
            if i >= end:
                return 0
            d = b[i]
            i += 1
            rl |= (d & 0x7F) << shift
            if not d & 0x80:
                break
            shift += 7
            if shift == 28:
                raise protocol_error(_E_FIFTH)
        # What the type fixes is checked before its body is awaited: a 256 MB
        # PUBACK is refused at once, neither waited for nor skipped.
        # The remaining length each packet type fixes, by type (255: it
        # varies): CONNACK and the acks carry 2 bytes, PINGREQ, PINGRESP and
        # DISCONNECT none. A literal, not a module global: one more global
        # name made every global lookup in this module about twice as slow
        # on MicroPython (the QoS 0 publish path among them).
        n = b"\xff\xff\x02\xff\x02\x02\x02\x02\xff\xff\xff\x02\x00\x00\x00\xff"[type]
        if n != 255 and rl != n and self.level < 5:  # MQTT 5: mqtt5.session.parse() checks
            raise protocol_error(_E_RL0 if not n else _E_RL2, type, rl)
        total = i - s + rl
        if total > len(b):
            # Only a PUBLISH can be skipped (and acknowledged): anything else
            # this large is no packet a broker sends this client.
            if type != _PUBLISH:
                raise protocol_error(_E_TOO_LARGE, type, total, len(b))
            if end < i + 2:
                return 0  # the topic length says where the packet id is
            if self.inbound is None:
                return _UNDECODED
            return self.inbound.big(self, flags, i, total)
        if end - s < total:
            return 0
        end = s + total
        self.start = end
        self.type = type
        self.flags = flags
        if self.level > 4:  # MQTT 5: Reader5 (mqtt5/session.py) decodes its own way
            self.decode(type, flags, i, end)
        elif type == _PUBLISH or type == _SUBACK:
            if self.inbound is None:  # no decoders yet: the packet stays buffered
                self.start = s
                return _UNDECODED
            self.inbound.parse(self, type, flags, i, end)
        elif _PUBACK <= type <= _PUBCOMP or type == _UNSUBACK:
            self.pid = self._pid(i)
        elif type == _CONNACK:
            if b[i] & 0xFE and self.level == 4:
                raise protocol_error(_E_CONNACK_FLAGS)
            if b[i + 1] > 5:
                raise protocol_error(_E_CONNACK_CODE, b[i + 1])
            self.session_present = bool(b[i] & 1) if self.level == 4 else False
            self.code = b[i + 1]
        elif type < _PINGREQ:  # CONNECT, SUBSCRIBE, UNSUBSCRIBE (PINGREQ, PINGRESP, DISCONNECT: nothing more)
            if self.decode is None:
                raise protocol_error(_E_FROM_CLIENT, type)
            self.decode(type, flags, i, end)
        return type

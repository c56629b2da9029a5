# MQTT 5.0 as a client that only publishes needs it, loaded by a client made
# with level=5 (a 3.1.1 client never carries it): its CONNECT, the property
# checker (walk) and reader (get), CONNACK, the acknowledgements and
# DISCONNECT with their reason codes, the PUBLISH header with a Message
# Expiry Interval, and Session5. Everything else (the subscription side,
# inbound PUBLISH and topic aliases, encoders for any property, the public
# names of the properties) is in v5more.py, loaded on first use by more();
# the words in v5words.py, loaded with the first thing to explain. Same rules
# as codec.py: encoders write into a caller-owned buffer at off and return
# the offset after the packet; decoders read a packet in a Reader's buffer
# (r.buf, body at buf[i:end]) and set its fields (pid, code, topic, payload,
# and p0/p1: the span of the properties, which get() reads).
from . import codec
from .codec import Reader, _length_size, put_length, _u16
from . import errors  # errors.X where raised or caught: the class loads with the first failure
from .session import Session, wall

# Packet types (codec.py's), and session.py's numbers Session5 works with:
# private, so the compiler folds them and the module holds no name for them.
_CONNECT = const(1)
_CONNACK = const(2)
_PUBLISH = const(3)
_PUBACK = const(4)
_PUBREC = const(5)
_PUBREL = const(6)
_PUBCOMP = const(7)
_PINGRESP = const(13)
_DISCONNECT = const(14)
_ACK_ROOM = const(16)  # session.ACK_ROOM
_CONNECTING = const(2)  # session.CONNECTING

# The property identifiers this module reads or writes (v5more.py names them all).
_MESSAGE_EXPIRY = const(0x02)
_SESSION_EXPIRY = const(0x11)
_ASSIGNED_CLIENT_ID = const(0x12)
_SERVER_KEEP_ALIVE = const(0x13)
_REASON_STRING = const(0x1F)
_RECEIVE_MAXIMUM = const(0x21)
_TOPIC_ALIAS_MAXIMUM = const(0x22)
_TOPIC_ALIAS = const(0x23)
_MAXIMUM_QOS = const(0x24)
_RETAIN_AVAILABLE = const(0x25)
_MAXIMUM_PACKET_SIZE = const(0x27)

_MALFORMED = const(0x81)
_PROTOCOL_ERROR = const(0x82)
_LAST = const(0x2A)

# Four bytes a property identifier, 0 to 0x2A: its kind, the packets it may
# be in (a mask, bit n for packet type n, bit 0 for the will properties,
# high byte first) and its bit in the duplicate mask. Kind: bits 0-2 the
# type (_BYTE .. _PAIR), bit 3 may repeat, bit 4 zero is a protocol error.
# Kind 0: no such property. One bytes object: a tuple of tuples would cost a
# board some 2 KB of heap, this 172 bytes.
_T = (b"\x00\x00\x00\x00\x01\x00\x09\x00\x03\x00\x09\x01\x05\x00\x09\x02\x00\x00\x00\x00"
      b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x00\x09\x03\x06\x00\x09\x04"
      b"\x00\x00\x00\x00\x1c\x01\x08\x19\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      b"\x00\x00\x00\x00\x00\x00\x00\x00\x03\x40\x06\x05\x05\x00\x04\x06\x02\x00\x04\x07"
      b"\x00\x00\x00\x00\x05\x80\x06\x08\x06\x80\x06\x09\x01\x00\x02\x0a\x03\x00\x01\x0b"
      b"\x01\x00\x02\x0c\x05\x00\x04\x0d\x00\x00\x00\x00\x05\x40\x04\x0e\x00\x00\x00\x00"
      b"\x00\x00\x00\x00\x05\xca\xf4\x0f\x00\x00\x00\x00\x12\x00\x06\x10\x02\x00\x06\x11"
      b"\x12\x00\x08\x12\x01\x00\x04\x13\x01\x00\x04\x14\x0f\xcf\xff\x00\x13\x00\x06\x15"
      b"\x01\x00\x04\x16\x01\x00\x04\x17\x01\x00\x04\x18")
_BYTE = const(1)  # every one-byte property is a 0/1 flag
_U16 = const(2)
_U32 = const(3)
_VARINT = const(4)
_UTF8 = const(5)
_PAIR = const(7)
_REPEAT = const(8)
_NONZERO = const(16)

# The reason codes each packet may carry (table 2-6 of MQTT 5.0); SUBACK's
# and UNSUBACK's are in v5more.py.
_CONNACK_CODES = b"\x00\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8c\x90\x95\x97\x99\x9a\x9b\x9c\x9d\x9f"
_PUBACK_CODES = b"\x00\x10\x80\x83\x87\x90\x91\x97\x99"  # and PUBREC
_PUBREL_CODES = b"\x00\x92"  # and PUBCOMP
_DISCONNECT_CODES = (b"\x00\x04\x80\x81\x82\x83\x87\x89\x8b\x8c\x8d\x8e\x8f\x90\x93\x94\x95\x96\x97"
                     b"\x98\x99\x9a\x9b\x9c\x9d\x9e\x9f\xa0\xa1\xa2")

# Error reasons, by number; the words are in v5words.py.
_E_UNKNOWN = const(0)
_E_NOT_IN = const(1)
_E_TWICE = const(2)
_E_VALUE_PAST = const(3)
_E_PLEN_PAST = const(4)
_E_FLAG = const(5)
_E_ZERO = const(6)
_E_VARINT = const(8)
_E_CODE = const(9)
_E_TRAILING = const(10)
_E_CONNACK_FLAGS = const(11)
_E_PRESENT_REFUSED = const(12)
_E_SHORT = const(13)
_E_PID_ZERO = const(14)
_E_LIMIT = const(28)
_E_REFUSED = const(29)
_E_SERVER_GONE = const(30)

# What the client offers in CONNECT: inbound topic aliases kept per link;
# and the outbound ones it sets at most, whatever the broker takes.
ALIASES = const(8)
_OUT = const(8)
_MORE = const(9)  # bytes MQTT 5 adds to a PUBLISH of ours at most: property length, expiry, alias


def more():
    """v5more.py, loaded on first use (a subscription, an inbound PUBLISH, a
    refused message, a stored one sent again): once loaded, the import
    allocates nothing."""
    import holdfast.v5more as m
    return m


def _words(n, args, code=-1):
    from .v5words import text  # the words load only with an error to explain
    return text(n, args, code)


def _fail(code, n, *args):
    from .errors import V5Error  # errmore.py: loads with the first error
    raise V5Error(code, _words(n, args, code))


def words(code, type=0):
    """A reason code in words, "quota exceeded (0x97)"; type: the packet it
    came in, where the words depend on it (0x00 in a DISCONNECT)."""
    from .v5words import reason
    return reason(code, type)


def _n16(b, i):
    return b[i] << 8 | b[i + 1]


def _u32(buf, i, v):
    buf[i] = v >> 24
    buf[i + 1] = (v >> 16) & 0xFF
    buf[i + 2] = (v >> 8) & 0xFF
    buf[i + 3] = v & 0xFF
    return i + 4


def _varint(b, i, end):
    """The Variable Byte Integer at b[i]: at most four bytes, in the fewest
    bytes that hold it, all before end."""
    n = 0
    s = 0
    j = i
    while True:
        if j >= end:
            _fail(_MALFORMED, _E_VARINT)
        d = b[j]
        j += 1
        n |= (d & 0x7F) << s
        if not d & 0x80:
            break
        s += 7
        if s == 28:
            _fail(_MALFORMED, _E_VARINT)
    if j - i != _length_size(n):
        _fail(_MALFORMED, _E_VARINT)
    return n


# -- properties in ------------------------------------------------------------

def walk(r, i, end, type):
    """Checks the property block at r.buf[i:end] of a packet of type: its
    length, then every property (known, allowed in type, not repeated unless
    it may be, its value whole and valid). Sets r.p0, r.p1 to the span of the
    properties; returns r.p1."""
    b = r.buf
    n = _varint(b, i, end)
    i += _length_size(n)
    p1 = i + n
    if p1 > end:
        _fail(_MALFORMED, _E_PLEN_PAST, type, n)
    r.p0 = i
    r.p1 = p1
    seen = 0
    while i < p1:
        p = b[i]
        i += 1
        k = _T[p << 2] if p <= _LAST else 0
        if not k:
            _fail(_MALFORMED, _E_UNKNOWN, type, p)
        if not (_T[(p << 2) + 1] << 8 | _T[(p << 2) + 2]) >> type & 1:
            _fail(_MALFORMED, _E_NOT_IN, type, p)
        if not k & _REPEAT:
            m = 1 << _T[(p << 2) + 3]
            if seen & m:
                _fail(_PROTOCOL_ERROR, _E_TWICE, type, p)
            seen |= m
        t = k & 7
        if t == _VARINT:
            v = _varint(b, i, p1)
            if not v:  # Subscription Identifier, the one varint property
                _fail(_PROTOCOL_ERROR, _E_ZERO, type, p)
            i += _length_size(v)
        elif t >= _UTF8:  # strings, binary data: in v5more.py, as a publish-only client seldom gets one
            i = more().string(b, i, p1, type, p, t)
        else:
            j = i + b"\x01\x02\x04"[t - 1]  # bytes, not a tuple: no allocation
            if j > p1:
                _fail(_MALFORMED, _E_VALUE_PAST, type, p)
            if t == _BYTE:
                if b[i] > 1:
                    _fail(_PROTOCOL_ERROR, _E_FLAG, type, p, b[i])
            elif k & _NONZERO and not (b[i] | b[i + 1] | b[j - 2] | b[j - 1]):
                _fail(_PROTOCOL_ERROR, _E_ZERO, type, p)
            i = j
    return p1


def _skip(b, i, p):
    # Offset after the value of property p at b[i], checked by walk().
    t = _T[p << 2] & 7
    if t < _VARINT:
        return i + b"\x01\x02\x04"[t - 1]
    if t == _VARINT:
        while b[i] & 0x80:
            i += 1
        return i + 1
    if t == _PAIR:
        i += 2 + _n16(b, i)
    return i + 2 + _n16(b, i)


def find(b, i, end, p):
    """Offset of the value of property p in the properties b[i:end] (checked
    by walk()), or 0 if it is not there."""
    while i < end:
        q = b[i]
        if q == p:
            return i + 1
        i = _skip(b, i + 1, q)
    return 0


def get(b, p, default=None, i=0, end=-1):
    """Property p of the properties b[i:end] (all of b by default; checked by
    walk()): a number, or the bytes of a string or binary; default when it
    is not there. User properties: v5more.pairs()."""
    if end < 0:
        end = len(b)
    at = find(b, i, end, p)
    if not at:
        return default
    t = _T[p << 2] & 7
    if t == _BYTE:
        return b[at]
    if t == _U16:
        return _n16(b, at)
    if t == _U32:
        return _n16(b, at) << 16 | _n16(b, at + 2)
    if t == _VARINT:
        return _varint(b, at, end)
    return bytes(b[at + 2:at + 2 + _n16(b, at)])


# -- packets out --------------------------------------------------------------

def out(s, topic, payload, qos, retain, pid, deadline):
    """Session s's message as an MQTT 5 PUBLISH into s.tx at s.tx_end; returns
    the offset after it. Its properties: what is left of its expiry
    (deadline: wall-clock seconds, 0: none), a Topic Alias while the broker
    takes them (the first PUBLISH of a topic on a link sets one, the next
    ones send the alias alone, with an empty topic), then s.props (s.plen
    bytes, checked by Session5.publish)."""
    b = s.tx
    off = s.tx_end
    topic = codec.to_bytes(topic)
    payload = codec.to_bytes(payload)
    n = len(payload)
    expiry = left(deadline)
    e = 0 if expiry is None else 5
    a = 0
    new = True
    t = s.topics
    for k in range(s.alias_max):
        x = t[k]
        if x is None:  # a free alias: this topic's from now on, on this link
            t[k] = topic if type(topic) is bytes else bytes(topic)
            a = k + 1
            break
        if x == topic:
            a = k + 1
            new = False
            break
    if a:
        e += 3
    p = s.props
    if p:
        e += s.plen
    m = _length_size(e) + e
    if new:  # the payload goes in after m bytes left for the properties
        i = codec.publish(b, topic, payload, qos, retain, False, pid, off, m) - n - m
    else:  # codec's header, without the topic it checked when the alias was set
        codec._check_qos(qos)
        b[off] = 0x30 | qos << 1 | (1 if retain else 0)
        i = put_length(b, off + 1, (4 if qos else 2) + m + n)
        b[i] = b[i + 1] = 0
        i += 2
        if qos:
            i = _u16(b, i, pid)
        b[i + m:i + m + n] = payload
    i = put_length(b, i, e)
    if expiry is not None:
        b[i] = _MESSAGE_EXPIRY
        i = _u32(b, i + 1, expiry)
    if a:
        b[i] = _TOPIC_ALIAS
        i = _u16(b, i + 1, a)
    if p:
        i = more()._items(b, i, p)
    return i + n


def start(s):
    """Session s's CONNECT at level 5: it can hold as many inbound QoS 1/2
    messages as its table of held ids, take packets as large as its buffer
    and 8 topic aliases. A session that is not clean lasts until the broker
    is told otherwise (s.expiry; as in 3.1.1, where MQTT 5 would end it
    with the link). codec.py writes the 3.1.1 CONNECT a little further on
    (its checks are the same), then its parts move into place with the
    properties between them. A password needs a user name, as in 3.1.1."""
    b = s.tx
    w = s.will
    p = 0 if s.clean else 5
    k = p + 24  # after the largest growth: the copy below only moves bytes forward
    end = codec.connect(b, s.client_id, True, s.keepalive, w, s.user, s.password, 4, k)
    j = k + 1
    while b[j] & 0x80:
        j += 1
    j += 1  # the 3.1.1 variable header
    rl = end - j + 12 + p + (1 if w else 0)
    b[0] = 0x10
    i = put_length(b, 1, rl)
    _move(b, i, j, 10)
    b[i + 6] = 5
    if not s.clean:
        b[i + 7] &= 0xFD
    i += 10
    j += 10
    b[i] = 11 + p
    i += 1
    if p:
        b[i] = _SESSION_EXPIRY
        i = _u32(b, i + 1, s.expiry)
    b[i] = _RECEIVE_MAXIMUM
    i = _u16(b, i + 1, min(s.store.held_max, 65535))
    b[i] = _TOPIC_ALIAS_MAXIMUM
    i = _u16(b, i + 1, ALIASES)
    b[i] = _MAXIMUM_PACKET_SIZE
    i = _u32(b, i + 1, getattr(s, "rx_size", s.size))  # Session._rx_full()
    n = 2 + _n16(b, j)
    _move(b, i, j, n)
    i += n
    j += n
    if w:
        b[i] = 0  # no will properties
        i += 1
    _move(b, i, j, end - j)
    return i + end - j


def _move(b, i, j, n):
    # b[j:j + n] to b[i:], i <= j: in place, without a slice copy.
    for x in range(n):
        b[i + x] = b[j + x]


# -- packets in ---------------------------------------------------------------

def parse(r, type, flags, i, end):
    """Reader r's packet of type at r.buf[i:end] (the body, after the fixed
    header): its fields into r. Without properties r.p0 == r.p1."""
    b = r.buf
    r.p0 = r.p1 = r.code = 0
    if type == _PUBACK or type == _PUBREC or type == _PUBREL or type == _PUBCOMP:
        r.pid = _pid(b, i, end, type)
        if end - i > 2:
            _code(r, b[i + 2], type, _PUBACK_CODES if type < _PUBREL else _PUBREL_CODES)
        if end - i > 3:
            _whole(r, i + 3, end, type)
    elif type == _CONNACK:
        if end - i < 3:
            _fail(_MALFORMED, _E_SHORT, type, end - i)
        if b[i] & 0xFE:
            _fail(_MALFORMED, _E_CONNACK_FLAGS)
        _code(r, b[i + 1], type, _CONNACK_CODES)
        if b[i] and r.code:
            _fail(_PROTOCOL_ERROR, _E_PRESENT_REFUSED, r.code)
        r.session_present = bool(b[i])
        _whole(r, i + 2, end, type)
    elif type == _DISCONNECT:
        if end > i:
            _code(r, b[i], type, _DISCONNECT_CODES)
        if end - i > 1:
            _whole(r, i + 1, end, type)
    elif type == _PINGRESP:
        if end > i:
            _fail(_MALFORMED, _E_TRAILING, type, end - i)
    else:
        more().parse(r, type, flags, i, end)  # PUBLISH, SUBACK, UNSUBACK


def _pid(b, i, end, type):
    if end - i < 2:
        _fail(_MALFORMED, _E_SHORT, type, end - i)
    pid = _n16(b, i)
    if not pid:
        _fail(_PROTOCOL_ERROR, _E_PID_ZERO, type)
    return pid


def _code(r, c, type, codes):
    if c not in codes:
        _fail(_PROTOCOL_ERROR, _E_CODE, type, c)
    r.code = c


def _whole(r, i, end, type):
    # A property block that must end where its packet does.
    if walk(r, i, end, type) != end:
        _fail(_MALFORMED, _E_TRAILING, type, end - r.p1)


# -- the session's part: Session5 --------------------------------------------

class Reader5(Reader):
    """codec.Reader for MQTT 5: packets decoded by parse(), and the inbound
    topic aliases of the link (v5more.alias_in: None until the first)."""

    def reset(self):
        Reader.reset(self)
        self.aliases = None

    def decode(self, type, flags, i, end):  # what Reader.next() calls at level 5
        parse(self, type, flags, i, end)
        if type == _PUBLISH:
            more().alias_in(self)


class Session5(Session):
    """session.Session speaking MQTT 5 (Front makes one for level=5): what
    CONNACK says is obeyed, refused messages are REJECTED events, a
    DISCONNECT from the broker says why. expiry: the Session Expiry
    Interval a session that is not clean asks for (never ends, as in 3.1.1:
    MQTT 5 would end it with the link)."""

    props = None  # the properties of the message publish() is given (the shells set them)

    def __init__(self, *args):
        Session.__init__(self, *args)
        from . import v5
        self.v5 = v5  # what Session's own MQTT 5 branches call
        # CONNACK and the acks may carry properties (a reason string, user
        # properties) up to the Maximum Packet Size CONNECT offers, size:
        # at level 5 the receive buffer holds size bytes from the start.
        self.rx = Reader5(self.size, 5)
        self.expiry = 4294967295
        # Topics sent with an alias on this link (alias k + 1: topics[k]),
        # as many as the broker's Topic Alias Maximum (alias_max) allows.
        self.topics = None
        self.alias_max = 0
        # What the last CONNACK allows: the highest QoS, retained messages.
        self.max_qos = 2
        self.retain = 1
        self.plen = 0  # bytes of props, the next message's properties (publish(props=...))
        self.store.five = True  # durable.log.Log.five

    def fits(self, n):
        # The broker's Maximum Packet Size, the one check of it (publish(),
        # session_publish(); _fill() drops a stored message over self.limit).
        Session.fits(self, n)
        if n > self.limit:
            raise ValueError(_words(_E_LIMIT, (n, self.limit + _MORE)))

    def publish(self, topic, payload, qos, retain, now, deadline=0, latest=False):
        payload = codec.to_bytes(payload)  # sized as its UTF-8 bytes
        if qos > self.max_qos or retain and not self.retain or self.props:
            return more().session_publish(self, topic, payload, qos, retain, now, deadline, latest)
        n = codec.publish_size(topic, len(payload), qos) + 1  # the property length
        if n > self.limit:
            self.fits(n)
        return Session.publish(self, topic, payload, qos, retain, now, deadline, latest)

    def _resend(self, key, dup):
        more().resend(self, key, dup)

    def _fail(self, e):
        if not isinstance(e, (OSError, errors.ConnectError)):  # bytes that break MQTT 5
            more().goodbye(self, e)
        Session._fail(self, e)

    def _handle(self, t, now):
        r = self.rx
        if t == _CONNACK and self.state == _CONNECTING:
            # What the broker's CONNACK says: a refusal in words; how many QoS
            # 1/2 messages it takes at once (the window), the keepalive it
            # wants, the client id it gave, the largest packet it takes.
            # Session's _handle then reconciles the ledgers.
            b = r.buf
            p0 = r.p0
            p1 = r.p1
            if r.code:
                raise errors.ConnectError(r.code, _words(_E_REFUSED, (words(r.code), _said(r))))
            self.window = min(len(self._state), get(b, _RECEIVE_MAXIMUM, 65535, p0, p1))
            ka = get(b, _SERVER_KEEP_ALIVE, -1, p0, p1)
            if ka >= 0:
                self.keepalive = ka  # and how long a PINGREQ may go unanswered
            cid = get(b, _ASSIGNED_CLIENT_ID, None, p0, p1)
            if cid:
                self.client_id = cid
            self.max_qos = get(b, _MAXIMUM_QOS, 2, p0, p1)
            self.retain = get(b, _RETAIN_AVAILABLE, 1, p0, p1)
            self.alias_max = min(get(b, _TOPIC_ALIAS_MAXIMUM, 0, p0, p1), _OUT)
            if self.alias_max:  # a new link: the broker knows none of our aliases
                if self.topics is None:
                    self.topics = [None] * _OUT
                for k in range(_OUT):
                    self.topics[k] = None
            # A PUBLISH of ours grows by _MORE bytes at most: the limit is
            # what leaves room for them. A Maximum Packet Size of 9 or less
            # leaves none: every message is refused (fits(), _fill()).
            self.limit = self.size - _ACK_ROOM
            most = get(b, _MAXIMUM_PACKET_SIZE, 0, p0, p1)
            if most and most - _MORE < self.limit:
                self.limit = most - _MORE
        if t == _DISCONNECT:
            self._fail(errors.LinkDown(_words(_E_SERVER_GONE, (words(r.code, _DISCONNECT), _said(r)))))
        return Session._handle(self, t, now)


def left(deadline):
    """A deadline (wall-clock seconds, 0: none) as the Message Expiry
    Interval that is left of it (None: none)."""
    return max(0, deadline - wall()) if deadline else None


def _said(r):
    # The Reason String of reader r's packet, if it has one.
    why = get(r.buf, _REASON_STRING, None, r.p0, r.p1)
    return ": " + why.decode() if why else ""

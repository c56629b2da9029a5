# What MQTT 5.0 adds to the wire: properties, reason codes, subscription
# options, the packets that carry them. Same rules as codec.py: encoders
# write into a caller-owned buffer at off and return the offset after the
# packet; decoders read a packet in a Reader's buffer (r.buf, body at
# buf[i:end]) and set its fields (pid, code, topic, payload, and p0/p1: the
# span of the properties, which get() and pairs() read). Loaded only by a
# client made with level=5; a 3.1.1 client never carries it.
from .compat import const, wall
from .codec import (Reader, to_bytes, check_topic, filters, why, _header, _length_size, put_length, _u16,
                    _str, _check_pid, _check_qos, _fit)
from .errors import MQTTError, ConnectError, LinkDown
from .session import Session

# Packet types (codec.py's), and session.py's numbers Session5 works with:
# private, so the compiler folds them and the module holds no name for them.
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
_PINGRESP = const(13)
_DISCONNECT = const(14)
_ACK_ROOM = const(16)  # session.ACK_ROOM
_CONNECTING = const(2)  # session.CONNECTING
_REJECTED = const(4)  # session.REJECTED

# Property identifiers (MQTT 5.0 section 2.2.2.2).
PAYLOAD_FORMAT = const(0x01)
MESSAGE_EXPIRY = const(0x02)
CONTENT_TYPE = const(0x03)
RESPONSE_TOPIC = const(0x08)
CORRELATION_DATA = const(0x09)
SUBSCRIPTION_ID = const(0x0B)
SESSION_EXPIRY = const(0x11)
ASSIGNED_CLIENT_ID = const(0x12)
SERVER_KEEP_ALIVE = const(0x13)
AUTH_METHOD = const(0x15)
AUTH_DATA = const(0x16)
REQUEST_PROBLEM_INFO = const(0x17)
WILL_DELAY = const(0x18)
REQUEST_RESPONSE_INFO = const(0x19)
RESPONSE_INFO = const(0x1A)
SERVER_REFERENCE = const(0x1C)
REASON_STRING = const(0x1F)
RECEIVE_MAXIMUM = const(0x21)
TOPIC_ALIAS_MAXIMUM = const(0x22)
TOPIC_ALIAS = const(0x23)
MAXIMUM_QOS = const(0x24)
RETAIN_AVAILABLE = const(0x25)
USER_PROPERTY = const(0x26)
MAXIMUM_PACKET_SIZE = const(0x27)
WILDCARD_AVAILABLE = const(0x28)
SUBSCRIPTION_ID_AVAILABLE = const(0x29)
SHARED_AVAILABLE = const(0x2A)

MALFORMED = const(0x81)
PROTOCOL_ERROR = const(0x82)

# Will properties travel in CONNECT but have their own set: packet "type" 0.
WILL = const(0)

_LAST = const(0x2A)
_MAX_VARINT = const(268435455)

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
_BINARY = const(6)
_PAIR = const(7)
_REPEAT = const(8)
_NONZERO = const(16)

# The reason codes each packet may carry (table 2-6 of MQTT 5.0).
_CONNACK_CODES = b"\x00\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8c\x90\x95\x97\x99\x9a\x9b\x9c\x9d\x9f"
_PUBACK_CODES = b"\x00\x10\x80\x83\x87\x90\x91\x97\x99"  # and PUBREC
_PUBREL_CODES = b"\x00\x92"  # and PUBCOMP
_SUBACK_CODES = b"\x00\x01\x02\x80\x83\x87\x8f\x91\x97\x9e\xa1\xa2"
_UNSUBACK_CODES = b"\x00\x11\x80\x83\x87\x8f\x91"
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
_E_UTF8 = const(7)
_E_VARINT = const(8)
_E_CODE = const(9)
_E_TRAILING = const(10)
_E_CONNACK_FLAGS = const(11)
_E_PRESENT_REFUSED = const(12)
_E_SHORT = const(13)
_E_PID_ZERO = const(14)
_E_TOPIC_EMPTY = const(15)
_E_TOPIC_UTF8 = const(16)
_E_TOPIC_WILD = const(17)
_E_NO_CODES = const(18)
_A_UNKNOWN = const(19)
_A_NOT_IN = const(20)
_A_TWICE = const(21)
_A_RANGE = const(22)
_A_OPTIONS = const(23)
_A_STR_LONG = const(24)
_A_SUB_ID_OUT = const(25)


def _words(n, args, code=-1):
    from .v5words import text  # the words load only with an error to explain
    return text(n, args, code)


def _fail(code, n, *args):
    from .errors import V5Error  # errmore.py: loads with the first error
    raise V5Error(code, _words(n, args, code))


def _bad(n, *args):
    raise ValueError(_words(n, args))


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
            _fail(MALFORMED, _E_VARINT)
        d = b[j]
        j += 1
        n |= (d & 0x7F) << s
        if not d & 0x80:
            break
        s += 7
        if s == 28:
            _fail(MALFORMED, _E_VARINT)
    if j - i != _length_size(n):
        _fail(MALFORMED, _E_VARINT)
    return n


# -- properties out -----------------------------------------------------------

def _size(items, type, seen=0):
    """Bytes of the properties items ((identifier, value) pairs) in a packet
    of type: each one checked, before anything is written."""
    n = 0
    for p, v in items:
        k = _T[p << 2] if 0 < p <= _LAST else 0
        if not k:
            _bad(_A_UNKNOWN, p)
        if not (_T[(p << 2) + 1] << 8 | _T[(p << 2) + 2]) >> type & 1:
            _bad(_A_NOT_IN, type, p)
        if p == SUBSCRIPTION_ID and type == _PUBLISH:
            _bad(_A_SUB_ID_OUT)  # only a broker puts it on a PUBLISH
        if not k & _REPEAT or p == SUBSCRIPTION_ID:  # it repeats only in a broker's PUBLISH
            m = 1 << _T[(p << 2) + 3]
            if seen & m:
                _bad(_A_TWICE, p)
            seen |= m
        t = k & 7
        if t <= _VARINT:
            top = 1 if t == _BYTE else 65535 if t == _U16 else 4294967295 if t == _U32 else _MAX_VARINT
            low = 1 if k & _NONZERO else 0
            if not low <= v <= top:
                _bad(_A_RANGE, p, v, low, top)
            n += 1 + (b"\x01\x02\x04"[t - 1] if t < _VARINT else _length_size(v))
        elif t == _PAIR:
            n += 1 + _slen(v[0]) + _slen(v[1])
        else:
            n += 1 + _slen(v)
    return n


def _slen(s):
    n = len(to_bytes(s))
    if n > 65535:
        _bad(_A_STR_LONG, n)
    return 2 + n


def _put(buf, i, items, n):
    """Writes property length n, then items, checked by _size."""
    return _items(buf, put_length(buf, i, n), items)


def _items(buf, i, items):
    for p, v in items:
        buf[i] = p
        i += 1
        t = _T[p << 2] & 7
        if t == _BYTE:
            buf[i] = v
            i += 1
        elif t == _U16:
            i = _u16(buf, i, v)
        elif t == _U32:
            i = _u32(buf, i, v)
        elif t == _VARINT:
            i = put_length(buf, i, v)
        elif t == _PAIR:
            i = _str(buf, _str(buf, i, to_bytes(v[0])), to_bytes(v[1]))
        else:
            i = _str(buf, i, to_bytes(v))
    return i


def props(buf, items, type, off=0):
    """Writes a property block (its length, then items: (identifier, value)
    pairs) for a packet of type at off; returns the offset after it."""
    n = _size(items, type)
    _fit(buf, off, _length_size(n) + n)
    return _put(buf, off, items, n)


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
        _fail(MALFORMED, _E_PLEN_PAST, type, n)
    r.p0 = i
    r.p1 = p1
    seen = 0
    while i < p1:
        p = b[i]
        i += 1
        k = _T[p << 2] if p <= _LAST else 0
        if not k:
            _fail(MALFORMED, _E_UNKNOWN, type, p)
        if not (_T[(p << 2) + 1] << 8 | _T[(p << 2) + 2]) >> type & 1:
            _fail(MALFORMED, _E_NOT_IN, type, p)
        if not k & _REPEAT:
            m = 1 << _T[(p << 2) + 3]
            if seen & m:
                _fail(PROTOCOL_ERROR, _E_TWICE, type, p)
            seen |= m
        t = k & 7
        if t == _VARINT:
            v = _varint(b, i, p1)
            if not v:  # Subscription Identifier, the one varint property
                _fail(PROTOCOL_ERROR, _E_ZERO, type, p)
            i += _length_size(v)
        elif t >= _UTF8:
            i = _string(b, i, p1, type, p, t)
            if t == _PAIR:
                i = _string(b, i, p1, type, p, t)
        else:
            j = i + b"\x01\x02\x04"[t - 1]  # bytes, not a tuple: no allocation
            if j > p1:
                _fail(MALFORMED, _E_VALUE_PAST, type, p)
            if t == _BYTE:
                if b[i] > 1:
                    _fail(PROTOCOL_ERROR, _E_FLAG, type, p, b[i])
            elif k & _NONZERO and not (b[i] | b[i + 1] | b[j - 2] | b[j - 1]):
                _fail(PROTOCOL_ERROR, _E_ZERO, type, p)
            i = j
    return p1


def _string(b, i, end, type, p, t):
    # Offset after the string or binary at b[i]; a string must be UTF-8.
    if i + 2 > end:
        _fail(MALFORMED, _E_VALUE_PAST, type, p)
    j = i + 2 + _n16(b, i)
    if j > end:
        _fail(MALFORMED, _E_VALUE_PAST, type, p)
    if t != _BINARY and not filters().utf8_ok(b, i + 2, j):
        _fail(MALFORMED, _E_UTF8, type, p)
    return j


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
    is not there. User properties: pairs()."""
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


def pairs(b, i=0, end=-1):
    """The user properties in b[i:end], in order: a list of (name, value) bytes."""
    if end < 0:
        end = len(b)
    out = []
    while i < end:
        q = b[i]
        i += 1
        if q == USER_PROPERTY:
            j = i + 2 + _n16(b, i)
            k = j + 2 + _n16(b, j)
            out.append((bytes(b[i + 2:j]), bytes(b[j + 2:k])))
        i = _skip(b, i, q)
    return out


# -- packets out --------------------------------------------------------------

def connect(buf, client_id, clean=True, keepalive=0, will_topic=None, will_msg=b"", will_qos=0,
            will_retain=False, user=None, password=None, props=(), will_props=(), off=0):
    """CONNECT at level 5. props, will_props: (identifier, value) pairs."""
    cid = to_bytes(client_id)
    if not 0 <= keepalive <= 65535:
        raise ValueError(why(9, keepalive))  # codec's KEEPALIVE
    n = _size(props, _CONNECT)
    rl = 10 + _length_size(n) + n + _slen(cid)
    flags = 2 if clean else 0
    if will_topic is not None:
        will_topic = to_bytes(will_topic)
        will_msg = to_bytes(will_msg)
        check_topic(will_topic)
        _check_qos(will_qos)
        flags |= 4 | will_qos << 3 | (0x20 if will_retain else 0)
        wn = _size(will_props, WILL)
        rl += _length_size(wn) + wn + _slen(will_topic) + _slen(will_msg)
    if user is not None:
        user = to_bytes(user)
        flags |= 0x80
        rl += _slen(user)
    if password is not None:
        password = to_bytes(password)
        flags |= 0x40
        rl += _slen(password)
    i = _header(buf, _CONNECT << 4, rl, off)
    i = _str(buf, i, b"MQTT")
    buf[i] = 5
    buf[i + 1] = flags
    i = _put(buf, _u16(buf, i + 2, keepalive), props, n)
    i = _str(buf, i, cid)
    if will_topic is not None:
        i = _str(buf, _str(buf, _put(buf, i, will_props, wn), will_topic), will_msg)
    if user is not None:
        i = _str(buf, i, user)
    if password is not None:
        i = _str(buf, i, password)
    return i


def publish_size(topic, length, qos, expiry=None, alias=0, props=()):
    """Bytes of a whole PUBLISH with a payload of length bytes."""
    n = _psize(expiry, alias, props)
    rl = 2 + len(to_bytes(topic)) + (2 if qos else 0) + _length_size(n) + n + length
    return 1 + _length_size(rl) + rl


def _psize(expiry, alias, items):
    n = 0
    seen = 0
    if expiry is not None:
        if not 0 <= expiry <= 4294967295:
            _bad(_A_RANGE, MESSAGE_EXPIRY, expiry, 0, 4294967295)
        n = 5
        seen = 1 << _T[(MESSAGE_EXPIRY << 2) + 3]
    if alias:
        if not 0 < alias <= 65535:
            _bad(_A_RANGE, TOPIC_ALIAS, alias, 1, 65535)
        n += 3
        seen |= 1 << _T[(TOPIC_ALIAS << 2) + 3]
    return n + _size(items, _PUBLISH, seen)


def publish_header(buf, topic, length, qos=0, retain=False, dup=False, pid=0, off=0, expiry=None,
                   alias=0, props=()):
    """Fixed header, variable header and properties of a PUBLISH whose
    payload has length bytes; returns the offset where the payload goes.
    expiry: Message Expiry Interval in seconds (None: never). alias: Topic
    Alias (0: none); with an alias the topic may be empty (b""), the one the
    broker was given with that alias before. props: the other properties,
    (identifier, value) pairs."""
    _check_qos(qos)
    topic = to_bytes(topic)
    if topic or not alias:
        check_topic(topic)
    n = _psize(expiry, alias, props)
    rl = 2 + len(topic) + _length_size(n) + n + length
    if qos:
        _check_pid(pid)
        rl += 2
    elif dup:
        raise ValueError(why(11))  # codec's DUP_QOS0
    i = _str(buf, _header(buf, 0x30 | (8 if dup else 0) | qos << 1 | (1 if retain else 0), rl, off),
             topic)
    if qos:
        i = _u16(buf, i, pid)
    i = put_length(buf, i, n)
    if expiry is not None:
        buf[i] = MESSAGE_EXPIRY
        i = _u32(buf, i + 1, expiry)
    if alias:
        buf[i] = TOPIC_ALIAS
        i = _u16(buf, i + 1, alias)
    return _items(buf, i, props)


def publish(buf, topic, payload, qos=0, retain=False, dup=False, pid=0, off=0, expiry=None, alias=0,
            props=()):
    payload = to_bytes(payload)
    n = len(payload)
    i = publish_header(buf, topic, n, qos, retain, dup, pid, off, expiry, alias, props)
    buf[i:i + n] = payload
    return i + n


def ack(buf, type, pid, code=0, props=(), off=0):
    """PUBACK, PUBREC, PUBREL or PUBCOMP with reason code and properties;
    in the short form the spec asks for when they are 0 and none."""
    _check_pid(pid)
    n = _size(props, type)
    rl = 2 if not (code or n) else 3 if not n else 3 + _length_size(n) + n
    i = _u16(buf, _header(buf, type << 4 | (2 if type == _PUBREL else 0), rl, off), pid)
    if rl == 2:
        return i
    buf[i] = code
    return _put(buf, i + 1, props, n) if n else i + 1


def options(qos, no_local=False, retain_as_published=False, retain_handling=0):
    """A subscription's options byte. retain_handling: 0 send retained
    messages at subscribe, 1 only if the subscription is new, 2 never."""
    _check_qos(qos)
    if not 0 <= retain_handling <= 2:
        _bad(_A_OPTIONS, retain_handling)
    return qos | (4 if no_local else 0) | (8 if retain_as_published else 0) | retain_handling << 4


def subscribe(buf, pid, subs, sub_id=0, props=(), off=0):
    """subs: (topic filter, options byte) pairs (options(): QoS in bits 0-1).
    sub_id: Subscription Identifier (0: none), handed back on every PUBLISH
    that matches."""
    f = filters()
    _check_pid(pid)
    if not subs:
        raise ValueError(why(12))  # codec's NO_FILTER_SUB
    items = ((SUBSCRIPTION_ID, sub_id),) + tuple(props) if sub_id else props
    n = _size(items, _SUBSCRIBE)
    rl = 2 + _length_size(n) + n
    for t, o in subs:
        if o & 0xC0 or o & 3 == 3 or o >> 4 == 3:
            _bad(_A_OPTIONS, o)
        t = to_bytes(t)
        f.check_filter(t, 0, len(t))
        rl += 3 + len(t)
    i = _put(buf, _u16(buf, _header(buf, _SUBSCRIBE << 4 | 2, rl, off), pid), items, n)
    for t, o in subs:
        i = _str(buf, i, to_bytes(t))
        buf[i] = o
        i += 1
    return i


def unsubscribe(buf, pid, topics, props=(), off=0):
    f = filters()
    _check_pid(pid)
    if not topics:
        raise ValueError(why(13))  # codec's NO_FILTER_UNSUB
    n = _size(props, _UNSUBSCRIBE)
    rl = 2 + _length_size(n) + n
    for t in topics:
        t = to_bytes(t)
        f.check_filter(t, 0, len(t))
        rl += 2 + len(t)
    i = _put(buf, _u16(buf, _header(buf, _UNSUBSCRIBE << 4 | 2, rl, off), pid), props, n)
    for t in topics:
        i = _str(buf, i, to_bytes(t))
    return i


def disconnect(buf, code=0, props=(), off=0):
    """DISCONNECT with reason code and properties (Session Expiry Interval:
    change it as the link closes); 2 bytes when they are 0 and none."""
    n = _size(props, _DISCONNECT)
    rl = 0 if not (code or n) else 1 if not n else 1 + _length_size(n) + n
    i = _header(buf, _DISCONNECT << 4, rl, off)
    if not rl:
        return i
    buf[i] = code
    return _put(buf, i + 1, props, n) if n else i + 1


# -- packets in ---------------------------------------------------------------

def parse(r, type, flags, i, end):
    """Reader r's packet of type at r.buf[i:end] (the body, after the fixed
    header): its fields into r. Without properties r.p0 == r.p1."""
    b = r.buf
    r.p0 = r.p1 = r.code = 0
    if type == _PUBLISH:
        parse_publish(r, flags, i, end)
    elif type == _PUBACK or type == _PUBREC or type == _PUBREL or type == _PUBCOMP:
        r.pid = _pid(b, i, end, type)
        if end - i > 2:
            _code(r, b[i + 2], type, _PUBACK_CODES if type < _PUBREL else _PUBREL_CODES)
        if end - i > 3:
            _whole(r, i + 3, end, type)
    elif type == _SUBACK or type == _UNSUBACK:
        r.pid = _pid(b, i, end, type)
        j = walk(r, i + 2, end, type)
        if j == end:
            _fail(PROTOCOL_ERROR, _E_NO_CODES, type)
        codes = _SUBACK_CODES if type == _SUBACK else _UNSUBACK_CODES
        for k in range(j, end):
            if b[k] not in codes:
                _fail(PROTOCOL_ERROR, _E_CODE, type, b[k])
        r.payload = r.mv[j:end]
    elif type == _CONNACK:
        if end - i < 3:
            _fail(MALFORMED, _E_SHORT, type, end - i)
        if b[i] & 0xFE:
            _fail(MALFORMED, _E_CONNACK_FLAGS)
        _code(r, b[i + 1], type, _CONNACK_CODES)
        if b[i] and r.code:
            _fail(PROTOCOL_ERROR, _E_PRESENT_REFUSED, r.code)
        r.session_present = bool(b[i])
        _whole(r, i + 2, end, type)
    elif type == _DISCONNECT:
        if end > i:
            _code(r, b[i], type, _DISCONNECT_CODES)
        if end - i > 1:
            _whole(r, i + 1, end, type)
    elif type == _PINGRESP:
        if end > i:
            _fail(MALFORMED, _E_TRAILING, type, end - i)
    else:
        r._from_client(type, i, end)  # what only a broker is sent


def _pid(b, i, end, type):
    if end - i < 2:
        _fail(MALFORMED, _E_SHORT, type, end - i)
    pid = _n16(b, i)
    if not pid:
        _fail(PROTOCOL_ERROR, _E_PID_ZERO, type)
    return pid


def _code(r, c, type, codes):
    if c not in codes:
        _fail(PROTOCOL_ERROR, _E_CODE, type, c)
    r.code = c


def _whole(r, i, end, type):
    # A property block that must end where its packet does.
    if walk(r, i, end, type) != end:
        _fail(MALFORMED, _E_TRAILING, type, end - r.p1)


def parse_publish(r, flags, i, end):
    """Reader r's PUBLISH at r.buf[i:end]: topic (empty when the broker sent
    only a Topic Alias: get(r.buf, TOPIC_ALIAS, 0, r.p0, r.p1)), pid, the
    span of the properties, payload: views, nothing copied."""
    b = r.buf
    if end - i < 2:
        _fail(MALFORMED, _E_SHORT, _PUBLISH, end - i)
    j = i + 2 + _n16(b, i)
    if j > end:
        _fail(MALFORMED, _E_SHORT, _PUBLISH, end - i)
    if not filters().utf8_ok(b, i + 2, j):
        _fail(MALFORMED, _E_TOPIC_UTF8)
    for k in range(i + 2, j):
        if b[k] == 43 or b[k] == 35:
            _fail(PROTOCOL_ERROR, _E_TOPIC_WILD)
    r.topic = r.mv[i + 2:j]
    empty = j == i + 2
    if flags & 6:
        r.pid = _pid(b, j, end, _PUBLISH)
        j += 2
    else:
        r.pid = 0
    j = walk(r, j, end, _PUBLISH)
    if empty and not find(b, r.p0, r.p1, TOPIC_ALIAS):
        _fail(PROTOCOL_ERROR, _E_TOPIC_EMPTY)
    r.payload = r.mv[j:end]


# -- the session's part: Session5 --------------------------------------------

_ALIASES = const(8)  # Topic Alias Maximum we offer: inbound aliases kept per link
_WAIT_PUBREC = const(2)  # session.py's slot state
_MORE = const(6)  # bytes MQTT 5 adds to a PUBLISH of ours at most: property length, expiry
_E_ALIAS_RANGE = const(26)
_E_ALIAS_UNKNOWN = const(27)
_E_LIMIT = const(28)
_E_REFUSED = const(29)
_E_SERVER_GONE = const(30)
_E_REJECTED = const(31)


class Reader5(Reader):
    """codec.Reader for MQTT 5: packets decoded by parse(), and the inbound
    topic aliases of the link (a PUBLISH that sets one is remembered, one
    that sends only the alias gets its topic back)."""

    def reset(self):
        Reader.reset(self)
        self.aliases = [None] * _ALIASES

    def _parse(self, type, flags, i, end):
        parse(self, type, flags, i, end)
        if type == _PUBLISH:
            at = find(self.buf, self.p0, self.p1, TOPIC_ALIAS)
            if at:
                a = _n16(self.buf, at)
                if a > _ALIASES:
                    _fail(0x94, _E_ALIAS_RANGE, a, _ALIASES)
                if len(self.topic):
                    self.aliases[a - 1] = bytes(self.topic)
                elif self.aliases[a - 1] is None:
                    _fail(PROTOCOL_ERROR, _E_ALIAS_UNKNOWN, a)
                else:
                    self.topic = self.aliases[a - 1]


class Session5(Session):
    """session.Session speaking MQTT 5 (Front makes one for level=5): what
    CONNACK says is obeyed, refused messages are REJECTED events, a
    DISCONNECT from the broker says why. expiry: the Session Expiry
    Interval a session that is not clean asks for (never ends, as in 3.1.1:
    MQTT 5 would end it with the link)."""

    def __init__(self, *args):
        Session.__init__(self, *args)
        from . import v5
        self.v5 = v5  # what Session's own MQTT 5 branches call
        self.rx = Reader5(len(self.rx.buf), 5)
        self.limit = self.size - _ACK_ROOM  # the largest packet that may go out
        self.expiry = 4294967295

    def fits(self, n):
        Session.fits(self, n)
        if n > self.limit:
            raise ValueError(_words(_E_LIMIT, (n, self.limit + _MORE)))

    def publish(self, topic, payload, qos, retain, now, deadline=0, latest=False):
        n = publish_size(topic, len(payload), qos)
        if n > self.limit:
            self.fits(n)
        return Session.publish(self, topic, payload, qos, retain, now, deadline, latest)

    def _connack(self, r, now):
        # What the broker's CONNACK says: a refusal in words; how many QoS
        # 1/2 messages it takes at once (the window), the keepalive it
        # wants, the client id it gave, the largest packet it takes.
        if self.state == _CONNECTING:
            b = r.buf
            p0 = r.p0
            p1 = r.p1
            if r.code:
                raise ConnectError(r.code, _words(_E_REFUSED, (words(r.code), _said(r))))
            self.window = min(len(self._state), get(b, RECEIVE_MAXIMUM, 65535, p0, p1))
            ka = get(b, SERVER_KEEP_ALIVE, -1, p0, p1)
            if ka >= 0:
                self.keepalive = ka
                self.ping_timeout_ms = ka * 1000 or 30000
            cid = get(b, ASSIGNED_CLIENT_ID, None, p0, p1)
            if cid:
                self.client_id = cid
            self.limit = self.size - _ACK_ROOM
            most = get(b, MAXIMUM_PACKET_SIZE, 0, p0, p1) - _MORE
            if 0 < most < self.limit:
                self.limit = most
        Session._connack(self, r, now)

    def _resend(self, key, dup):
        # Outbox message key as an MQTT 5 PUBLISH, with what is left of its
        # expiry. The outbox keeps the 3.1.1 packet (what a 3.1.1 client
        # stores): it is read in a little after t1, then its header is
        # written again in front of the payload, which stays where it is.
        st = self.store
        b = self.tx
        size = st.size(key)
        n = 1  # the stored packet's remaining length takes n bytes
        while _length_size(size - 1 - n) != n:
            n += 1
        rl = size - 1 - n
        expiry = left(st.deadline(key))
        e = 0 if expiry is None else 5
        m = _length_size(rl + 1 + e)
        start = self.t1
        k = start + m - n + 1 + e
        if st.get(key, b, k) == k:
            return  # lost by the store
        b[start] = b[k] | (8 if dup else 0)
        i = put_length(b, start + 1, rl + 1 + e)
        j = k + 1 + n
        for x in range(2 + _n16(b, j) + (2 if b[k] & 6 else 0)):  # topic and pid; i < j: forward is safe
            b[i] = b[j]
            i += 1
            j += 1
        b[i] = e
        if e:
            b[i + 1] = MESSAGE_EXPIRY
            _u32(b, i + 2, expiry)
        self.t1 = start + 1 + m + rl + 1 + e

    def _done(self, i, now):
        # A reason code of 0x80 or more ends the flow undelivered.
        e = Session._done(self, i, now)
        return _REJECTED if self.rx.code >= 0x80 else e

    def _handle(self, t, now):
        r = self.rx
        if t == _PUBREC and r.code >= 0x80:
            i = self._slot(r.pid, _WAIT_PUBREC)
            if i >= 0:
                return self._done(i, now)  # refused: no PUBREL
        if t == _DISCONNECT:
            self._fail(LinkDown(_words(_E_SERVER_GONE, (words(r.code, _DISCONNECT), _said(r)))))
        return Session._handle(self, t, now)


def left(deadline):
    """A deadline (wall-clock seconds, 0: none) as the Message Expiry
    Interval that is left of it (None: none)."""
    return max(0, deadline - wall()) if deadline else None


def start(s):
    """Session s's CONNECT: it can hold as many inbound QoS 1/2 messages as
    its table of held ids, and take packets as large as its buffer. A
    session that is not clean lasts until the broker is told otherwise (as
    in 3.1.1: MQTT 5 would end it with the link)."""
    props = ((RECEIVE_MAXIMUM, min(s.store.held_max, 65535)), (TOPIC_ALIAS_MAXIMUM, _ALIASES),
             (MAXIMUM_PACKET_SIZE, s.size))
    if not s.clean:  # s.expiry: seconds the broker keeps it after the link
        props = ((SESSION_EXPIRY, s.expiry),) + props
    w = s.will
    return connect(s.tx, s.client_id, s.clean, s.keepalive, w[0] if w else None, w[1] if w else b"",
                   w[2] if w else 0, w[3] if w else False, s.user, s.password, props)


def _said(r):
    # The Reason String of reader r's packet, if it has one.
    why = get(r.buf, REASON_STRING, None, r.p0, r.p1)
    return ": " + why.decode() if why else ""


def rejected(f):
    """Front f's QoS 1/2 message the broker refused (a PUBACK or PUBREC
    with a reason code of 0x80 or more, or PUBCOMP's 0x92): counted in
    f.rejected, said in f.last_error, and handed to f.on_rejected(pid,
    code) if the application set one."""
    s = f.s
    r = s.rx
    f.rejected = getattr(f, "rejected", 0) + 1
    f.last_error = MQTTError(_words(_E_REJECTED, (s.done_pid, words(r.code), _said(r))))
    cb = getattr(f, "on_rejected", None)
    if cb:
        cb(s.done_pid, r.code)

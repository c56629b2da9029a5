# MQTT 5 properties as an application names, writes and reads them: the
# public names of every property identifier, property blocks written
# (checked before anything is written), the user properties of a block, and
# the properties of the message a callback was called for. Properties are
# (identifier, value) pairs: a number, a str or bytes, a (name, value) pair
# for USER_PROPERTY.
#
#   from holdfast.mqtt5 import properties as p
#   c.publish(b"req", b"ping", False, 1, props=((p.RESPONSE_TOPIC, "answer"),))
#   p.prop(c, p.CORRELATION_DATA)  # in the callback
from ..codec import to_bytes, _length_size, put_length, _u16, _str, _fit
from .wire import _T, _words, _n16, _u32, _skip, get

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

_PUBLISH = const(3)
_LAST = const(0x2A)
_MAX_VARINT = const(268435455)
# The property types of wire.py's table _T, the same numbers.
_BYTE = const(1)
_U16 = const(2)
_U32 = const(3)
_VARINT = const(4)
_PAIR = const(7)
_REPEAT = const(8)
_NONZERO = const(16)

# Error reasons, by number; the words are in reasons.py.
_A_UNKNOWN = const(19)
_A_NOT_IN = const(20)
_A_TWICE = const(21)
_A_RANGE = const(22)
_A_STR_LONG = const(24)
_A_SUB_ID_OUT = const(25)


def bad(n, *args):
    """ValueError with the words of error n (reasons.py): what a caller gave
    that MQTT 5 cannot carry."""
    raise ValueError(_words(n, args))


# -- properties out -----------------------------------------------------------

def size(items, type, seen=0):
    """Bytes of the properties items ((identifier, value) pairs) in a packet
    of type: each one checked, before anything is written. seen: the
    duplicate mask of those the caller writes itself."""
    n = 0
    for p, v in items:
        k = _T[p << 2] if 0 < p <= _LAST else 0
        if not k:
            bad(_A_UNKNOWN, p)
        if not (_T[(p << 2) + 1] << 8 | _T[(p << 2) + 2]) >> type & 1:
            bad(_A_NOT_IN, type, p)
        if p == SUBSCRIPTION_ID and type == _PUBLISH:
            bad(_A_SUB_ID_OUT)  # only a broker puts it on a PUBLISH
        if not k & _REPEAT or p == SUBSCRIPTION_ID:  # it repeats only in a broker's PUBLISH
            m = 1 << _T[(p << 2) + 3]
            if seen & m:
                bad(_A_TWICE, p)
            seen |= m
        t = k & 7
        if t <= _VARINT:
            top = 1 if t == _BYTE else 65535 if t == _U16 else 4294967295 if t == _U32 else _MAX_VARINT
            low = 1 if k & _NONZERO else 0
            if not low <= v <= top:
                bad(_A_RANGE, p, v, low, top)
            n += 1 + (b"\x01\x02\x04"[t - 1] if t < _VARINT else _length_size(v))
        elif t == _PAIR:
            n += 1 + slen(v[0]) + slen(v[1])
        else:
            n += 1 + slen(v)
    return n


def slen(s):
    """Bytes of string s as MQTT writes it (its length, then its UTF-8
    bytes); ValueError past 65535."""
    n = len(to_bytes(s))
    if n > 65535:
        bad(_A_STR_LONG, n)
    return 2 + n


def put(buf, i, items, n):
    """Writes property length n, then items, checked by size()."""
    return write(buf, put_length(buf, i, n), items)


def write(buf, i, items):
    """Writes items (checked by size()) at buf[i]; returns the offset after."""
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
    n = size(items, type)
    _fit(buf, off, _length_size(n) + n)
    return put(buf, off, items, n)


def sized(items):
    """Bytes of the properties items ((identifier, value) pairs) a session's
    PUBLISH carries besides the expiry and alias it sets itself; checked."""
    return size(items, _PUBLISH, 1 << _T[(MESSAGE_EXPIRY << 2) + 3] | 1 << _T[(TOPIC_ALIAS << 2) + 3])


# -- properties in ------------------------------------------------------------

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


def prop(client, p, default=None):
    """Property p (MESSAGE_EXPIRY, RESPONSE_TOPIC, CORRELATION_DATA, ...) of
    the message client's callback was called for, read where it arrived:
    valid during the callback only. A number, or the bytes of a string or
    binary; default when the message has none. User properties: user()."""
    r = client.session.rx
    return get(r.buf, p, default, r.p0, r.p1)


def user(client):
    """The user properties of the message client's callback was called for
    (valid during the callback only): a list of (name, value) bytes."""
    r = client.session.rx
    return pairs(r.buf, r.p0, r.p1)

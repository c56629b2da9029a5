# What every level-5 link reads, and what the rest of the package builds
# on: the property table, a property block checked (walk) and read (get,
# find), the integers MQTT 5 adds (four bytes, variable), CONNACK, the
# acknowledgements, DISCONNECT and PINGRESP decoded with their reason codes,
# and V5Error raised in words (reasons.py, loaded with the first error).
# Same rules as codec.py: decoders read a packet in a Reader's buffer
# (r.buf, body at buf[i:end]) and set its fields (pid, code, p0/p1: the span
# of the properties, which get() reads).
from ..codec import _length_size
from ..session import wall

# Packet types (codec.py's).
_CONNACK = const(2)
_PUBACK = const(4)
_PUBREC = const(5)
_PUBREL = const(6)
_PUBCOMP = const(7)
_PINGRESP = const(13)
_DISCONNECT = const(14)

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
# The types of the table's kinds: properties.py names the same numbers
# (private const() names are folded where they are used, so they cannot be
# imported, and public ones would cost every level-5 client a name each).
_BYTE = const(1)  # every one-byte property is a 0/1 flag
_U16 = const(2)
_U32 = const(3)
_VARINT = const(4)
_UTF8 = const(5)
_BINARY = const(6)
_PAIR = const(7)
_REPEAT = const(8)
_NONZERO = const(16)

# The reason codes each packet may carry (table 2-6 of MQTT 5.0); SUBACK's
# and UNSUBACK's are in subscriptions.py.
_CONNACK_CODES = b"\x00\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8c\x90\x95\x97\x99\x9a\x9b\x9c\x9d\x9f"
_PUBACK_CODES = b"\x00\x10\x80\x83\x87\x90\x91\x97\x99"  # and PUBREC
_PUBREL_CODES = b"\x00\x92"  # and PUBCOMP
_DISCONNECT_CODES = (b"\x00\x04\x80\x81\x82\x83\x87\x89\x8b\x8c\x8d\x8e\x8f\x90\x93\x94\x95\x96\x97"
                     b"\x98\x99\x9a\x9b\x9c\x9d\x9e\x9f\xa0\xa1\xa2")

# Error reasons, by number; the words are in reasons.py.
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
_E_FROM_CLIENT = const(36)  # codec's: what only a broker is sent

# The inbound topic aliases a client offers in CONNECT (session.start) and
# keeps per link (inbound.alias_in).
ALIASES = const(8)


def _words(n, args, code=-1):
    from .reasons import text  # the words load only with an error to explain
    return text(n, args, code)


def _fail(code, n, *args):
    from ..errors import V5Error  # errors/broker.py: loads with the first error
    raise V5Error(code, _words(n, args, code))


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


def left(deadline):
    """A deadline (wall-clock seconds, 0: none) as the Message Expiry
    Interval that is left of it (None: none)."""
    return max(0, deadline - wall()) if deadline else None


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
        elif t >= _UTF8:
            i = _string(b, i, p1, type, p, t)
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


def _string(b, i, end, type, p, t):
    # Offset after the value of property p at b[i]: a string (UTF-8), a
    # pair of them, or binary data (t: its kind).
    if t == _PAIR:
        i = _string(b, i, end, type, p, _UTF8)
    if i + 2 > end:
        _fail(_MALFORMED, _E_VALUE_PAST, type, p)
    j = i + 2 + _n16(b, i)
    if j > end:
        _fail(_MALFORMED, _E_VALUE_PAST, type, p)
    if t != _BINARY:
        import holdfast.topics as f  # loaded with the first string property
        if not f.utf8_ok(b, i + 2, j):
            _fail(_MALFORMED, _E_UTF8, type, p)
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
    is not there. User properties: properties.pairs()."""
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


# -- packets in ---------------------------------------------------------------

def parse(r, type, flags, i, end):
    """Reader r's CONNACK, acknowledgement, DISCONNECT or PINGRESP at
    r.buf[i:end] (the body, after the fixed header): its fields into r,
    after session.parse() cleared them. Without properties r.p0 == r.p1."""
    b = r.buf
    if type == _PUBACK or type == _PUBREC or type == _PUBREL or type == _PUBCOMP:
        r.pid = packet_id(b, i, end, type)
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
        from ..codec import protocol_error
        raise protocol_error(_E_FROM_CLIENT, type)  # CONNECT, SUBSCRIBE, UNSUBSCRIBE, PINGREQ


def packet_id(b, i, end, type):
    """The packet id at b[i] of a packet of type that ends at end: there,
    and not 0."""
    if end - i < 2:
        _fail(_MALFORMED, _E_SHORT, type, end - i)
    n = _n16(b, i)
    if not n:
        _fail(_PROTOCOL_ERROR, _E_PID_ZERO, type)
    return n


def _code(r, c, type, codes):
    if c not in codes:
        _fail(_PROTOCOL_ERROR, _E_CODE, type, c)
    r.code = c


def _whole(r, i, end, type):
    # A property block that must end where its packet does.
    if walk(r, i, end, type) != end:
        _fail(_MALFORMED, _E_TRAILING, type, end - r.p1)

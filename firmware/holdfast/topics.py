# The subscription side of the codec: SUBSCRIBE and UNSUBSCRIBE encoders,
# topic filter and UTF-8 checks, and string() (a length-prefixed string
# inside its packet: inbound.py's topic, broker.py's fields); inbound.py
# decodes the SUBACK. Loaded on first use (a subscribe, an inbound PUBLISH or SUBACK):
# a sensor that only publishes never carries it.
from . import codec

_SUBSCRIBE = const(8)  # packet types (codec.py)
_UNSUBSCRIBE = const(10)

# Error reasons (reasons.py has the words).
_E_NO_FILTER_SUB = const(12)
_E_NO_FILTER_UNSUB = const(13)
_E_FILTER_EMPTY = const(14)
_E_FILTER_UTF8 = const(15)
_E_FILTER_WILD = const(16)
_E_LEN_PAST = const(18)
_E_STR_PAST = const(19)


def subscribe(buf, pid, filters, off=0):
    """filters: a sequence of (topic filter, QoS) pairs."""
    codec._check_pid(pid)
    if not filters:
        raise ValueError(codec.why(_E_NO_FILTER_SUB))
    rl = 2
    for f, q in filters:
        codec._check_qos(q)
        f = codec.to_bytes(f)
        check_filter(f, 0, len(f))
        rl += 3 + len(f)
    i = codec._u16(buf, codec._header(buf, _SUBSCRIBE << 4 | 2, rl, off), pid)
    for f, q in filters:
        i = codec._str(buf, i, codec.to_bytes(f))
        buf[i] = q
        i += 1
    return i


def unsubscribe(buf, pid, topics, off=0):
    """An UNSUBSCRIBE packet in buf: subscribe()'s counterpart (topics: a
    sequence of topic filters)."""
    codec._check_pid(pid)
    if not topics:
        raise ValueError(codec.why(_E_NO_FILTER_UNSUB))
    rl = 2
    for f in topics:
        f = codec.to_bytes(f)
        check_filter(f, 0, len(f))
        rl += 2 + len(f)
    i = codec._u16(buf, codec._header(buf, _UNSUBSCRIBE << 4 | 2, rl, off), pid)
    for f in topics:
        i = codec._str(buf, i, codec.to_bytes(f))
    return i


def utf8_ok(buf, i, end):
    """Well-formed UTF-8 without U+0000 (3.1.1 section 1.5.3), checked in place."""
    while i < end:
        c = buf[i]
        if c < 0x80:
            if not c:
                return False
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            n = 1
            lo = 0x80
            hi = 0xBF
        elif 0xE0 <= c <= 0xEF:
            n = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        elif 0xF0 <= c <= 0xF4:
            n = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        else:
            return False
        if i + n >= end:
            return False
        if not lo <= buf[i + 1] <= hi:
            return False
        for k in range(2, n + 1):
            if not 0x80 <= buf[i + k] <= 0xBF:
                return False
        i += n + 1
    return True


def check_filter(buf, i, end):
    """Raise ValueError unless buf[i:end] is a valid topic filter."""
    if i >= end:
        raise ValueError(codec.why(_E_FILTER_EMPTY))
    start = i
    if not utf8_ok(buf, i, end):
        raise ValueError(codec.why(_E_FILTER_UTF8, bytes(buf[start:end])))
    while i < end:
        c = buf[i]
        if c == 35 or c == 43:  # '#' or '+' must fill a whole level; '#' must be last
            if (i > start and buf[i - 1] != 47) or (i + 1 < end and (c == 35 or buf[i + 1] != 47)):
                raise ValueError(codec.why(_E_FILTER_WILD, bytes(buf[start:end])))
        i += 1


def string(r, i, end, what):
    """The offset after the length-prefixed string at r.buf[i], which must
    end by end (what: the field, for the error)."""
    if i + 2 > end:
        raise codec.protocol_error(_E_LEN_PAST, what)
    j = i + 2 + (r.buf[i] << 8 | r.buf[i + 1])
    if j > end:
        raise codec.protocol_error(_E_STR_PAST, what, j - i - 2)
    return j

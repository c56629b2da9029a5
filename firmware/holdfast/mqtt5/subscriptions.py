# The subscription side of MQTT 5, loaded with the first subscribe() or
# SUBACK: subscription options (No Local, Retain As Published, Retain
# Handling, a Subscription Identifier), SUBSCRIBE and UNSUBSCRIBE written,
# SUBACK and UNSUBACK decoded with their reason codes.
from ..codec import to_bytes, why, _header, _length_size, _u16, _str, _check_pid, _check_qos
from .wire import _fail, packet_id, walk
from .properties import bad, size, put

_SUBSCRIPTION_ID = const(0x0B)
_SUBSCRIBE = const(8)
_SUBACK = const(9)
_UNSUBSCRIBE = const(10)
_PROTOCOL_ERROR = const(0x82)
_MAX_VARINT = const(268435455)

_SUBACK_CODES = b"\x00\x01\x02\x80\x83\x87\x8f\x91\x97\x9e\xa1\xa2"
_UNSUBACK_CODES = b"\x00\x11\x80\x83\x87\x8f\x91"

# Error reasons, by number; the words are in reasons.py.
_E_CODE = const(9)
_E_NO_CODES = const(18)
_A_RANGE = const(22)
_A_OPTIONS = const(23)


def options(qos, no_local=False, retain_as_published=False, retain_handling=0):
    """A subscription's options byte. retain_handling: 0 send retained
    messages at subscribe, 1 only if the subscription is new, 2 never."""
    _check_qos(qos)
    if not 0 <= retain_handling <= 2:
        bad(_A_OPTIONS, retain_handling)
    return qos | (4 if no_local else 0) | (8 if retain_as_published else 0) | retain_handling << 4


def sub_options(qos, no_local=False, retain_as_published=False, retain_handling=0, sub_id=0):
    """subscribe()'s keyword arguments as the QoS a session's filter keeps:
    the options byte, and the Subscription Identifier (sub_id, 0: none)
    above it, which every PUBLISH the filter matches carries back
    (properties.prop(client, SUBSCRIPTION_ID) in the callback)."""
    if not 0 <= sub_id <= _MAX_VARINT:
        bad(_A_RANGE, _SUBSCRIPTION_ID, sub_id, 1, _MAX_VARINT)
    return options(qos, no_local, retain_as_published, retain_handling) | sub_id << 8


def subscribe(buf, pid, subs, sub_id=0, props=(), off=0):
    """subs: (topic filter, options byte) pairs (options(): QoS in bits 0-1).
    sub_id: Subscription Identifier (0: none), handed back on every PUBLISH
    that matches."""
    import holdfast.topics as f  # loaded on first use
    _check_pid(pid)
    if not subs:
        raise ValueError(why(12))  # codec's NO_FILTER_SUB
    items = ((_SUBSCRIPTION_ID, sub_id),) + tuple(props) if sub_id else props
    n = size(items, _SUBSCRIBE)
    rl = 2 + _length_size(n) + n
    for t, o in subs:
        if o & 0xC0 or o & 3 == 3 or o >> 4 == 3:
            bad(_A_OPTIONS, o)
        t = to_bytes(t)
        f.check_filter(t, 0, len(t))
        rl += 3 + len(t)
    i = put(buf, _u16(buf, _header(buf, _SUBSCRIBE << 4 | 2, rl, off), pid), items, n)
    for t, o in subs:
        i = _str(buf, i, to_bytes(t))
        buf[i] = o
        i += 1
    return i


def unsubscribe(buf, pid, topics, props=(), off=0):
    import holdfast.topics as f  # loaded on first use
    _check_pid(pid)
    if not topics:
        raise ValueError(why(13))  # codec's NO_FILTER_UNSUB
    n = size(props, _UNSUBSCRIBE)
    rl = 2 + _length_size(n) + n
    for t in topics:
        t = to_bytes(t)
        f.check_filter(t, 0, len(t))
        rl += 2 + len(t)
    i = put(buf, _u16(buf, _header(buf, _UNSUBSCRIBE << 4 | 2, rl, off), pid), props, n)
    for t in topics:
        i = _str(buf, i, to_bytes(t))
    return i


def parse(r, type, i, end):
    """Reader r's SUBACK or UNSUBACK (type) at r.buf[i:end]: pid, the span of
    the properties, payload: a view of the reason codes, one a filter."""
    b = r.buf
    r.pid = packet_id(b, i, end, type)
    j = walk(r, i + 2, end, type)
    if j == end:
        _fail(_PROTOCOL_ERROR, _E_NO_CODES, type)
    codes = _SUBACK_CODES if type == _SUBACK else _UNSUBACK_CODES
    for k in range(j, end):
        if b[k] not in codes:
            _fail(_PROTOCOL_ERROR, _E_CODE, type, b[k])
    r.payload = r.mv[j:end]

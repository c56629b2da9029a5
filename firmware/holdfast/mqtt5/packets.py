# Every MQTT 5 packet a client sends, written from its parts (CONNECT with
# any properties and will properties, PUBLISH with an expiry, a Topic Alias
# and properties, the acknowledgements and DISCONNECT with reason codes):
# for tools and tests, and for an application that writes its own packets.
# The session writes its own (session.py) and never loads this.
# subscriptions.py writes SUBSCRIBE and UNSUBSCRIBE; session.parse() reads
# what a broker sends.
from ..codec import to_bytes, check_topic, why, _header, _length_size, put_length, _u16, _str, _check_pid, _check_qos
from .wire import _T, _u32
from .properties import MESSAGE_EXPIRY, TOPIC_ALIAS, bad, size, slen, put, write

_CONNECT = const(1)
_PUBLISH = const(3)
_PUBREL = const(6)
_DISCONNECT = const(14)
_A_RANGE = const(22)

# Will properties travel in CONNECT but have their own set: packet "type" 0.
WILL = const(0)


def connect(buf, client_id, clean=True, keepalive=0, will_topic=None, will_msg=b"", will_qos=0,
            will_retain=False, user=None, password=None, props=(), will_props=(), off=0):
    """CONNECT at level 5. props, will_props: (identifier, value) pairs."""
    cid = to_bytes(client_id)
    if not 0 <= keepalive <= 65535:
        raise ValueError(why(9, keepalive))  # codec's KEEPALIVE
    n = size(props, _CONNECT)
    rl = 10 + _length_size(n) + n + slen(cid)
    flags = 2 if clean else 0
    if will_topic is not None:
        will_topic = to_bytes(will_topic)
        will_msg = to_bytes(will_msg)
        check_topic(will_topic)
        _check_qos(will_qos)
        flags |= 4 | will_qos << 3 | (0x20 if will_retain else 0)
        wn = size(will_props, WILL)
        rl += _length_size(wn) + wn + slen(will_topic) + slen(will_msg)
    if user is not None:
        user = to_bytes(user)
        flags |= 0x80
        rl += slen(user)
    if password is not None:
        password = to_bytes(password)
        flags |= 0x40
        rl += slen(password)
    i = _header(buf, _CONNECT << 4, rl, off)
    i = _str(buf, i, b"MQTT")
    buf[i] = 5
    buf[i + 1] = flags
    i = put(buf, _u16(buf, i + 2, keepalive), props, n)
    i = _str(buf, i, cid)
    if will_topic is not None:
        i = _str(buf, _str(buf, put(buf, i, will_props, wn), will_topic), will_msg)
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
            bad(_A_RANGE, MESSAGE_EXPIRY, expiry, 0, 4294967295)
        n = 5
        seen = 1 << _T[(MESSAGE_EXPIRY << 2) + 3]
    if alias:
        if not 0 < alias <= 65535:
            bad(_A_RANGE, TOPIC_ALIAS, alias, 1, 65535)
        n += 3
        seen |= 1 << _T[(TOPIC_ALIAS << 2) + 3]
    return n + size(items, _PUBLISH, seen)


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
    return write(buf, i, props)


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
    n = size(props, type)
    rl = 2 if not (code or n) else 3 if not n else 3 + _length_size(n) + n
    i = _u16(buf, _header(buf, type << 4 | (2 if type == _PUBREL else 0), rl, off), pid)
    if rl == 2:
        return i
    buf[i] = code
    return put(buf, i + 1, props, n) if n else i + 1


def disconnect(buf, code=0, props=(), off=0):
    """DISCONNECT with reason code and properties (Session Expiry Interval:
    change it as the link closes); 2 bytes when they are 0 and none."""
    n = size(props, _DISCONNECT)
    rl = 0 if not (code or n) else 1 if not n else 1 + _length_size(n) + n
    i = _header(buf, _DISCONNECT << 4, rl, off)
    if not rl:
        return i
    buf[i] = code
    return put(buf, i + 1, props, n) if n else i + 1

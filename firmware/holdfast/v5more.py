# The rest of MQTT 5.0 (v5.py has what a client that only publishes needs,
# and loads this with more() on first use): the public names of every
# property, encoders for any property (props, connect, publish with topic
# alias and properties, ack and disconnect with reason codes, subscribe
# with options and a Subscription Identifier, unsubscribe), decoders of
# inbound PUBLISH, SUBACK and UNSUBACK, user properties (pairs), inbound
# topic aliases, the re-sending of stored messages and refused messages in
# words. v5.py's codec (walk, get, find, parse, words, Session5, ...) is
# named here too, so this module is the whole MQTT 5 codec.
from .codec import (to_bytes, check_topic, why, protocol_error, _header, _length_size, put_length, _u16,
                    _str, _check_pid, _check_qos, _fit)
from .errors import MQTTError
from .session import Session
from .v5 import (_T, _CONNACK_CODES, _PUBACK_CODES, _PUBREL_CODES, _DISCONNECT_CODES, ALIASES, _fail,
                 _words, _n16, _u32, _varint, _skip, _pid, _said, walk, find, get, words, parse as _parse5,
                 left, start, Session5, Reader5)

# Packet types (codec.py's).
_CONNECT = const(1)
_PUBLISH = const(3)
_PUBREL = const(6)
_CONNACK = const(2)
_PUBACK = const(4)
_PUBCOMP = const(7)
_SUBSCRIBE = const(8)
_SUBACK = const(9)
_UNSUBSCRIBE = const(10)
_UNSUBACK = const(11)
_PINGRESP = const(13)
_DISCONNECT = const(14)

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
# The property types of v5.py's table _T, the same numbers: private const()
# names are folded where they are used, so they cannot be imported, and
# public ones would cost every level-5 client a name each.
_BYTE = const(1)
_U16 = const(2)
_U32 = const(3)
_VARINT = const(4)
_UTF8 = const(5)
_BINARY = const(6)
_PAIR = const(7)
_REPEAT = const(8)
_NONZERO = const(16)

_SUBACK_CODES = b"\x00\x01\x02\x80\x83\x87\x8f\x91\x97\x9e\xa1\xa2"
_UNSUBACK_CODES = b"\x00\x11\x80\x83\x87\x8f\x91"

# Error reasons, by number; the words are in v5words.py.
_E_UNKNOWN = const(0)
_E_VALUE_PAST = const(3)
_E_UTF8 = const(7)
_E_SHORT = const(13)
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
_E_ALIAS_RANGE = const(26)
_E_ALIAS_UNKNOWN = const(27)
_E_CODE = const(9)
_E_REJECTED = const(31)
_E_MAX_QOS = const(32)
_E_NO_RETAIN = const(33)
_ACK_ROOM = const(16)  # session.ACK_ROOM
_CONNECTED = const(3)  # session.CONNECTED


def _bad(n, *args):
    raise ValueError(_words(n, args))

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


def sub_options(qos, no_local=False, retain_as_published=False, retain_handling=0, sub_id=0):
    """subscribe()'s keyword arguments as the QoS a session's filter keeps:
    the options byte, and the Subscription Identifier (sub_id, 0: none)
    above it, which every PUBLISH the filter matches carries back
    (prop(client, SUBSCRIPTION_ID) in the callback)."""
    if not 0 <= sub_id <= _MAX_VARINT:
        _bad(_A_RANGE, SUBSCRIPTION_ID, sub_id, 1, _MAX_VARINT)
    return options(qos, no_local, retain_as_published, retain_handling) | sub_id << 8


def subscribe(buf, pid, subs, sub_id=0, props=(), off=0):
    """subs: (topic filter, options byte) pairs (options(): QoS in bits 0-1).
    sub_id: Subscription Identifier (0: none), handed back on every PUBLISH
    that matches."""
    import holdfast.topics as f  # loaded on first use
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
    import holdfast.topics as f  # loaded on first use
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
    elif type == _CONNACK or type == _DISCONNECT or _PUBACK <= type <= _PUBCOMP or type == _PINGRESP:
        _parse5(r, type, flags, i, end)
    else:
        raise protocol_error(36, type)  # codec's FROM_CLIENT: what only a broker is sent


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
    import holdfast.topics as f
    if not f.utf8_ok(b, i + 2, j):
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




# -- the session's part ---------------------------------------------------------

def string(b, i, end, type, p, t):
    """Offset after the value of property p at b[i] (v5.walk): a string
    (UTF-8), a pair of them, or binary data (t: its kind)."""
    if t == _PAIR:
        i = string(b, i, end, type, p, _UTF8)
    if i + 2 > end:
        _fail(MALFORMED, _E_VALUE_PAST, type, p)
    j = i + 2 + _n16(b, i)
    if j > end:
        _fail(MALFORMED, _E_VALUE_PAST, type, p)
    import holdfast.topics as f
    if t != _BINARY and not f.utf8_ok(b, i + 2, j):
        _fail(MALFORMED, _E_UTF8, type, p)
    return j


def goodbye(s, e):
    """Session s met bytes that break MQTT 5 (a V5Error: its reason code;
    the 3.1.1 reader's errors: malformed packet): a DISCONNECT saying so,
    which the shell writes before it closes the link if the socket takes it
    at once (Shell._link_failed)."""
    if 2 <= s.state <= 3 and s.make_room() >= 3:  # CONNECTING, CONNECTED
        b = s.tx
        i = s.tx_end
        b[i] = 0xE0
        b[i + 1] = 1
        b[i + 2] = getattr(e, "code", MALFORMED)
        s.tx_end = i + 3


def alias_in(r):
    """Reader r (v5.Reader5) has an inbound PUBLISH: a Topic Alias it sets is
    remembered for the link, one it sends alone gets its topic back."""
    at = find(r.buf, r.p0, r.p1, TOPIC_ALIAS)
    if not at:
        return
    a = _n16(r.buf, at)
    if a > ALIASES:
        _fail(0x94, _E_ALIAS_RANGE, a, ALIASES)
    if r.aliases is None:
        r.aliases = [None] * ALIASES
    if len(r.topic):
        r.aliases[a - 1] = bytes(r.topic)
    elif r.aliases[a - 1] is None:
        _fail(PROTOCOL_ERROR, _E_ALIAS_UNKNOWN, a)
    else:
        r.topic = r.aliases[a - 1]


def resend(s, key, dup):
    """Session s's outbox message key as an MQTT 5 PUBLISH, with what is
    left of its expiry. The outbox keeps the 3.1.1 packet (what a 3.1.1
    client stores), with DUP set when its payload starts with the message's
    property block (a varint length, the properties: see session_publish).
    It is read in a little after tx_end, then its header and property length
    are written again in front of the properties and payload, which stay
    where they are."""
    st = s.store
    b = s.tx
    size = st.size(key)
    n = 1  # the stored packet's remaining length takes n bytes
    while _length_size(size - 1 - n) != n:
        n += 1
    rl = size - 1 - n
    expiry = left(st.deadline(key))
    e = 0 if expiry is None else 5
    start = s.tx_end
    k = start + _length_size(rl + 1 + e) - n + 1 + e
    if st.get(key, b, k) == k:
        return  # lost by the store
    j = k + 1 + n
    t = 2 + _n16(b, j) + (2 if b[k] & 6 else 0)  # topic and pid
    v = p = 0
    if b[k] & 8:  # its property block: p bytes after a v-byte length
        p = _varint(b, j + t, k + size)
        v = _length_size(p)
        x = _length_size(p + e)  # what the length of the block sent takes
        rl += x - v + e
        m = _length_size(rl)
        k2 = start + m - n + x + e - v
        if k2 != k:
            k = k2
            st.get(key, b, k)
            j = k + 1 + n
    else:
        rl += 1 + e
        m = _length_size(rl)
    b[start] = b[k] & 0xF7 | (8 if dup else 0)
    i = put_length(b, start + 1, rl)
    for x in range(t):  # i <= j: forward is safe
        b[i] = b[j]
        i += 1
        j += 1
    i = put_length(b, i, p + e)
    if e:
        b[i] = MESSAGE_EXPIRY
        _u32(b, i + 1, expiry)
    s.tx_end = start + 1 + m + rl


def plain(b, start, end):
    """A PUBLISH in b[start:end] that a level-5 client stored with its
    properties (DUP set, the block in front of the payload), as the 3.1.1
    packet without them: what a level-4 client sends of it. Returns its end."""
    n = 1
    while b[start + n] & 0x80:
        n += 1
    j = start + 1 + n
    t = 2 + _n16(b, j) + (2 if b[start] & 6 else 0)
    p = _varint(b, j + t, end)
    q = p + _length_size(p)  # bytes of the block
    rl = end - j - q
    b[start] &= 0xF7
    i = put_length(b, start + 1, rl)
    for x in range(rl):  # i <= j: forward is safe
        b[i] = b[j]
        i += 1
        j += q + 1 if x == t - 1 else 1
    return i


def rejected(f):
    """Shell f's QoS 1/2 message the broker refused (a PUBACK or PUBREC
    with a reason code of 0x80 or more, or PUBCOMP's 0x92): counted in
    f.rejected, said in f.last_error, and handed to f.on_rejected(pid,
    code) if the application set one."""
    s = f.session
    r = s.rx
    f.rejected += 1
    f.last_error = MQTTError(_words(_E_REJECTED, (s.done_pid, words(r.code), _said(r))))
    cb = getattr(f, "on_rejected", None)
    if cb:
        cb(s.done_pid, r.code)


def session_publish(s, topic, payload, qos, retain, now, deadline=0, latest=False):
    """Session5 s's publish() when it asks for what CONNACK did not allow,
    or has properties (s.props, from publish(props=...)). A QoS 1/2 message
    with properties is stored with its property block in front of the
    payload and the record marked (store.MemoryStore.mark), and goes out
    from the outbox by resend(), at once or once it may: what a reboot or a
    new link sends again carries them too."""
    if qos > s.max_qos:
        raise ValueError(_words(_E_MAX_QOS, (qos, s.max_qos)))
    if retain and not s.retain:
        raise ValueError(_words(_E_NO_RETAIN, ()))
    p = s.props
    s.plen = sized(p)
    if qos:
        n = publish_size(topic, len(payload), qos) + s.plen + 2
    else:
        # The bytes out() writes, exactly (fewer once the topic's alias is
        # set): no expiry at QoS 0, an alias while the broker takes them (any
        # alias is 3 bytes), its properties. Checked and waited for alike, so
        # what passes fits tx once it drains. Not n + v5._MORE in the check:
        # that counts an expiry QoS 0 never has, refusing messages that fit.
        n = publish_size(topic, len(payload), 0, left(deadline), s.alias_max, p)
    if n > s.limit:
        s.fits(n)
    if not qos:
        if s.state != _CONNECTED or s.make_room(n) - _ACK_ROOM < n:
            return n  # not queued: offline, or no room now (what the shell may wait for)
        return Session.publish(s, topic, payload, qos, retain, now, deadline, latest)
    if not p:
        return Session.publish(s, topic, payload, qos, retain, now, deadline, latest)
    blk = bytearray(_length_size(s.plen) + s.plen)
    _put(blk, 0, p, s.plen)
    st = s.store
    was = s.state
    st.mark = True
    s.state = -1  # not Session.publish's encoding from the caller's objects: resend() writes it
    try:
        pid = Session.publish(s, topic, blk + to_bytes(payload), qos, retain, now, deadline, latest)
    finally:
        st.mark = False
        s.state = was
    s._fill(now)
    return pid


def sized(items):
    """Bytes of the properties items ((identifier, value) pairs) a session's
    PUBLISH carries besides the expiry and alias it sets itself; checked."""
    return _size(items, _PUBLISH, 1 << _T[(MESSAGE_EXPIRY << 2) + 3] | 1 << _T[(TOPIC_ALIAS << 2) + 3])


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

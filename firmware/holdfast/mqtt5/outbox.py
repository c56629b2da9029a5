# Level-5 messages and the outbox, loaded on first use: a publish() that
# asks for what CONNACK did not allow or has properties, a QoS 1/2 message
# stored with its property block, every stored message sent again with
# what is left of its expiry (resend), and a record a level-5 client stored
# read back by a level-4 one (plain).
from ..codec import to_bytes, _length_size, put_length
from ..session import Session
from .wire import _words, _n16, _u32, _varint, left
from .properties import sized, put

_CONNECTED = const(3)  # session.CONNECTED
_ACK_ROOM = const(16)  # session.ACK_ROOM
_MESSAGE_EXPIRY = const(0x02)

# Error reasons, by number; the words are in reasons.py.
_E_MAX_QOS = const(32)
_E_NO_RETAIN = const(33)


def _bytes(topic, length, qos, e):
    # Bytes of a whole PUBLISH of ours: its topic, a payload of length
    # bytes, e bytes of properties.
    rl = 2 + len(to_bytes(topic)) + (2 if qos else 0) + _length_size(e) + e + length
    return 1 + _length_size(rl) + rl


def publish(s, topic, payload, qos, retain, now, deadline=0, latest=False):
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
        n = _bytes(topic, len(payload), qos, 0) + s.plen + 2
    else:
        # The bytes session.out() writes, exactly (fewer once the topic's
        # alias is set): an expiry if it has one, an alias while the broker
        # takes them (any alias is 3 bytes), its properties. Checked and
        # waited for alike, so what passes fits tx once it drains. Not n +
        # session._MORE in the check: that counts an expiry a QoS 0 message
        # may not have, refusing messages that fit.
        n = _bytes(topic, len(payload), 0, s.plen + (5 if deadline else 0) + (3 if s.alias_max else 0))
    if n > s.limit:
        s.fits(n)
    if not qos:
        if s.state != _CONNECTED or s.make_room(n) - _ACK_ROOM < n:
            return n  # not queued: offline, or no room now (what the shell may wait for)
        return Session.publish(s, topic, payload, qos, retain, now, deadline, latest)
    if not p:
        return Session.publish(s, topic, payload, qos, retain, now, deadline, latest)
    blk = bytearray(_length_size(s.plen) + s.plen)
    put(blk, 0, p, s.plen)
    st = s.store
    st.mark = True
    s.stored = True  # not encoded from the caller's objects: session.out() sends the record
    try:
        return Session.publish(s, topic, blk + to_bytes(payload), qos, retain, now, deadline, latest)
    finally:
        st.mark = False
        s.stored = False


def resend(s, key, dup):
    """Session s's outbox message key as an MQTT 5 PUBLISH, with what is
    left of its expiry. The outbox keeps the 3.1.1 packet (what a 3.1.1
    client stores), with DUP set when its payload starts with the message's
    property block (a varint length, the properties: see publish()).
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
        b[i] = _MESSAGE_EXPIRY
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

# The subscribe side's rare paths, loaded with the first one taken: a
# subscribe() that failed (no ack in time, refused), filters refused on a
# restore, MQTT 5's subscription options, an UNSUBSCRIBE (its packet), an ack
# of the wrong type, and an inbound PUBLISH larger than the receive buffer (skipped, and acknowledged
# so the broker does not re-send it forever). Each function here is the
# rare part of the subs.py or inbound.py one of its name, or is called by
# name from codec.py, session.py or front.py (big, skip, too_large,
# refusals): a
# subscribed client that meets none of these never carries them.
from . import codec, filters
from . import errors  # errors.X where raised: the class loads with the first failure

_PUBLISH = const(3)  # packet types (codec.py)
_PUBACK = const(4)
_PUBREC = const(5)
_UNSUBSCRIBE = const(10)
_UNSUBACK = const(11)
_GRANTED = const(4)  # a subs.py entry's answer: the last SUBACK code

# Error reasons (reasons.py has the words).
_E_NO_FILTER_UNSUB = const(13)
_E_PUB_EMPTY = const(26)
_E_PUB_PID_PAST = const(29)
_E_TOO_LARGE = const(37)
_E_NO_UNSUBACK = const(48)
_E_RESTORE_REFUSED = const(53)
_E_SUB_REFUSED = const(54)
_E_NO_SUBACK = const(55)
_E_ACK_TYPE = const(63)


def unsubscribe(buf, pid, topics, off=0):
    """An UNSUBSCRIBE packet in buf: filters.subscribe()'s counterpart, here
    because unsubscribing is rare (topics: a sequence of topic filters)."""
    codec._check_pid(pid)
    if not topics:
        raise ValueError(codec.why(_E_NO_FILTER_UNSUB))
    rl = 2
    for f in topics:
        f = codec.to_bytes(f)
        filters.check_filter(f, 0, len(f))
        rl += 2 + len(f)
    i = codec._u16(buf, codec._header(buf, _UNSUBSCRIBE << 4 | 2, rl, off), pid)
    for f in topics:
        i = codec._str(buf, i, codec.to_bytes(f))
    return i


# -- a client's (front.Front c) ------------------------------------------------

def options(c, qos, options):
    """subscribe()'s MQTT 5 keyword arguments (opts) as the QoS the entry
    keeps (v5more.sub_options); ValueError below level 5."""
    v5 = c.session.v5
    if not v5:
        from .v5words import text
        raise ValueError(text(35, ()))
    return v5.more().sub_options(qos, **options)


def answer(c, e, acked):
    """subs.answer()'s failures: why client c's wait for entry e's ack gave
    no granted QoS."""
    if not acked:
        raise errors.MQTTTimeout(codec.why(_E_NO_UNSUBACK if e[1] < 0 else _E_NO_SUBACK, c.timeout_ms))
    v5 = c.session.v5  # MQTT 5 has more refusals than 0x80, in words
    raise errors.SubscribeError(codec.why(_E_SUB_REFUSED, e[0])
                                + (": " + v5.words(e[_GRANTED]) if v5 else ""))


def refusals(c):
    """The session's REFUSED event: the broker refused filters it restored.
    Counted in client c's restore_refused, the last named in its last_error."""
    subs = c.session.subs
    c.restore_refused += subs.nrefused
    c.last_error = errors.SubscribeError(codec.why(_E_RESTORE_REFUSED, subs.refused))


def acked(t, pid):
    """Subs.acked()'s protocol error: the broker answered request pid with
    an ack of the other type, t."""
    if t == _UNSUBACK:
        return codec.protocol_error(_E_ACK_TYPE, "UNSUBACK", pid, "SUBACK")
    return codec.protocol_error(_E_ACK_TYPE, "SUBACK", pid, "UNSUBACK")


# -- an oversize PUBLISH: codec.Reader r's, session s's -------------------------

def big(r, flags, i, total):
    """Reader r's PUBLISH starting at buf[r.start], body at i, is total bytes,
    more than the buffer: skipped whole, PacketTooLarge raised once its
    packet id is in (skip()). Its topic length must leave room for the
    topic and the packet id inside it, or the skip would run past it."""
    end = r.start + total
    j = filters.string(r, i, end, "PUBLISH topic")
    if j == i + 2:
        raise codec.protocol_error(_E_PUB_EMPTY)
    r.type = _PUBLISH
    r.flags = flags
    # For QoS 1/2, the bytes still to pass before the packet id, which the
    # message must be acknowledged with (-1: no id awaited); and the length
    # PacketTooLarge reports (0 once raised). Set here, not by
    # Reader.reset(), so a publish-only client's Reader never names them:
    # reset() zeroes skip, and these are read only while skip is not 0.
    r._pid_at = -1
    if flags & 6:
        if j + 2 > end:
            raise codec.protocol_error(_E_PUB_PID_PAST)
        r._pid_at = j - r.start
    r._big = r.skip = total
    skip(r)


def skip(r):
    """Passes over reader r's oversize PUBLISH as its bytes arrive, whatever
    the read sizes: up to its packet id, then raises PacketTooLarge (once),
    then the rest. True while more of it is awaited (r.next() returns 0)."""
    total = r._big
    pid = 0
    if total and r._pid_at >= 0:
        k = min(r._pid_at, r.end - r.start)
        r.start += k
        r.skip -= k
        r._pid_at -= k
        if r._pid_at or r.end - r.start < 2:
            return True
        pid = r._pid(r.start)
        r._pid_at = -1
    r._big = 0
    k = min(r.skip, r.end - r.start)
    r.start += k
    r.skip -= k
    if total:
        raise errors.PacketTooLarge(codec.why(_E_TOO_LARGE, _PUBLISH, total, len(r.buf)), _PUBLISH, total, pid,
                                    (r.flags >> 1) & 3)
    return r.skip


def too_large(s, e):
    """Skipped whole; acknowledged so the broker does not re-send it forever
    (a QoS 2 message with PUBREC: its PUBREL then gets PUBCOMP)."""
    s.dropped += 1
    if e.pid:
        s._ack(_PUBREC if e.type == _PUBLISH and e.qos == 2 else _PUBACK, e.pid)

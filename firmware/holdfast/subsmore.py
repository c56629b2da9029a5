# The subscribe side's rare paths, loaded with the first one taken: a
# subscribe() that failed (no ack in time, refused), filters refused on a
# restore, MQTT 5's subscription options, an UNSUBSCRIBE (its packet), an ack
# of the wrong type. Each function here is the rare part of the subs.py one
# of its name, or is called by name from front.py (refusals): a subscribed
# client that meets none of these never carries them. (An inbound PUBLISH
# larger than the receive buffer is not one of them: it is passed over by
# codec.Reader and acknowledged by session.py, resident, as what runs when
# the heap may be short must be.)
from . import codec, filters
from . import errors  # errors.X where raised: the class loads with the first failure

_UNSUBSCRIBE = const(10)  # packet types (codec.py)
_UNSUBACK = const(11)
_GRANTED = const(4)  # a subs.py entry's answer: the last SUBACK code

# Error reasons (reasons.py has the words).
_E_NO_FILTER_UNSUB = const(13)
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
    keeps (mqtt5.subscriptions.sub_options); ValueError below level 5."""
    v5 = c.session.v5
    if not v5:
        from .mqtt5.reasons import text
        raise ValueError(text(35, ()))
    import holdfast.mqtt5.subscriptions as m
    return m.sub_options(qos, **options)


def answer(c, e, acked):
    """subs.answer()'s failures: why client c's wait for entry e's ack gave
    no granted QoS."""
    if not acked:
        raise errors.MQTTTimeout(codec.why(_E_NO_UNSUBACK if e[1] < 0 else _E_NO_SUBACK, c.timeout_ms))
    if c.session.v5:  # MQTT 5 has more refusals than 0x80, in words
        from .mqtt5.reasons import words
        raise errors.SubscribeError(codec.why(_E_SUB_REFUSED, e[0]) + ": " + words(e[_GRANTED]))
    raise errors.SubscribeError(codec.why(_E_SUB_REFUSED, e[0]))


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

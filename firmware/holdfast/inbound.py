# What the broker sends a subscriber: inbound PUBLISH packets (parsed, handed
# to the application, acknowledged; QoS 2 held until PUBREL), and the SUBACK
# that answers a subscribe (parsed); and those too large for the receive
# buffer (big(), skip(): skipped, counted, acknowledged). Loaded by the
# session as soon as messages can arrive (ready()), before the first: what
# runs when a message is too large for the heap must find its code and its
# state in place. A sensor that only publishes never carries it.
from . import codec, topics

_PUBLISH = const(3)  # packet types (codec.py)
_PUBACK = const(4)
_PUBREC = const(5)
_PUBREL = const(6)
_PUBCOMP = const(7)
_SUBACK = const(9)
_SUBACK_FAILURE = const(0x80)
_SKIPPED = const(16)  # what codec.Reader.next() returns for an oversize PUBLISH passed over

# Error reasons (reasons.py has the words).
_E_STR_PAST = const(19)
_E_PUB_EMPTY = const(26)
_E_PUB_UTF8 = const(27)
_E_PUB_WILD = const(28)
_E_PUB_PID_PAST = const(29)
_E_SUBACK_EMPTY = const(34)
_E_SUBACK_CODE = const(35)


# -- the codec's part: reader r's buffer --------------------------------------

def parse(r, type, flags, i, end):
    """Reader r's PUBLISH (type 3) at buf[i:end]: topic, pid and payload
    (views); or its SUBACK: pid, and the return codes as payload."""
    b = r.buf
    if type == _SUBACK:
        if end - i < 3:
            raise codec.protocol_error(_E_SUBACK_EMPTY)
        r.pid = r._pid(i)
        for k in range(i + 2, end):
            c = b[k]
            if c > 2 and c != _SUBACK_FAILURE:
                raise codec.protocol_error(_E_SUBACK_CODE, c)
        r.payload = r.mv[i + 2:end]
        return
    j = topics.string(r, i, end, "PUBLISH topic")
    if j == i + 2:
        raise codec.protocol_error(_E_PUB_EMPTY)
    if not topics.utf8_ok(b, i + 2, j):
        raise codec.protocol_error(_E_PUB_UTF8)
    for k in range(i + 2, j):
        if b[k] == 43 or b[k] == 35:
            raise codec.protocol_error(_E_PUB_WILD)
    r.topic = r.mv[i + 2:j]
    if flags & 6:
        if j + 2 > end:
            raise codec.protocol_error(_E_PUB_PID_PAST)
        r.pid = r._pid(j)
        j += 2
    else:
        r.pid = 0
    r.payload = r.mv[j:end]


def ready(r):
    """Reader r may get messages from now on: it decodes them with this
    module (the codec never imports it). The oversize skip's state is the
    Reader's own: pid_at, bytes of the message before its packet id still
    to be read (-1: none awaited, SKIPPED not returned yet; -2: returned);
    length, its bytes."""
    import holdfast.inbound as m  # this module, loaded: the import allocates nothing
    r.inbound = m


def big(r, flags, i, total):
    """Reader r's PUBLISH starting at buf[r.start], body at i, is total
    bytes, more than the buffer: passed over whole (skip()). Its topic
    length must leave room for the topic and the packet id inside it, or
    the skip would run past it."""
    b = r.buf
    n = b[i] << 8 | b[i + 1]
    j = i + 2 + n
    if j > r.start + total:
        raise codec.protocol_error(_E_STR_PAST, "PUBLISH topic", n)
    if not n:
        raise codec.protocol_error(_E_PUB_EMPTY)
    r.type = _PUBLISH
    r.flags = flags
    r.pid = 0
    r.pid_at = -1
    if flags & 6:
        if j + 2 > r.start + total:
            raise codec.protocol_error(_E_PUB_PID_PAST)
        r.pid_at = j - r.start
    r.length = r.skip = total
    return skip(r)


def skip(r):
    """Passes over reader r's oversize PUBLISH as its bytes arrive, whatever
    the read sizes: up to its packet id, which it reads, then the rest.
    SKIPPED once (when the id is in), else 0. Allocates nothing."""
    a = r.pid_at
    if a >= 0:
        k = min(a, r.end - r.start)
        r.start += k
        r.skip -= k
        r.pid_at = a = a - k
        if a or r.end - r.start < 2:
            return 0
        r.pid = r._pid(r.start)
        r.pid_at = -1
    k = min(r.skip, r.end - r.start)
    r.start += k
    r.skip -= k
    if r.pid_at == -1:
        r.pid_at = -2  # reported
        return _SKIPPED
    return 0


# -- the session's part: session s -------------------------------------------

def receive(s, t):
    """The broker's PUBLISH (t 3) or PUBREL (t 6) in s.rx, or one it passed
    over (t 16, SKIPPED): 1 (session.MESSAGE) for a message receive()
    returns, else 0 (a PUBREL, acknowledged; a re-sent copy of a QoS 2
    message already delivered; a skipped one, counted and acknowledged)."""
    r = s.rx
    pid = r.pid
    if t == _SKIPPED:
        # Too large for the receive buffer, passed over: counted, and
        # acknowledged so the broker does not send it again forever (QoS 2
        # with PUBREC: its PUBREL then gets PUBCOMP).
        s.dropped += 1
        if pid:
            s._ack(_PUBREC if r.flags & 6 == 4 else _PUBACK, pid)
        return 0
    h = s.store.held_ids
    if t == _PUBREL:  # the broker released an inbound QoS 2 message: forget its id, PUBCOMP
        # The store full even for this (OutboxFull): the link fails, and the
        # broker sends PUBREL again on the next (docs/engine.md).
        if h is not None:
            h.unhold(pid)
        s._ack(_PUBCOMP, pid)
        return 0
    f = r.flags
    qos = (f >> 1) & 3
    if qos == 2 and h is not None and h.held(pid):
        s._ack(_PUBREC, pid)
        return 0
    s.retained = bool(f & 1)
    s.qos = qos
    s.dup = bool(f & 8)
    s.done_pid = pid
    s.msg_link = s.link  # the link it came by: handled() acknowledges it on that one only
    if s.views:
        s.topic = r.topic
        s.msg = r.payload
    else:
        s.topic = bytes(r.topic)
        s.msg = bytes(r.payload)
    return 1


def handled(s):
    """The application has the message: acknowledge it, on the link it came
    by. A QoS 2 id is held even when that link is gone (the callback closed
    it, say), so the copy the broker sends again is not delivered twice."""
    qos = s.qos
    if qos == 2:
        from .held import table
        table(s.store).hold(s.done_pid)  # never fails: a full table evicts its oldest, counted
    if not qos or s.msg_link != s.link or s.state != 3:  # session.CONNECTED
        return
    s._ack(_PUBACK if qos == 1 else _PUBREC, s.done_pid)


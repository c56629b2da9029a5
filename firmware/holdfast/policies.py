# What the outbox may drop, and when: a passed deadline (expiry), a newer
# value of the same topic (latest), room for a new message (drop_oldest);
# the retry of unacknowledged messages (retry_ms); and set_next_pid, the
# hook for tests of id wrap-around. Loaded the first time one of them is
# used, so a sensor that never sets them does not carry this code.
from time import ticks_diff
from . import codec

_ACK_ROOM = const(16)  # session.py's
_PUBREL = const(6)
_WAIT_PUBCOMP = const(7)

_E_PID_SET = const(39)  # error reason (reasons.py has the words)


def droppable(s, k):
    """Messages not yet sent on this connection, except a QoS 2 message that
    reached PUBREC or that the broker may hold from an earlier connection:
    its id could be reused, and the broker would take the new message for a
    duplicate."""
    q = s.store.qos(k)  # 3: past PUBREC
    return k > s.cursor and q != 3 and not (q == 2 and k <= s.dup_upto)


def replace(s, topic, newest):
    """latest=True, once the message with key newest is stored: drop the
    unsent older messages of topic (counted in s.replaced)."""
    st = s.store
    k = st.find_topic(topic, s.cursor)
    while 0 <= k < newest:
        if droppable(s, k):
            st.done(k)
            s.replaced += 1
        k = st.find_topic(topic, k)


def drop_oldest(s):
    """when_full="drop_oldest": drops the oldest droppable message (counted
    in s.overflowed); False if there is none."""
    st = s.store
    k = st.next(s.cursor)
    while k >= 0 and not droppable(s, k):
        k = st.next(k)
    if k < 0:
        return False
    st.done(k)
    s.overflowed += 1
    return True


def expire(s, wall):
    """Drops the messages whose deadline has passed (wall: seconds, the clock
    the deadlines were set by) and sets s.next_expiry to the earliest left."""
    st = s.store
    soon = 0
    k = st.next(-1)
    while k >= 0:
        d = st.deadline(k)
        if d and d <= wall and droppable(s, k):
            st.done(k)
            s.expired += 1
        elif d > wall and (not soon or d < soon):
            soon = d
        k = st.next(k)
    s.next_expiry = soon


def next_pid(s):
    """The client's set_next_pid(pid), for session s: the id the next QoS 1/2
    message or (UN)SUBSCRIBE tries first, 1..65535 (ids still in use are
    skipped). For tests of id wrap-around."""
    def set_next_pid(pid):
        if not 0 < pid < 65536:
            raise ValueError(codec.why(_E_PID_SET, pid))
        s.next_pid = pid
    return set_next_pid


def retry(s, now):
    """Session s's retry (tick() calls it when s.retry_ms is set): what has
    waited s.retry_ms for its acknowledgement goes out again, with DUP (a
    PUBREL past PUBREC), while tx has room. s.sent_at: when each slot of the
    in-flight table last went out, the session's field for this."""
    st = s._state
    for i in range(s.window):
        w = st[i]
        if w and ticks_diff(now, s.sent_at[i]) >= s.retry_ms:
            n = s.store.size(s._key[i])
            if s.make_room(n) - _ACK_ROOM < n:
                break
            if w == _WAIT_PUBCOMP:
                s._ack(_PUBREL, s._pid[i])
            else:
                s._resend(s._key[i], True)
            s.sent_at[i] = now

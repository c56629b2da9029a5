# The least a test needs to play the I/O shell for a bare Session: apart from
# fakebroker.py so the outbox tests do not load the codec's broker half.
from consts import MESSAGE, DELIVERED
from holdfast.inbound import handled


def drain(s, now=0):
    """Plays the shell: hands each event of s.receive() to the test's hooks
    set on the session (on_message(topic, msg), on_delivered(pid)), then
    acknowledges. Returns the number of events."""
    n = 0
    while True:
        e = s.receive(now)
        if not e:
            return n
        n += 1
        if e == MESSAGE:
            if s.subs:
                s.subs.dispatch(s.topic, s.msg, s.retained)
            f = getattr(s, "on_message", None)
            if f:
                f(s.topic, s.msg)
            handled(s)
        elif e == DELIVERED:
            f = getattr(s, "on_delivered", None)
            if f:
                f(s.done_pid)

# The subscribe side of a session: the filters the application asked for, the
# matching of inbound topics against them, and their restore when the broker
# starts a new session. Loaded on the first subscribe(): a sensor that only
# publishes never carries it.
from array import array
from . import codec as c

_OUT = 4  # restore SUBSCRIBE packets awaiting SUBACK at once
_ACK_ROOM = 16  # send buffer bytes left for acknowledgements (as session.py)


def subscribe(s, filters):
    """Session s queues SUBSCRIBE for [(filter, qos), ...]; returns its
    message id. ValueError if a filter could not be restored alone in the
    send buffer."""
    for f in filters:
        if 9 + len(f[0]) > len(s.tx) - _ACK_ROOM:
            raise ValueError("a %d-byte filter does not fit the %d-byte send buffer"
                             % (len(f[0]), len(s.tx)))
    return _queue(s, c.filters().subscribe, filters)


def unsubscribe(s, topics):
    return _queue(s, c.filters().unsubscribe, topics)


def _queue(s, encode, items):
    # The (UN)SUBSCRIBE the shell waits for: its id is s.sub_pid until acked.
    s.room()
    pid = s.new_pid()
    s.t1 = encode(s.tx, pid, items, s.t1)
    s.sub_pid = pid
    return pid


def match(f, t):
    """True if topic t matches topic filter f (both bytes-like, no allocation)."""
    nf = len(f)
    nt = len(t)
    if nt and t[0] == 36 and nf and (f[0] == 43 or f[0] == 35):
        return False  # '$' topics are not matched by a leading wildcard
    i = j = 0
    while i < nf:
        ch = f[i]
        if ch == 35:
            return True
        if ch == 43:
            while j < nt and t[j] != 47:
                j += 1
            i += 1
            continue
        if j >= nt:  # "a/#" also matches its parent "a"
            return i + 2 == nf and ch == 47 and f[i + 1] == 35
        if ch != t[j]:
            return False
        i += 1
        j += 1
    return j == nt


class Subs:
    """The filters in force: [filter bytes, qos, handler or None], in the
    order they were first subscribed.

    A restore sends them again in as many SUBSCRIBE packets as the send
    buffer needs, a few at a time, and checks every SUBACK: a filter the
    broker now refuses is reported (refused, the filter stays registered and
    is tried again on the next new session)."""

    def __init__(self):
        self.list = []
        self.todo = -1  # index of the next filter to restore, -1: no restore running
        self._pid = array("H", [0] * _OUT)  # restore packets awaiting SUBACK
        self._first = array("H", [0] * _OUT)  # their first filter's index
        self.refused = None  # the last filter a restore found refused (REFUSED)

    def add(self, flt, qos, handler):
        for s in self.list:
            if s[0] == flt:
                s[1] = qos
                s[2] = handler
                return
        self.list.append([flt, qos, handler])

    def remove(self, flt):
        for s in self.list:
            if s[0] == flt:
                self.list.remove(s)
                return

    def dispatch(self, topic, msg, retained):
        """Calls the handler of every filter topic matches (the shell does,
        once the engine's state is consistent)."""
        for s in self.list:
            if s[2] and match(s[0], topic):
                s[2](topic, msg, retained)

    def uses(self, pid):
        for p in self._pid:
            if p == pid:
                return True
        return False

    def restoring(self):
        """True until every filter of a restore has its SUBACK."""
        if self.todo >= 0:
            return True
        for p in self._pid:
            if p:
                return True
        return False

    def restart(self):
        """A new network connection: what was awaiting SUBACK is gone."""
        self.todo = -1
        for i in range(_OUT):
            self._pid[i] = 0

    def restore(self, s):
        """Queues SUBSCRIBE packets for the filters not restored yet while
        session s has send room (subscribe() made sure each fits alone)."""
        lst = self.list
        while 0 <= self.todo < len(lst):
            slot = _free(self._pid)
            if slot < 0:
                return  # the rest once SUBACKs come back
            first = self.todo
            end = first
            n = 6  # fixed header (type, up to 3 length bytes) and packet id
            room = s.room() - _ACK_ROOM
            while end < len(lst) and n + 3 + len(lst[end][0]) <= room:
                n += 3 + len(lst[end][0])
                end += 1
            if end == first:
                return  # no room now: the rest once tx drains
            pid = s.new_pid()
            s.t1 = c.filters().subscribe(s.tx, pid, [(x[0], x[1]) for x in lst[first:end]], s.t1)
            self._pid[slot] = pid
            self._first[slot] = first
            self.todo = end if end < len(lst) else -1

    def acked(self, pid, codes):
        """A SUBACK: 0 if it does not answer a restore packet, 1 if it does
        and all was granted, 2 if some filter was refused (the last such in
        self.refused)."""
        for i in range(_OUT):
            if self._pid[i] == pid:
                self._pid[i] = 0
                k = self._first[i]
                a = 1
                for j in range(len(codes)):
                    if codes[j] == c.SUBACK_FAILURE and k + j < len(self.list):
                        self.refused = self.list[k + j][0]
                        a = 2
                return a
        return 0


def _free(a):
    for i in range(len(a)):
        if not a[i]:
            return i
    return -1

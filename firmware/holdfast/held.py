# The inbound QoS 2 ids a store holds between PUBREC and PUBREL. Only a
# client that receives QoS 2 messages needs them: the store's table
# (store.held_ids) is made by table() with the first id it holds, so a
# publish-only client never loads this module; a durable store (durable.log.Log)
# makes its own, a durable.heldlog.Logged, which records each id in the log.
from array import array


def table(st):
    """Store st's table of held ids, st.held_ids, made now if it has none:
    a Held, or what the store makes itself (durable.log.Log.held_table: a
    durable.heldlog.Logged, which records each id in the log). The store names
    its table's module, not this one: heldlog builds on Held."""
    h = st.held_ids
    if h is None:
        make = getattr(st, "held_table", None)
        h = st.held_ids = make() if make else Held(st)
    return h


class Held:
    """The inbound QoS 2 ids held between PUBREC and PUBREL [MQTT-4.3.3-2],
    kept the same way by every store; a persistent one also records them
    (_log_hold, _end_hold).

    An id forgotten before its PUBREL lets a copy the broker re-sends (DUP)
    through as a new message, so the table must hold as many ids as the
    broker can have QoS 2 messages in flight to this client. mosquitto's
    default max_inflight_messages is 20: the default of 32 covers it with
    room. Set max_inflight_messages <= held on the broker, or raise held.
    A free entry is used first; when the table is full anyway, the oldest id
    (the first held) goes, never silently: the store's held_evicted counts
    each one. It has store st's held_max entries (held=); fewer than 1
    raises ValueError here, which is how the stores check held= when made.
    """

    def __init__(self, st):
        n = st.held_max
        if n < 1:
            raise ValueError("held=%d: the table of inbound QoS 2 ids needs at least 1 entry" % n)
        self.store = st
        self._hpid = array("H", [0] * n)  # 0: a free entry
        self._hord = array("I", [0] * n)  # when it was held: smaller is older
        self._hnext = 1  # the next hold's number (grows with every hold, as keys do)

    def held(self, pid):
        return self._hfind(pid) >= 0

    def _hfind(self, pid):
        h = self._hpid
        for i in range(len(h)):
            if h[i] == pid:
                return i
        return -1

    def hold(self, pid):
        if self._hfind(pid) >= 0:
            return
        i = self._hfind(0)
        if i < 0:
            o = self._hord
            i = 0
            for j in range(1, len(o)):
                if o[j] < o[i]:
                    i = j
            self._end_hold(i, False)
            self.store.held_evicted += 1
        n = self._hnext
        self._hnext = n + 1
        self._log_hold(i, pid, n)
        self._hpid[i] = pid
        self._hord[i] = n

    def unhold(self, pid):
        i = self._hfind(pid)
        if i >= 0:
            self._end_hold(i, True)

    def forget_held(self):
        h = self._hpid
        for i in range(len(h)):
            if h[i]:
                self._end_hold(i, False)

    def _log_hold(self, i, pid, order):
        """Records that entry i holds pid, the order-th hold (RAM only here)."""

    def _end_hold(self, i, strict):
        """Entry i's id goes (a persistent store records that). strict (an
        unhold): OutboxFull if that cannot be recorded, the id still held:
        the session fails the link, and the broker repeats its PUBREL on
        the next."""
        self._hpid[i] = 0

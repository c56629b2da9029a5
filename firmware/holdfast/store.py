# The outbox kept in RAM: a preallocated byte ring of encoded PUBLISH packets
# plus a fixed table of slots, so storing and acknowledging a message never
# allocates. Every outbox backend (file, raw flash) offers the same methods.
from array import array
from .compat import const
from . import codec
from .errors import OutboxFull

_FREE = const(0)
_PENDING = const(1)
_RELEASED = const(2)  # QoS 2 message that reached PUBREC: resume with PUBREL

# Error reasons (reasons.py has the words).
_E_FULL_SLOTS = const(57)
_E_FULL_BYTES = const(58)


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
    (the first held) goes, never silently: held_evicted counts each one.
    """

    def __init__(self, n):
        if n < 1:
            raise ValueError("held=%d: the table of inbound QoS 2 ids needs at least 1 entry" % n)
        self._hpid = array("H", [0] * n)  # 0: a free entry
        self._hord = array("I", [0] * n)  # when it was held: smaller is older
        self._hnext = 1  # the next hold's number (grows with every hold, as keys do)
        self.held_evicted = 0

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
            self.held_evicted += 1
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
        unhold): OutboxFull if that cannot be recorded, the id still held,
        so that the broker repeats its PUBREL."""
        self._hpid[i] = 0


class MemoryStore(Held):
    """Outbox interface, shared by every backend.

    Keys are integers that grow with every put(); order of keys is the order
    of publishing. put() returns only once the message is as durable as the
    backend can make it.

        put(topic, payload, qos, retain, pid, deadline=0) -> key
                            OutboxFull when no room; deadline: wall-clock
                            seconds after which the message may be dropped
        release(key)        QoS 2 message reached PUBREC
        done(key)           acknowledged: forget it
        next(after) -> key  first pending key > after, or -1
        pid(key), qos(key), released(key)
        get(key, buf, off) -> end   encoded PUBLISH (DUP clear) written at off
        size(key)           bytes get() writes
        deadline(key)       its deadline, 0 if none
        find_topic(topic, after) -> key   first pending key > after with this
                            topic, or -1
        uses(pid) -> bool   pid belongs to a pending message
        last() -> key       highest key ever stored, -1 if none
        hold(pid), held(pid), unhold(pid), forget_held()   inbound QoS 2 ids
                            awaiting PUBREL (class Held; held_evicted counts
                            the ids a full table forgot)
        tick(now)           time passes (ms): a store that groups commits may commit
        sync() -> bool      make everything written durable now
        __len__()           pending messages
    """

    def __init__(self, size=4096, slots=32, held=32):
        Held.__init__(self, held)
        self.ring = bytearray(size)
        self.mv = memoryview(self.ring)
        self.slots = slots
        self._off = array("i", [0] * slots)
        self._end = array("i", [0] * slots)
        self._pid = array("H", [0] * slots)
        self._dl = array("I", [0] * slots)
        self._key = array("i", [0] * slots)
        self._state = bytearray(slots)
        # Key k lives in slot k % slots; put() skips the keys whose slot is
        # still taken, so one message stuck in a QoS 2 flow costs one slot,
        # not the whole table: capacity counts what is pending.
        self.head = 0  # oldest pending key (tail when none)
        self.tail = 0  # next put() gets this key or the next one with a free slot

    def __len__(self):
        n = 0
        for s in range(self.slots):
            if self._state[s]:
                n += 1
        return n

    def _extreme(self, newest):
        # Slot of the newest (or oldest) pending key, -1 when none.
        best = -1
        for s in range(self.slots):
            if self._state[s] and (best < 0 or (self._key[s] > self._key[best]) == newest):
                best = s
        return best

    def _place(self, n):
        # Byte offset for a record of n bytes, or -1. Records sit in the ring
        # in key order; free space is after the newest and before the oldest.
        size = len(self.ring)
        if self.head == self.tail:
            return 0 if n <= size else -1
        h = self._off[self.head % self.slots]
        newest = self._extreme(True)
        w = self._end[newest]
        if self._off[newest] >= h:  # not wrapped: free at the end, then before the oldest
            if size - w >= n:
                return w
            return 0 if n <= h else -1
        return w if w + n <= h else -1

    def put(self, topic, payload, qos, retain, pid, deadline=0):
        n = codec.publish_size(topic, len(payload), qos)
        k = self.tail
        while self._state[k % self.slots]:
            k += 1
            if k - self.tail == self.slots:
                raise OutboxFull(codec.why(_E_FULL_SLOTS, self.slots))
        o = self._place(n)
        if o < 0:
            raise OutboxFull(codec.why(_E_FULL_BYTES, n, len(self.ring), len(self)))
        end = codec.publish(self.ring, topic, payload, qos, retain, False, pid, o)
        s = k % self.slots
        self._off[s] = o
        self._end[s] = end
        self._pid[s] = pid
        self._dl[s] = deadline
        self._key[s] = k
        self._state[s] = _PENDING
        if self.head == self.tail:
            self.head = k
        self.tail = k + 1
        return k

    def release(self, key):
        self._state[key % self.slots] = _RELEASED

    def done(self, key):
        self._state[key % self.slots] = _FREE
        if key == self.head:
            s = self._extreme(False)
            self.head = self._key[s] if s >= 0 else self.tail

    def next(self, after):
        best = -1
        for s in range(self.slots):
            k = self._key[s]
            if self._state[s] and k > after and (best < 0 or k < best):
                best = k
        return best

    def last(self):
        return self.tail - 1

    def pid(self, key):
        return self._pid[key % self.slots]

    def qos(self, key):
        return (self.ring[self._off[key % self.slots]] >> 1) & 3

    def released(self, key):
        return self._state[key % self.slots] == _RELEASED

    def size(self, key):
        s = key % self.slots
        return self._end[s] - self._off[s]

    def tick(self, now):
        pass

    def sync(self):
        return True

    def deadline(self, key):
        return self._dl[key % self.slots]

    def find_topic(self, topic, after):
        topic = codec.to_bytes(topic)
        n = len(topic)
        ring = self.ring
        k = self.next(after)
        while k >= 0:
            o = self._off[k % self.slots] + 1
            while ring[o] & 0x80:  # remaining length
                o += 1
            if (ring[o + 1] << 8 | ring[o + 2]) == n:
                o += 3
                i = 0
                while i < n and ring[o + i] == topic[i]:
                    i += 1
                if i == n:
                    return k
            k = self.next(k)
        return -1

    def get(self, key, buf, off):
        s = key % self.slots
        n = self._end[s] - self._off[s]
        buf[off:off + n] = self.mv[self._off[s]:self._end[s]]
        return off + n

    def uses(self, pid):
        for s in range(self.slots):
            if self._state[s] and self._pid[s] == pid:
                return True
        return False

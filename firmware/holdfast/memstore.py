# The outbox kept in RAM: a preallocated byte ring of encoded PUBLISH packets
# plus a fixed table of slots, so storing and acknowledging a message never
# allocates. Every outbox backend (file, raw flash) offers the same methods.
from array import array
from . import codec
from . import errors  # errors.X where raised or caught: the class loads with the first failure

_FREE = const(0)
_PENDING = const(1)
_RELEASED = const(2)  # QoS 2 message that reached PUBREC: resume with PUBREL

# Error reasons (reasons.py has the words).
_E_FULL_SLOTS = const(57)
_E_FULL_BYTES = const(58)


class MemoryStore:
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
        pid(key)
        qos(key)            1 or 2; 3 once released: a QoS 2 message past
                            PUBREC, which resumes with PUBREL
        get(key, buf, off) -> end   encoded PUBLISH written at off; DUP
                            clear, or set when mark was (MQTT 5: its
                            property block leads the payload)
        size(key)           bytes get() writes
        deadline(key)       its deadline, 0 if none
        find_topic(topic, after) -> key   first pending key > after with this
                            topic, or -1
        uses(pid) -> bool   pid belongs to a pending message
        most                the largest PUBLISH (its bytes) put() can ever
                            take: the store's record limit, which the
                            session checks before it drops anything for room
        tail                one more than the highest key ever stored (0 if
                            none): the next put() gets tail or a higher key
        held_ids            the inbound QoS 2 ids awaiting PUBREL: a held.Held
                            (held(pid), hold(pid), unhold(pid), forget_held()),
                            None until held.table(store) makes it with the
                            first id held; held_max entries (held=),
                            held_evicted counts the ids a full table forgot
        tick(now)           time passes (ms): a store that groups commits may commit
        sync() -> bool      make everything written durable now
        __len__()           pending messages
    """

    # Set by a level-5 session around the put() of a message whose payload
    # starts with its property block: DUP, which the outbox never stores
    # otherwise, marks the record (docs/mqtt5.md).
    mark = False
    # Set on the instance when first needed (held.table(), the first id a
    # full table forgets, the first deadline), so a store that never needs
    # them has a smaller attribute table.
    held_ids = _dl = None
    held_evicted = 0

    def __init__(self, size=4096, slots=32, held=32):
        self.held_max = held
        if held < 1:
            from .held import Held
            Held(self)  # raises ValueError with the words
        # The ring, kept only as a view: get() copies out of it without a
        # slice allocated, and one attribute less is one name less on a board.
        self.mv = memoryview(bytearray(size))
        self.most = size
        self.slots = slots
        # Per slot: where its record starts in the ring (start: a name built
        # into MicroPython costs no heap, _off would), its message id, key, state.
        self.start = array("i", [0] * slots)
        self._pid = array("H", [0] * slots)
        self._key = array("i", [0] * slots)
        self._state = bytearray(slots)
        # Key k lives in slot k % slots; put() skips the keys whose slot is
        # still taken, so one message stuck in a QoS 2 flow costs one slot,
        # not the whole table: capacity counts what is pending.
        self.tail = 0  # next put() gets this key or the next one with a free slot

    def __len__(self):
        n = 0
        for s in range(self.slots):
            if self._state[s]:
                n += 1
        return n

    def put(self, topic, payload, qos, retain, pid, deadline=0):
        payload = codec.to_bytes(payload)  # sized as the bytes the ring holds
        n = codec.publish_size(topic, len(payload), qos)
        k = self.tail
        while self._state[k % self.slots]:
            k += 1
            if k - self.tail == self.slots:
                raise errors.OutboxFull(codec.why(_E_FULL_SLOTS, self.slots))
        # Where the record goes: records sit in the ring in key order, the
        # free space is after the newest and before the oldest.
        newest = oldest = -1  # the slots of the newest and the oldest pending key
        for s in range(self.slots):
            if self._state[s]:
                x = self._key[s]
                if newest < 0 or x > self._key[newest]:
                    newest = s
                if oldest < 0 or x < self._key[oldest]:
                    oldest = s
        size = self.most
        o = -1
        if newest < 0:
            if n <= size:
                o = 0
        else:
            h = self.start[oldest]
            w = self.start[newest] + self.size(self._key[newest])
            if self.start[newest] >= h:  # not wrapped: free at the end, then before the oldest
                o = w if size - w >= n else 0 if n <= h else -1
            elif w + n <= h:
                o = w
        if o < 0:
            raise errors.OutboxFull(codec.why(_E_FULL_BYTES, n, size, len(self)))
        codec.publish(self.mv, topic, payload, qos, retain, self.mark, pid, o)
        s = k % self.slots
        self.start[s] = o
        self._pid[s] = pid
        if deadline and self._dl is None:  # a sensor's readings seldom have one
            self._dl = array("I", [0] * self.slots)
        if self._dl:
            self._dl[s] = deadline
        self._key[s] = k
        self._state[s] = _PENDING
        self.tail = k + 1
        return k

    def release(self, key):
        self._state[key % self.slots] = _RELEASED

    def done(self, key):
        self._state[key % self.slots] = _FREE

    def next(self, after):
        best = -1
        for s in range(self.slots):
            k = self._key[s]
            if self._state[s] and k > after and (best < 0 or k < best):
                best = k
        return best

    def pid(self, key):
        return self._pid[key % self.slots]

    def qos(self, key):
        s = key % self.slots
        return 3 if self._state[s] == _RELEASED else (self.mv[self.start[s]] >> 1) & 3

    def size(self, key):
        # What the record's fixed header says: 1 byte, the remaining length
        # (1 to 4 bytes, 7 bits each, lowest first), then that many bytes.
        o = self.start[key % self.slots] + 1
        n = i = 0
        while True:
            b = self.mv[o + i]
            n |= (b & 0x7F) << 7 * i
            i += 1
            if b < 0x80:
                return 1 + i + n

    def tick(self, now=0):
        # RAM needs no commit: time passing changes nothing, and everything
        # is as durable as it gets (sync() is the same function: one object).
        return True

    sync = tick

    def deadline(self, key):
        return self._dl[key % self.slots] if self._dl else 0

    def find_topic(self, topic, after):
        topic = codec.to_bytes(topic)
        n = len(topic)
        ring = self.mv
        k = self.next(after)
        while k >= 0:
            o = self.start[k % self.slots] + 1
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
        o = self.start[key % self.slots]
        n = self.size(key)
        buf[off:off + n] = self.mv[o:o + n]
        return off + n

    def uses(self, pid):
        for s in range(self.slots):
            if self._state[s] and self._pid[s] == pid:
                return True
        return False

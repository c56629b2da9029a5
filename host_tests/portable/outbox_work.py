"""Scripted outbox workload, its model, the recovery check and the power-cut
loop, shared by test_outbox_file.py, test_outbox_lfs.py and
test_outbox_flash.py (both runtimes).

What a recovered store must show, given the calls that returned before the
power cut and the one that was running when it came (the "unsure" call):
  - every message whose put() returned is pending, byte-exact, unless its
    done() returned; the unsure put() may be there (then byte-exact) or not;
  - a message whose done() returned is gone (at-least-once allows exactly
    one exception: the done() cut mid-write may come back, once);
  - a released (PUBREC reached) message comes back released; the unsure
    release() may or may not have happened;
  - held inbound ids are those whose hold() returned and unhold() did not,
    give or take the unsure hold()/unhold();
  - nothing else is pending, and tail - 1 is at least the highest key stored.
With group commit (FileStore group=N) the puts since the last commit (the
store's `uncommitted`) may be missing too, all or a newest part of them.
"""
from holdfast.errors import OutboxFull
from support import raises, held
from holdfast.held import table

TOPICS = (b"t/a", b"sensors/dev-1/temp", b"x")
PIDS = 12  # inbound ids used: 1..PIDS


class Rand:
    """The same numbers on both runtimes."""

    def __init__(self, seed):
        self.s = seed

    def next(self, n):
        self.s = (self.s * 1103515245 + 12345) & 0x7FFFFFFF
        return (self.s >> 8) % n


def script(n, seed=1, span=20):
    """n operations: ("p", qos, topic, plen), ("r", put#), ("d", put#),
    ("h", pid), ("x", pid). put# counts put() calls from 0."""
    r = Rand(seed)
    ops = []
    pend = []  # [put#, qos, released]
    held = []
    nput = 0
    while len(ops) < n:
        c = r.next(10)
        if pend and nput - pend[0][0] >= span:
            c = 7  # acknowledge the oldest, so keys stay within the slots
        if c < 4 or not pend and c < 8:
            q = 1 + r.next(2)
            ops.append(("p", q, r.next(len(TOPICS)), r.next(60)))
            pend.append([nput, q, False])
            nput += 1
        elif c < 6:
            for e in pend:
                if e[1] == 2 and not e[2]:
                    e[2] = True
                    ops.append(("r", e[0]))
                    break
        elif c < 8:
            e = pend[0] if c == 7 or r.next(2) else pend[r.next(len(pend))]
            if e[1] == 2 and not e[2]:
                e[2] = True
                ops.append(("r", e[0]))
            pend.remove(e)
            ops.append(("d", e[0]))
        elif c == 8:
            pid = 1 + r.next(PIDS)
            if pid not in held:
                held.append(pid)
                ops.append(("h", pid))
        elif held:
            ops.append(("x", held.pop(r.next(len(held)))))
    return ops


def payload(i, n):
    return bytes([(i * 7 + j * 13) & 0xFF for j in range(n)])


class Model:
    def __init__(self):
        self.keys = []  # key of each put#, None when that put() did not return
        self.msgs = {}  # key -> [put#, topic, payload, qos, state]; state 0 pending, 1 released, 2 done
        self.held = []
        self.unsure = None  # (op, key or pid, put# for a put)
        self.top = -1  # highest key a put() returned
        self.i = 0  # the op running or last run
        self.soft = []  # keys put since the store last committed (group commit)
        self.hard_top = -1  # self.top at that commit

    def run(self, st, ops, start=0):
        for i in range(start, len(ops)):
            self.i = i
            op = ops[i]
            t = op[0]
            if t == "p":
                n = len(self.keys)
                k = st.tail
                self.keys.append(None)
                p = self.payload(n, op[3], TOPICS[op[2]], k)
                self.unsure = ("p", k, n, TOPICS[op[2]], p, op[1])
                got = st.put(TOPICS[op[2]], p, op[1], False, n % 65535 + 1)
                assert got == k, (got, k)
                self.keys[n] = k
                self.msgs[k] = [n, TOPICS[op[2]], p, op[1], 0]
                if k > self.top:
                    self.top = k
            elif t == "r" or t == "d":
                k = self.keys[op[1]]
                if k is None:
                    continue
                self.unsure = (t, k)
                if t == "r":
                    st.release(k)
                    self.msgs[k][4] = 1
                else:
                    st.done(k)
                    self.msgs[k][4] = 2
            else:
                self.unsure = (t, op[1])
                if t == "h":
                    table(st).hold(op[1])
                    if op[1] not in self.held:
                        self.held.append(op[1])
                else:
                    table(st).unhold(op[1])
                    if op[1] in self.held:  # (a hold a power cut stopped)
                        self.held.remove(op[1])
            self.unsure = None
            if getattr(st, "uncommitted", 0):
                if t == "p":
                    self.soft.append(k)
            else:
                self.soft = []
                self.hard_top = self.top

    def payload(self, n, size, topic, key):
        return payload(n, size)

    def settle(self, st):
        """After a check passed: take the unsure call as the recovered store
        shows it, so the workload can go on."""
        for k in self.soft:
            if st.next(k - 1) != k and self.msgs[k][4] != 2:  # lost with its group
                self.keys[self.msgs.pop(k)[0]] = None
        if self.soft:
            self.top = st.tail - 1
        self.soft = []
        self.hard_top = self.top
        u = self.unsure
        self.unsure = None
        if not u:
            return
        if u[0] == "p":
            if st.next(u[1] - 1) == u[1]:
                self.keys[u[2]] = u[1]
                self.msgs[u[1]] = [u[2], u[3], u[4], u[5], 0]
                self.top = max(self.top, u[1])
        elif u[0] == "d":
            if st.next(u[1] - 1) != u[1]:
                self.msgs[u[1]][4] = 2
        elif u[0] == "r":
            if st.qos(u[1]) == 3:  # released
                self.msgs[u[1]][4] = 1
        elif held(st, u[1]) != (u[1] in self.held):
            if u[0] == "h":
                self.held.append(u[1])
            else:
                self.held.remove(u[1])


def pending(st):
    out = []
    k = st.next(-1)
    while k >= 0:
        out.append(k)
        k = st.next(k)
    return out


BUF = bytearray(160)
GROUP_LOST = [0]  # checks where uncommitted puts were missing, as group commit allows


def packet(topic, p, qos, pid):
    """The PUBLISH a store must give back (remaining length < 128 here)."""
    rl = 2 + len(topic) + len(p) + (2 if qos else 0)
    out = bytes((0x30 | qos << 1, rl, 0, len(topic))) + topic
    return out + (bytes((pid >> 8, pid & 255)) if qos else b"") + p


def same(st, k, n, topic, p, qos):
    end = st.get(k, BUF, 0)
    want = packet(topic, p, qos, n % 65535 + 1)
    assert end == len(want) == st.size(k), (k, end, len(want), st.size(k))
    assert BUF[:end] == want, (k, bytes(BUF[:end]), want)
    q = st.qos(k)  # 3: a QoS 2 message released
    assert st.pid(k) == n % 65535 + 1 and (q == qos or q == 3 and qos == 2), (k, st.pid(k), q)


def check(st, m, tag=""):
    u = m.unsure
    got = pending(st)
    assert len(st) == len(got), (tag, len(st), got)
    for k in got:
        e = m.msgs.get(k)
        if e is None:
            assert u and u[0] == "p" and u[1] == k, (tag, "unexpected key", k, u)
            same(st, k, u[2], u[3], u[4], u[5])  # the put that was cut, whole
            assert st.qos(k) != 3, (tag, k)
            continue
        n, topic, p, qos, state = e
        if state == 2:
            assert u and u[0] == "d" and u[1] == k, (tag, "done message came back", k, u)
        same(st, k, n, topic, p, qos)
        if state == 1:
            assert st.qos(k) == 3, (tag, "release lost", k)
        elif not (u and u[0] == "r" and u[1] == k) and state != 2:
            assert st.qos(k) != 3, (tag, "released by itself", k)
    for k in m.msgs:
        if m.msgs[k][4] != 2 and not (u and u[0] == "d" and u[1] == k) and k not in m.soft:
            assert k in got, (tag, "lost", k, m.msgs[k][0], u)
    lost = [k for k in m.soft if k not in got and m.msgs[k][4] != 2]
    if lost:
        GROUP_LOST[0] += 1
    assert not lost or lost == [k for k in m.soft if k >= lost[0] and m.msgs[k][4] != 2], (tag, "lost in the middle", m.soft, got)
    for pid in range(1, PIDS + 1):
        if u and u[0] in "hx" and u[1] == pid:
            continue
        assert held(st, pid) == (pid in m.held), (tag, "held", pid, m.held)
    assert st.tail - 1 >= (m.hard_top if m.soft else m.top), (tag, st.tail, m.top, m.hard_top)


def cut_point(k):
    """How much of the k-th operation happens: none, half, all but a byte."""
    return (0, None, -1)[k % 3]


def _down(st, dev):
    # The store is dead with its device: let go of its files.
    if hasattr(st, "close"):
        try:
            st.close()  # marks its files closed: they fail on the dead device
        except OSError:
            pass
    if hasattr(dev, "close_all"):
        dev.close_all()


def cuts(ops, make, reopen, tag, inspect=None, again=None):
    """Runs ops from scratch with a power cut at the 1st, 2nd, ... write of
    the device, recovers, checks; returns the number of cut points + 1.
    make() -> (store, device with cut(k, keep)); reopen(device) -> store.
    again(store) -> its device: then the recovered store goes on with the
    rest of the workload, with a second power cut a few writes later, and is
    recovered and checked again (two faults in a row)."""
    k = 1
    while True:
        st, dev = make()
        dev.cut(k, cut_point(k))
        m = Model()
        try:
            m.run(st, ops)
        except OSError:
            pass
        else:
            if hasattr(st, "close"):
                st.close()
            return k
        _down(st, dev)
        st = reopen(dev)
        dev = None
        t = "%s cut %d" % (tag, k)
        check(st, m, t)
        if inspect:
            inspect(st, t)
        if again is not None:
            m.settle(st)
            dev = again(st)
            dev.cut(1 + k % 13, cut_point(k + 1))
            try:
                m.run(st, ops, m.i + 1)
                dev.cut(0)  # the workload ended first
            except OutboxFull:
                # A tiny device can fill up: a cut costs the block it hit
                # (docs/outbox.md). The put stored nothing; acks follow.
                dev.cut(0)
            except OSError:
                _down(st, dev)
                st = reopen(dev)
                t += " and again"
                check(st, m, t)
                if inspect:
                    inspect(st, t)
            dev = None
        after(st, t)
        if hasattr(st, "close"):
            st.close()
        k += 1


def after(st, tag=""):
    """The recovered store takes acknowledgements and new work."""
    for key in pending(st):
        st.done(key)
    k = st.put(b"after/cut", b"z" * 9, 1, False, 999)
    assert pending(st) == [k] and st.size(k) == 24, (tag, k, st.size(k))
    st.done(k)
    assert len(st) == 0, tag


def fill(st, qos=1, why="no room"):
    """Puts 40-byte messages until the store is full; their keys. The
    OutboxFull must say why."""
    keys = []
    while True:
        try:
            keys.append(st.put(b"fill/up", b"f" * 40, qos, False, len(keys) + 1))
        except OutboxFull as e:
            assert why in str(e), e
            return keys


def full_then_usable(st, reopen):
    """Fills the store until OutboxFull; acks free the room again."""
    keys = fill(st)
    assert len(keys) >= 3, keys
    assert pending(st) == keys
    e = raises(OutboxFull, st.put, b"fill/up", b"f" * 40, 1, False, 99)
    assert "filesystem" in str(e), e
    for k in keys:
        st.done(k)
    assert len(st) == 0
    assert st.unsaved == 0, ("an acknowledgement found no room (FileStore: the reserve)", st.unsaved)
    more = fill(st)
    assert len(more) >= 2, (keys, more)
    st.close()
    st = reopen()
    assert pending(st) == more, (pending(st), more)
    st.close()


def backlog_out_of_order(st, n=60, every=5):
    """Puts n messages (pid = key + 1, every other survivor with a
    deadline, _deadline(key)) and acknowledges all but every `every`-th, so
    the store copies the survivors forward past newer ones. Returns the
    survivors' keys; fails unless some copy now sits in a later unit than a
    newer survivor (what the boot scan must put back in order)."""
    keep = []
    for i in range(n):
        k = st.put(b"t", b"p" * 30, 1, False, i + 1, _deadline(i, every))
        if i % every:
            st.done(k)
        else:
            keep.append(k)
    units = [st._unit[st._find(k)] for k in keep]
    assert units != sorted(units), ("no copy moved past a newer message", units)
    return keep


def _deadline(key, every):
    return 1000 + key if key % (2 * every) == 0 else 0


def check_backlog(st, keep, tag, every=5):
    """A store reopened with fewer slots than keep holds them all, in key
    order, with their ids and deadlines."""
    assert pending(st) == keep, (tag, pending(st), keep)
    assert [st.pid(k) for k in keep] == [k + 1 for k in keep], tag
    assert [st.deadline(k) for k in keep] == [_deadline(k, every) for k in keep], tag
    assert st.slots >= len(keep), (tag, st.slots)
    after(st, tag)


def record(t, key, pid, body=b""):
    """The bytes of a record of type t (0x4D M, 0x44 D, ...) as the outbox
    writes it (docs/outbox.md), valid CRC: what a payload may carry, as a
    forwarded outbox record would."""
    import struct
    from holdfast.durable.log import crc32
    h = bytearray(struct.pack("<BBHIHBBI", t, 1 if t == 0x4D else 0, len(body), key, pid, 255, 255, 0))
    c = crc32(body, crc32(h))
    struct.pack_into("<I", h, 12, c)
    return bytes(h) + body + b"\xff" * (-len(body) % 4)


def forging(topic, forged, tail=8):
    """A QoS 1 payload for topic whose bytes hold `forged` (record bytes) at
    a 4-byte boundary of its record, where a scan stepping through a torn
    record's body would meet it; then tail bytes (a cut there leaves it
    whole). The record starts at a multiple of 4: its body (the PUBLISH) at
    +16, whose fixed header takes 2 bytes for a short message, then the
    topic's length and bytes, the packet id."""
    at = 16 + 2 + 2 + len(topic) + 2
    return b"\x00" * (-at % 4) + forged + b"\x01" * tail


def forged_records(key, conjured):
    """A D record for key and an M record for key conjured: what, taken
    for real, would forget a pending message and conjure another."""
    return record(0x44, key, 1) + record(0x4D, conjured, 9, packet(b"ghost", b"boo", 1, 9))


class Forging(Model):
    """The model with payloads that carry outbox records (valid CRC, at a
    4-byte boundary of their record), every other put: a D record for the
    oldest message pending and an M record of a key never put. A scan that
    took them for real would forget the one or conjure the other."""

    def payload(self, n, size, topic, key):
        if n % 2:
            return payload(n, size)
        old = [k for k in self.msgs if self.msgs[k][4] != 2]
        return forging(topic, forged_records(min(old) if old else 0, 100000 + key), size % 9)


def random_cuts(make, reopen, seed, runs, nops=40):
    """runs power cuts, each at a random write of the workload (seeded),
    tearing it at a random byte, with payloads that carry records
    (Forging); recovers and checks each time, then goes on with the rest
    of the workload and checks again. make() -> (store, device with
    cut(k, keep)); reopen(device) -> store. Returns the cuts that struck."""
    r = Rand(seed)
    ops = script(nops, seed=seed, span=8)
    struck = 0
    for run in range(runs):
        st, dev = make()
        dev.cut(1 + r.next(3 * nops), r.next(120))
        m = Forging()
        try:
            m.run(st, ops)
            dev.cut(0)  # the workload ended first
        except OSError:
            struck += 1
            _down(st, dev)
            st = reopen(dev)
            t = "seed %d run %d" % (seed, run)
            check(st, m, t)
            m.settle(st)
            m.run(st, ops, m.i + 1)
            check(st, m, t + ", the rest of the workload")
        after(st, "seed %d run %d" % (seed, run))
        if hasattr(st, "close"):
            st.close()
    return struck

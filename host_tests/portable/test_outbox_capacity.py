# Capacity policies of the outbox, on all three backends: a byte limit that
# refuses (OutboxFull) or drops the oldest unsent messages (counted), per-message
# expiry (dropped and counted, online or offline, and across a reboot), and the
# "latest value per topic" mode. What is in flight is never dropped.
import sys
from holdfast.session import Session
from holdfast.broker import feed
from consts import CONNECTED
from drain import drain
from holdfast.memstore import MemoryStore
from holdfast.durable import FileStore
from holdfast.durable import FlashStore
from holdfast.errors import OutboxFull
from flashsim import Flash
from support import tmpdir, rmtree, raises, held
from heaplock import under_heap_lock
from holdfast.policies import expire
from holdfast.held import table

T = b"sensors/t"
# A record here: 16-byte header + PUBLISH (2 + 2 + 9 topic + 2 pid + 8 payload)
# = 39 bytes, 40 aligned; 44 with a deadline.
REC = 40


class Backends:
    """Each backend, fresh, and reopened on the same storage (a reboot)."""

    def __init__(self):
        self.top = tmpdir()
        self.dev = None

    def fresh(self, kind, limit):
        if kind == "memory":
            return MemoryStore(size=limit or 4096)
        if kind == "file":
            rmtree(self.top + "/ob")
            return FileStore(self.top + "/ob", limit=limit)
        self.dev = Flash(4, 512)
        return FlashStore(self.dev, limit=limit)

    def reopen(self, kind, st, limit=0):
        if kind == "file":
            st.close()
            return FileStore(self.top + "/ob", limit=limit)
        return FlashStore(self.dev, limit=limit)

    def done(self):
        rmtree(self.top)


KINDS = ("memory", "file", "flash")
PERSISTENT = ("file", "flash")


def _payloads(st):
    """Payloads of the pending messages, oldest first, read back as sent."""
    out = []
    buf = bytearray(256)
    k = st.next(-1)
    while k >= 0:
        n = st.get(k, buf, 0)
        assert n == st.size(k), (n, st.size(k))
        i = 1
        rl = 0
        sh = 0
        while True:
            rl |= (buf[i] & 0x7F) << sh
            sh += 7
            i += 1
            if not buf[i - 1] & 0x80:
                break
        assert i + rl == n, (i, rl, n)  # exactly one PUBLISH: no deadline bytes leak out
        tl = buf[i] << 8 | buf[i + 1]
        p = i + 2 + tl + (2 if buf[0] & 6 else 0)
        out.append(bytes(buf[p:n]))
        k = st.next(k)
    return out


def _msg(i):
    return b"r%07d" % i


def _connect(s):
    s.start(0)
    feed(s.rx, b"\x20\x02\x00\x00")
    drain(s)
    assert s.state == CONNECTED
    s.tx_start = s.tx_end = 0


def _linked_one_at_a_time(b, kind):
    # An empty store of this kind and a connected session that has one
    # message in flight at a time: the first publish goes out, the rest wait.
    st = b.fresh(kind, 0)
    s = Session(b"dev", store=st, window=1)
    _connect(s)
    return st, s


def test_byte_limit_refuses_and_keeps_what_is_stored():
    b = Backends()
    for kind in KINDS:
        st = b.fresh(kind, 5 * REC if kind != "memory" else 5 * 25)
        s = Session(b"dev", store=st)
        for i in range(5):
            s.publish(T, _msg(i), 1, False, 0)
        e = raises(OutboxFull, s.publish, T, _msg(5), 1, False, 0)
        assert "full" in str(e), (kind, str(e))
        assert _payloads(st) == [_msg(i) for i in range(5)], (kind, _payloads(st))
        assert s.overflowed == 0
        # An acknowledgement frees the room again.
        st.done(st.next(-1))
        s.publish(T, _msg(5), 1, False, 0)
        assert _payloads(st) == [_msg(i) for i in range(1, 6)], kind
    b.done()


def test_drop_oldest_keeps_the_newest_and_counts():
    b = Backends()
    for kind in KINDS:
        st = b.fresh(kind, 5 * REC if kind != "memory" else 5 * 25)
        s = Session(b"dev", store=st, drop_oldest=True)
        for i in range(12):
            s.publish(T, _msg(i), 1, False, 0)
        assert _payloads(st) == [_msg(i) for i in range(7, 12)], (kind, _payloads(st))
        assert s.overflowed == 7, (kind, s.overflowed)
        if kind in PERSISTENT:  # the drops are durable
            st = b.reopen(kind, st, 5 * REC)
            assert _payloads(st) == [_msg(i) for i in range(7, 12)], kind
    b.done()


def test_drop_oldest_never_drops_what_is_in_flight():
    b = Backends()
    for kind in KINDS:
        st = b.fresh(kind, 4 * REC if kind != "memory" else 4 * 25)
        s = Session(b"dev", store=st, window=2, drop_oldest=True)
        _connect(s)
        for i in range(4):
            s.publish(T, _msg(i), 1, False, 0)
        assert s.inflight == 2
        for i in range(4, 7):
            s.publish(T, _msg(i), 1, False, 0)
        # 0 and 1 were sent and await PUBACK; 2, 3 and 4 made room. MemoryStore
        # keeps its records contiguous behind the oldest, which is in flight:
        # only dropping the newest frees room, so 5 went too.
        if kind == "memory":
            assert _payloads(st) == [_msg(0), _msg(1), _msg(6)], _payloads(st)
            assert s.overflowed == 4
        else:
            assert _payloads(st) == [_msg(0), _msg(1), _msg(5), _msg(6)], (kind, _payloads(st))
            assert s.overflowed == 3
        # With every message in flight nothing can be dropped: refused.
        s = Session(b"dev", store=b.fresh(kind, 2 * REC if kind != "memory" else 2 * 25),
                    window=2, drop_oldest=True)
        _connect(s)
        s.publish(T, _msg(0), 1, False, 0)
        s.publish(T, _msg(1), 1, False, 0)
        raises(OutboxFull, s.publish, T, _msg(2), 1, False, 0)
        assert s.overflowed == 0 and len(s.store) == 2
    b.done()


def test_released_qos2_message_is_never_dropped():
    b = Backends()
    for kind in KINDS:
        st = b.fresh(kind, 3 * REC if kind != "memory" else 3 * 25)
        s = Session(b"dev", store=st, drop_oldest=True)
        _connect(s)
        pid = s.publish(T, _msg(0), 2, False, 0)
        feed(s.rx, bytes((0x50, 2, pid >> 8, pid & 255)))  # PUBREC
        drain(s)
        s.lost()  # offline now: nothing is in flight, the PUBREL is owed
        for i in range(1, 6):
            s.publish(T, _msg(i), 1, False, 0)
        assert _payloads(st)[0] == _msg(0) and st.qos(st.next(-1)) == 3, kind
        # (MemoryStore: only the newest free room behind a pinned oldest record.)
        kept = [_msg(5)] if kind == "memory" else [_msg(4), _msg(5)]
        assert _payloads(st)[1:] == kept, (kind, _payloads(st))
    b.done()


def test_expired_messages_are_dropped_offline_and_after_a_reboot():
    b = Backends()
    for kind in KINDS:
        st = b.fresh(kind, 0)
        s = Session(b"dev", store=st)
        s.publish(T, _msg(0), 1, False, 0, 1000)
        s.publish(T, _msg(1), 1, False, 0)  # no deadline
        s.publish(T, _msg(2), 1, False, 0, 2000)
        expire(s, 999)
        assert len(st) == 3 and s.expired == 0
        expire(s, 1000)
        assert _payloads(st) == [_msg(1), _msg(2)] and s.expired == 1, (kind, _payloads(st))
        assert s.next_expiry == 2000
        if kind in PERSISTENT:
            st = b.reopen(kind, st)
            s = Session(b"dev", store=st)
            assert st.deadline(st.next(st.next(-1))) == 2000, kind
            expire(s, 1500)
            assert len(st) == 2 and s.expired == 0
        expire(s, 2000)
        assert _payloads(st) == [_msg(1)], (kind, _payloads(st))
        assert s.expired == (1 if kind in PERSISTENT else 2), (kind, s.expired)
    b.done()


def test_expiry_spares_what_is_in_flight_and_sends_the_rest_exactly():
    b = Backends()
    for kind in KINDS:
        st, s = _linked_one_at_a_time(b, kind)
        s.publish(T, _msg(0), 1, False, 0, 10)
        s.publish(T, _msg(1), 1, False, 0, 10)
        s.publish(T, _msg(2), 1, False, 0, 50)
        s.tx_start = s.tx_end = 0
        expire(s, 20)
        assert _payloads(st) == [_msg(0), _msg(2)] and s.expired == 1, (kind, _payloads(st))
        pid = st.pid(st.next(-1))
        feed(s.rx, bytes((0x40, 2, pid >> 8, pid & 255)))
        drain(s)
        # The survivor goes out as a plain PUBLISH: the deadline stays in the store.
        sent = bytes(s.tx[s.tx_start:s.tx_end])
        assert sent[0] == 0x32 and sent.endswith(_msg(2)) and len(sent) == 2 + sent[1], (kind, sent)
    b.done()


def test_what_expired_in_flight_is_dropped_once_the_link_is_lost():
    # expire() spares a message in flight; a lost link makes it droppable,
    # and the session looks again then.
    b = Backends()
    for kind in KINDS:
        st, s = _linked_one_at_a_time(b, kind)
        s.publish(T, _msg(0), 1, False, 0, 10)
        s.publish(T, _msg(1), 1, False, 0)
        expire(s, 20)
        assert len(st) == 2 and s.expired == 0 and s.next_expiry == 0, (kind, s.next_expiry)
        s.lost()
        assert s.next_expiry == 1, (kind, s.next_expiry)
        expire(s, 20)
        assert _payloads(st) == [_msg(1)] and s.expired == 1, (kind, _payloads(st))
    b.done()


def test_latest_value_per_topic():
    b = Backends()
    for kind in KINDS:
        st, s = _linked_one_at_a_time(b, kind)
        s.publish(b"state/a", _msg(0), 1, False, 0, 0, True)  # sent: in flight
        s.publish(b"state/a", _msg(1), 1, False, 0, 0, True)
        s.publish(b"state/b", _msg(2), 1, False, 0, 0, True)
        s.publish(b"state/a", _msg(3), 1, False, 0, 0, True)
        s.publish(b"state/ab", _msg(4), 1, False, 0, 0, True)
        s.publish(b"state/a", _msg(5), 1, False, 0)  # not latest: keeps the older ones
        assert _payloads(st) == [_msg(0), _msg(2), _msg(3), _msg(4), _msg(5)], (kind, _payloads(st))
        assert s.replaced == 1
        if kind in PERSISTENT:  # after a reboot the topics are read back from storage
            st = b.reopen(kind, st)
            s = Session(b"dev", store=st)
            s.publish(b"state/b", _msg(6), 1, False, 0, 0, True)
            # Only state/b's older message went: the topics of the same
            # length are told apart by their bytes, not only by length.
            assert _payloads(st) == [_msg(0), _msg(3), _msg(4), _msg(5), _msg(6)], (kind, _payloads(st))
            s.publish(b"state/a", _msg(7), 1, False, 0, 0, True)
            assert _payloads(st) == [_msg(4), _msg(6), _msg(7)], (kind, _payloads(st))
            assert s.replaced == 4
    b.done()


def test_finding_a_topic_on_a_persistent_store_allocates_nothing_per_candidate():
    # latest=True runs find_topic(); after a reboot no topic hash is known,
    # so each pending message is a candidate whose topic is read back from
    # storage. On a 64-bit MicroPython under heap_lock, so any allocation
    # fails the test; a 32-bit port makes the topic's CRC-32 a long int when
    # it passes 30 bits (once per call, in put() too), and CPython allocates
    # ints: there the same calls run unlocked.
    long = b"state/" + b"0123456789" * 3  # 36 bytes: read in two pieces
    short = b"state/a"
    others = (b"X" + long[1:], long[:-1] + b"X", long[:25] + b"X" + long[26:], long + b"/more",
              b"state/b", b"xtate/a", short + b"a")
    b = Backends()
    for kind in PERSISTENT:
        st = b.fresh(kind, 0)
        for t in others:
            st.put(t, b"v", 1, False, 1)
        want_long = st.put(long, b"v", 1, False, 1)
        want_short = st.put(short, b"v", 1, False, 1)
        st.put(b"state/c", b"v", 1, False, 1)
        st = b.reopen(kind, st)
        st.find_topic(b"none", -1)  # warm: durable/latest.py loaded, the hash table made
        got = [0] * 4
        locked = sys.implementation.name == "micropython" and sys.maxsize > 1 << 32
        if locked:
            import micropython
            micropython.heap_lock()
        try:
            got[0] = st.find_topic(long, -1)
            got[1] = st.find_topic(short, -1)
            got[2] = st.find_topic(long, want_long)
            got[3] = st.find_topic(b"state/d", -1)
        finally:
            if locked:
                micropython.heap_unlock()
        assert got == [want_long, want_short, -1, -1], (kind, got, want_long, want_short)
        if kind == "file":
            st.close()
    b.done()


def test_deadline_survives_compaction():
    # FileStore copies a mostly-done oldest segment forward, FlashStore moves a
    # block's live records when the ring is full: the deadline goes along.
    top = tmpdir()
    st = FileStore(top + "/ob", segment_bytes=256, compact=2)
    s = Session(b"dev", store=st)
    s.publish(T, _msg(0), 1, False, 0, 777)
    _churn(s, st)
    import os
    assert "00000001.hfo" not in os.listdir(top + "/ob")  # its first segment is gone
    assert st.deadline(st.next(-1)) == 777
    assert "holdfast.durable.compaction" not in sys.modules, "the compaction's code stayed loaded"
    st.close()
    st = FileStore(top + "/ob", segment_bytes=256, compact=2)
    assert st.deadline(st.next(-1)) == 777 and _payloads(st) == [_msg(0), _msg(39)]
    st.close()
    rmtree(top)
    dev = Flash(3, 256)
    st = FlashStore(dev)
    s = Session(b"dev", store=st)
    s.publish(T, _msg(0), 1, False, 0, 888)
    _churn(s, st)
    assert dev.erased >= 3, dev.erased  # every block reused: message 0 was moved
    assert "holdfast.durable.compaction" not in sys.modules, "the compaction's code stayed loaded"
    st = FlashStore(dev)
    assert st.deadline(st.next(-1)) == 888 and _payloads(st) == [_msg(0), _msg(39)]


def _churn(s, st):
    # Messages 1..39, each acknowledged once the next is stored.
    prev = -1
    for i in range(1, 40):
        s.publish(T, _msg(i), 1, False, 0)
        if prev >= 0:
            st.done(prev)
        prev = st.tail - 1


def test_a_message_stuck_in_a_qos2_flow_costs_one_slot_not_the_outbox():
    # The broker never answers the QoS 2 message; hundreds of QoS 1 messages
    # go out and are acknowledged behind it, far more than there are slots
    # (or than fit the ring, the segments, the flash blocks).
    b = Backends()
    for kind in KINDS:
        st = b.fresh(kind, 0)
        s = Session(b"dev", store=st, window=4)
        _connect(s)
        s.publish(T, b"stuck", 2, False, 0)
        for i in range(200):
            pid = s.publish(T, _msg(i), 1, False, 0)
            s.tx_start = s.tx_end = 0  # what the socket took
            feed(s.rx, bytes((0x40, 2, pid >> 8, pid & 255)))
            drain(s)
            assert len(st) == 1, (kind, i, len(st))
        assert _payloads(st) == [b"stuck"], kind
        if kind in PERSISTENT:
            st = b.reopen(kind, st)
            assert _payloads(st) == [b"stuck"], kind
    b.done()


def test_ram_ring_reuses_only_the_room_before_the_oldest_pending_record():
    # Records of 2 + 2 + 1 + 2 + 10 = 17 bytes in a 60-byte ring: three fit.
    # Once the oldest is done the next one wraps to the start, and the one
    # after has no room: the space up to the oldest pending record is all.
    st = MemoryStore(size=60, slots=8)
    k = [st.put(b"t", b"%010d" % i, 1, False, i + 1) for i in range(3)]
    st.done(k[0])
    k.append(st.put(b"t", b"%010d" % 3, 1, False, 4))
    raises(OutboxFull, st.put, b"t", b"%010d" % 4, 1, False, 5)
    assert _payloads(st) == [b"%010d" % i for i in (1, 2, 3)], _payloads(st)
    st.done(k[2])  # not the oldest: its room stays behind the oldest
    raises(OutboxFull, st.put, b"t", b"%010d" % 5, 1, False, 6)
    st.done(k[1])
    st.put(b"t", b"%010d" % 6, 1, False, 7)
    assert _payloads(st) == [b"%010d" % i for i in (3, 6)], _payloads(st)


def test_ram_record_size_is_read_from_its_own_header():
    # MemoryStore keeps where each record starts, not where it ends: size()
    # and get() read the length from the record's fixed header, whose
    # remaining length takes 1 byte up to 127 and 2 from 128 on.
    from holdfast.codec import publish, publish_size
    st = MemoryStore(size=4096, slots=8)
    for n in (0, 120, 121, 200, 3000):  # 120: remaining length 127; 121: 128
        k = st.put(b"t/x", b"p" * n, 1, False, n + 1)
        want = bytearray(publish_size(b"t/x", n, 1))
        publish(want, b"t/x", b"p" * n, 1, False, False, n + 1)
        assert st.size(k) == len(want), (n, st.size(k), len(want))
        buf = bytearray(len(want) + 3)
        assert st.get(k, buf, 3) == len(buf), n
        assert buf[3:] == want, n
        st.done(k)


def test_held_ids_fill_free_entries_first_and_forget_held_lasts():
    b = Backends()
    for kind in KINDS:
        st = b.fresh(kind, 0)
        table(st).hold(1000)  # an inbound QoS 2 flow still waiting for its PUBREL
        for pid in range(1, 40):  # many short flows, each completed
            table(st).hold(pid)
            table(st).unhold(pid)
        assert held(st, 1000), kind
        if kind in PERSISTENT:
            st = b.reopen(kind, st)
            assert held(st, 1000), kind
        table(st).forget_held()
        assert not held(st, 1000), kind
        if kind in PERSISTENT:
            st = b.reopen(kind, st)
            assert not held(st, 1000), kind
    b.done()


def test_qos0_and_acknowledged_qos1_publishes_allocate_nothing():
    # The engine with the default RAM outbox, without a socket: a QoS 1
    # publish (stored, encoded), the broker's PUBACK written into the receive
    # buffer as a socket read would (the message forgotten), and a QoS 0
    # publish. On MicroPython under heap_lock, so any allocation fails the
    # test; elsewhere the same steps, unlocked. (Level 5: test_v5codec.)
    s = Session(b"alloc", True, 0, 4, 256, 4)
    s.start(0)
    s.sent(s.tx_end, 0)
    r = s.rx
    for k, x in enumerate(b"\x20\x02\x00\x00"):
        r.tail()[k] = x
    r.end += 4
    assert s.receive(0) == 0 and s.state == CONNECTED, s.state

    def one():
        pid = s.publish(T, b"21.5", 1, False, 0)
        s.sent(s.tx_end - s.tx_start, 0)
        room = r.tail()
        room[0] = 0x40
        room[1] = 2
        room[2] = pid >> 8
        room[3] = pid & 0xFF
        r.end += 4
        s.receive(0)
        s.publish(T, b"21.5", 0, False, 0)
        s.sent(s.tx_end - s.tx_start, 0)
        return pid

    pids = under_heap_lock(one, 40)
    assert pids == 40 and len(s.store) == 0, (pids, len(s.store))

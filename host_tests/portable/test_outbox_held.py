# The table of inbound QoS 2 ids held between PUBREC and PUBREL
# [MQTT-4.3.3-2], on all three stores: its default size, a free entry first,
# then the oldest id evicted and counted; the same order after a reboot, also
# when compaction has copied an old hold past newer ones; and on flash, holds
# never take the block kept for compaction.
from holdfast.memstore import MemoryStore
from holdfast.durable import FileStore
from holdfast.durable import FlashStore
from holdfast.errors import OutboxFull
from flashsim import Flash
from support import tmpdir, rmtree, raises, held
from holdfast.held import table

KINDS = ("memory", "file", "flash")


class Stores:
    """Each store, fresh, and reopened on the same storage (a reboot)."""

    def __init__(self):
        self.top = tmpdir()
        self.dev = None

    def fresh(self, kind, **kw):
        if kind == "memory":
            return MemoryStore(**kw)
        if kind == "file":
            rmtree(self.top + "/ob")
            return FileStore(self.top + "/ob", **kw)
        self.dev = Flash(4, 512)
        return FlashStore(self.dev, **kw)

    def reopen(self, kind, st, **kw):
        if kind == "file":
            st.close()
            return FileStore(self.top + "/ob", **kw)
        return FlashStore(self.dev, **kw)

    def done(self):
        rmtree(self.top)


def pull_held(st, pids):
    return [p for p in pids if held(st, p)]


def test_default_table_holds_32_ids_and_held_is_configurable():
    s = Stores()
    for kind in KINDS:
        st = s.fresh(kind)
        for pid in range(1, 33):
            table(st).hold(pid)
        assert pull_held(st, range(1, 33)) == list(range(1, 33)), kind
        assert st.held_evicted == 0, kind
        table(st).hold(33)
        assert pull_held(st, range(1, 34)) == list(range(2, 34)) and st.held_evicted == 1, kind
        st = s.fresh(kind, held=5)
        for pid in range(100, 106):
            table(st).hold(pid)
        assert pull_held(st, range(100, 106)) == [101, 102, 103, 104, 105], kind
        assert st.held_evicted == 1, kind
        if kind == "flash":
            e = raises(ValueError, FlashStore, Flash(4, 512), held=0)
        else:
            e = raises(ValueError, MemoryStore, held=0)
        assert "held=0" in str(e), e
    s.done()


def _fill_then_evict(st, kind):
    """held=4: 1 2 3 4 held, 2 dropped, 5 takes the free entry; from then on
    each new id evicts the oldest: 1, then 3, 4, 5."""
    for pid in (1, 2, 3, 4):
        table(st).hold(pid)
    table(st).unhold(2)
    table(st).hold(5)
    assert pull_held(st, range(1, 10)) == [1, 3, 4, 5] and st.held_evicted == 0, kind
    table(st).hold(4)  # held already: neither a new entry nor younger
    assert st.held_evicted == 0, kind


def _evicts_in_order(st, kind, order, first=6):
    left = list(order)
    for n in range(len(order)):
        table(st).hold(first + n)
        gone = left.pop(0)
        assert not held(st, gone), (kind, "evicted", gone, pull_held(st, range(1, 20)))
        assert pull_held(st, left) == left, (kind, left, pull_held(st, range(1, 20)))
        assert st.held_evicted == n + 1, (kind, st.held_evicted, n + 1)


def test_full_table_evicts_the_oldest_first_and_counts_each():
    s = Stores()
    for kind in KINDS:
        st = s.fresh(kind, held=4)
        _fill_then_evict(st, kind)
        _evicts_in_order(st, kind, [1, 3, 4, 5])
        table(st).forget_held()
        assert pull_held(st, range(1, 20)) == [], kind
        table(st).hold(20)  # free entries again: nothing evicted
        assert st.held_evicted == 4 and held(st, 20), kind
    s.done()


def test_reopen_keeps_the_held_ids_and_their_order():
    s = Stores()
    for kind in ("file", "flash"):
        st = s.fresh(kind, held=4)
        _fill_then_evict(st, kind)
        st = s.reopen(kind, st, held=4)
        assert pull_held(st, range(1, 10)) == [1, 3, 4, 5] and st.held_evicted == 0, kind
        _evicts_in_order(st, kind, [1, 3, 4, 5])  # an evicted id is gone for good:
        st = s.reopen(kind, st, held=4)
        assert pull_held(st, range(1, 10)) == [6, 7, 8, 9], kind
        st = s.reopen(kind, st, held=2)  # a smaller table keeps the newest, counted
        assert pull_held(st, range(1, 10)) == [8, 9] and st.held_evicted == 2, kind
        if kind == "file":
            st.close()
    s.done()


def _traffic(st, n):
    for i in range(n):
        st.done(st.put(b"t", b"p" * 40, 1, False, 1 + i))


def test_order_survives_compaction_copies_and_a_reopen():
    # Held ids 1 and 2 sit in an older unit than 3 and 4, and 2 in the table
    # entry before 1's; message traffic then makes a compaction copy 1 and 2
    # past 3 and 4 (on flash, once the ring is down to its reserve block; in
    # files, when a segment starts), in table order: 2 before 1.
    s = Stores()
    for kind in ("file", "flash"):
        kw = {"segment_bytes": 256, "compact": 2} if kind == "file" else {}
        st = s.fresh(kind, held=4, **kw)
        table(st).hold(9)
        table(st).hold(1)
        table(st).unhold(9)
        table(st).hold(2)  # takes 9's entry, the first
        h = st.held_ids  # the table, made by the first hold
        assert h._hfind(2) < h._hfind(1), kind
        keep = st.put(b"k", b"k" * 40, 1, False, 500)  # keeps their unit in use meanwhile
        _traffic(st, 10)  # more than a unit: 3 and 4 go into a newer one
        for pid in (3, 4):
            table(st).hold(pid)
        st.done(keep)
        i = h._hfind(1)
        where = (h._hunit[i], h._hpos[i])
        for n in range(40):
            _traffic(st, 1)
            if (h._hunit[i], h._hpos[i]) != where:
                break
        assert (h._hunit[i], h._hpos[i]) != where, (kind, "no compaction copied the hold", where)
        st = s.reopen(kind, st, held=4, **kw)
        assert pull_held(st, range(1, 10)) == [1, 2, 3, 4], kind
        _evicts_in_order(st, kind, [1, 2, 3, 4], 5)
        if kind == "file":
            st.close()
    s.done()


def test_flash_holds_leave_the_reserve_block_for_compaction():
    # Three messages pending, one per block, while short inbound QoS 2
    # flows fill the blocks in between with hold records: a hold must not
    # take the last free block, or put() finds no block to compact into.
    dev = Flash(4, 512)
    st = FlashStore(dev)
    keys = []
    pid = 0
    for i in range(40):
        keys.append(st.put(b"sensors/t", b"v" * 40, 1, False, 1 + i))
        if len(keys) > 3:
            st.done(keys.pop(0))
        for _ in range(32):  # a block's worth of hold records
            pid = pid % 60000 + 1
            table(st).hold(pid)
            table(st).unhold(pid)
    assert st.unsaved == 0 and st.held_evicted == 0, (st.unsaved, st.held_evicted)
    st = FlashStore(dev)
    assert len(st) == 3 and st.next(-1) == keys[0], (len(st), st.next(-1), keys)
    assert not held(st, pid)


def test_a_full_flash_ring_keeps_a_hold_in_ram_and_counts_it():
    dev = Flash(3, 256)
    st = FlashStore(dev)
    keys = []
    while True:
        try:
            keys.append(st.put(b"t", b"f" * 40, 1, False, 1 + len(keys)))
        except OutboxFull:
            break
    held = []
    for pid in range(1, 30):
        table(st).hold(pid)
        held.append(pid)
        if st.unsaved:
            break
    assert st.unsaved == 1 and pull_held(st, held) == held, (st.unsaved, held)
    for k in keys:  # the ring still drains, and then takes messages again
        st.done(k)
    st.done(st.put(b"t", b"f" * 40, 1, False, 1))


def test_a_persistent_store_makes_its_table_with_the_first_hold_and_drops_the_scan_code():
    # What a sensor that only publishes does not carry on its heap: the
    # held-id table (and its code), and the boot scan once the store is open.
    import sys
    import holdfast.durable
    s = Stores()
    for kind in ("file", "flash"):
        st = s.fresh(kind)
        for i in range(5):
            st.done(st.put(b"t", b"x", 1, False, i + 1))
        keep = st.put(b"t", b"y", 1, False, 9)
        assert not held(st, 3) and st.held_ids is None, kind
        st = s.reopen(kind, st)
        assert len(st) == 1, kind
        assert st.held_ids is None, (kind, "a table made with no id held")
        assert "holdfast.durable.scan" not in sys.modules, (kind, "the scan's code stayed loaded")
        assert "scan" not in holdfast.durable.__dict__, (kind, "the package still holds the scan")
        assert "holdfast.unload" not in sys.modules and "unload" not in holdfast.__dict__, kind
        table(st).hold(7)
        assert st.held_ids is not None and held(st, 7), kind
        st = s.reopen(kind, st)  # the scan finds the hold and makes the table
        assert held(st, 7) and len(st) == 1 and st.next(-1) == keep, kind
        assert "holdfast.durable.scan" not in sys.modules, kind
        if kind == "file":
            st.close()
    s.done()

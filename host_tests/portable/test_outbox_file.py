# FileStore (holdfast.durable.files): the outbox in segment files, here in a
# directory (both runtimes). Power cuts at every write, torn and damaged
# records, a full filesystem. The same on LittleFS: test_outbox_lfs.py.
import os
from holdfast.durable import FileStore
from holdfast.durable.log import crc32
from holdfast.durable.softcrc import crc32_soft
from support import tmpdir, rmtree, raises
from cutfs import CutFS
import outbox_work as w


def _new():
    d = tmpdir()
    return d, d + "/ob"


def test_crc_matches_binascii():
    for data in (b"", b"a", b"123456789", bytes(range(256))):
        assert crc32_soft(data) == crc32(data), data
    assert crc32_soft(b"456789", crc32_soft(b"123")) == 0xCBF43926


def test_reopen_keeps_state():
    top, d = _new()
    st = FileStore(d, segment_bytes=256)
    m = w.Model()
    m.run(st, w.script(60, seed=3))
    w.check(st, m, "live")
    st.close()
    st = FileStore(d, segment_bytes=256)
    w.check(st, m, "reopened")
    assert st.corrupt == 0, st.corrupt
    w.after(st)
    st.close()
    rmtree(top)


def test_segments_are_deleted_and_compacted():
    top, d = _new()
    st = FileStore(d, segment_bytes=256, compact=3)
    keep = st.put(b"long/lived", b"L" * 20, 2, False, 1)
    st.release(keep)
    for i in range(120):
        st.done(st.put(b"t", b"p" * 30, 1, False, 2 + i % 100))
    names = [n for n in os.listdir(d) if n.endswith(".hfo")]
    assert len(names) <= 3, names
    assert st._unit[st._find(keep)] != 1, "the long-lived message was not copied forward"
    st.close()
    st = FileStore(d, segment_bytes=256, compact=3)
    assert w.pending(st) == [keep] and st.qos(keep) == 3, w.pending(st)
    assert st.tail == 121, st.tail
    st.close()
    rmtree(top)


def test_reopen_with_fewer_slots_keeps_compacted_backlog_in_order():
    # Compacted copies come after newer messages in the log; the boot scan
    # puts them back in key order, and grows the index past slots to keep all.
    top, d = _new()
    st = FileStore(d, segment_bytes=256, compact=3)
    keep = w.backlog_out_of_order(st)
    st.close()
    st = FileStore(d, segment_bytes=256, compact=3, slots=4)
    w.check_backlog(st, keep, "file")
    st.close()
    rmtree(top)


def _check_big(st, keys, tag):
    buf = bytearray(1100)
    for i in range(len(keys)):
        topic = b"big/%d" % i
        rl = 2 + len(topic) + 2 + 1000  # 128..16383: two bytes of remaining length
        want = bytes((0x32, rl & 127 | 128, rl >> 7, 0, len(topic))) + topic + bytes((0, i + 1))
        end = st.get(keys[i], buf, 0)
        assert buf[:end] == want + bytes([65 + i % 26]) * 1000, (tag, i)


def test_offsets_past_64k_in_large_segments_survive_a_reopen_with_small_ones():
    # The index keeps offsets in 2 bytes when segments are at most 64 KiB;
    # a store written with larger segments and opened with small ones must
    # widen it, or the messages past 64 KiB would read from the wrong place.
    top, d = _new()
    st = FileStore(d, segment_bytes=200000, reserve=0, slots=100)
    keys = [st.put(b"big/%d" % i, bytes([65 + i % 26]) * 1000, 1, False, i + 1) for i in range(90)]
    assert st._off[st._find(keys[-1])] > 0x10000, st._off[st._find(keys[-1])]
    _check_big(st, keys, "large segments")
    st.close()
    st = FileStore(d, segment_bytes=4096, reserve=0, slots=100)
    assert w.pending(st) == keys and st.corrupt == 0, (w.pending(st), st.corrupt)
    _check_big(st, keys, "reopened with small segments")
    w.after(st)
    st.close()
    rmtree(top)


def test_torn_and_damaged_records_are_skipped():
    top, d = _new()
    st = FileStore(d, segment_bytes=4096)
    for i in range(6):
        st.put(b"t/x", bytes([i]) * 20, 1, False, i + 1)
    seg = d + "/" + [n for n in os.listdir(d) if n.endswith(".hfo")][0]
    st.close()
    f = open(seg, "rb")
    data = bytearray(f.read())
    f.close()
    data[20 + 2 * 48 + 30] ^= 0x10  # inside the third record's payload
    f = open(seg, "wb")
    f.write(data[:-7])  # and the last record torn
    f.close()
    st = FileStore(d, segment_bytes=4096)
    assert w.pending(st) == [0, 1, 3, 4], w.pending(st)
    assert st.corrupt == 2, st.corrupt
    assert st.tail == 5, st.tail  # the torn record's key is free again
    k = st.put(b"t/x", b"new", 1, False, 9)
    assert k == 5, k
    st.close()
    st = FileStore(d, segment_bytes=4096)
    assert w.pending(st) == [0, 1, 3, 4, 5], w.pending(st)
    st.close()
    rmtree(top)


def test_power_cut_at_every_write():
    ops = w.script(30, seed=5)
    top, d = _new()

    def make():
        rmtree(d)
        fs = CutFS()
        return FileStore(d, segment_bytes=200, compact=3, fs=fs, reserve=128), fs

    def reopen(fs):
        return FileStore(d, segment_bytes=200, compact=3, fs=CutFS(), reserve=128)

    n = w.cuts(ops, make, reopen, "dir", again=lambda st: st.fs)
    assert n > 40, n
    rmtree(top)


def test_full_filesystem_then_usable_after_acks():
    top, d = _new()
    st = FileStore(d, segment_bytes=512, fs=CutFS(quota=1200), reserve=256)
    w.full_then_usable(st, lambda: FileStore(d, segment_bytes=512, reserve=256))
    rmtree(top)


def test_lazy_done_comes_back_at_most_until_next_write():
    top, d = _new()
    st = FileStore(d, sync_done=False)
    a = st.put(b"t", b"a", 1, False, 1)
    b = st.put(b"t", b"b", 1, False, 2)
    st.done(a)
    c = st.put(b"t", b"c", 1, False, 3)  # commits the marker of a
    st.done(b)  # not committed: may come back
    st = FileStore(d, sync_done=False)  # as after a power cut: no close()
    got = w.pending(st)
    assert got == [b, c] or got == [c], got
    rmtree(top)


def test_group_commit_commits_every_n_puts_and_on_tick():
    from time import ticks_ms, ticks_add  # CPython: holdfast puts them there
    top, d = _new()
    st = FileStore(d, group=3, group_ms=50)
    for i in range(5):
        st.put(b"t", b"m%d" % i, 1, False, i + 1)
    assert st.uncommitted == 2, st.uncommitted  # the 3rd put committed
    st.tick(ticks_ms())
    assert st.uncommitted == 2  # not yet group_ms old
    st.tick(ticks_add(ticks_ms(), 60))
    assert st.uncommitted == 0
    st.put(b"t", b"m5", 1, False, 6)
    assert st.sync() and st.uncommitted == 0
    st = FileStore(d, group=3)  # reopened without close(): all six are there
    assert len(st) == 6, len(st)
    rmtree(top)


def test_group_commit_on_a_full_filesystem_loses_only_uncommitted_puts():
    # CutFS writes through, so on this filesystem the uncommitted records do
    # reach the file: forgotten in RAM (counted in lost), they come back after
    # a reboot; every message kept in RAM reads back whole.
    top, d = _new()
    # (This quota runs out with three puts uncommitted.)
    st = FileStore(d, segment_bytes=512, fs=CutFS(quota=1400), reserve=256, group=4)
    keys = w.fill(st, why="no room")
    assert st.lost > 0, st.lost
    got = w.pending(st)
    assert len(got) + st.lost == len(keys) and len(got) == len(st), (len(got), st.lost, len(keys))
    for k in got:
        assert st.size(k) == st.get(k, w.BUF, 0) == 4 + 7 + 2 + 40
    back = w.pending(FileStore(d, segment_bytes=512, reserve=256))
    assert [k for k in got if k not in back] == [], (got, back)
    rmtree(top)


def test_missing_parent_directory_is_named():
    top, d = _new()
    e = raises(OSError, FileStore, top + "/no/such/ob")
    assert "outbox directory" in str(e) and "/no/such/ob" in str(e), str(e)
    rmtree(top)


def test_a_store_that_fails_to_open_leaves_its_opening_code_unloaded():
    # durable/scan.py is what a store runs only to open: a board that retries a
    # failed open (a missing card, say) must not keep it on the heap.
    import sys
    top, d = _new()
    raises(OSError, FileStore, top + "/no/such/ob")
    assert "holdfast.durable.scan" not in sys.modules and "holdfast.unload" not in sys.modules
    rmtree(top)


def test_a_directory_that_cannot_be_made_is_named_in_the_error():
    top, d = _new()
    e = raises(OSError, FileStore, top + "/missing/parent/ob")
    assert "missing/parent/ob" in str(e) and "cannot be made or read" in str(e), e
    assert e.args[0] > 0, e.args  # the errno the filesystem gave
    rmtree(top)


class _Long:
    """A payload that only says its length: put() refuses it on that alone,
    and the test needs no 70 KB on a small heap."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_a_full_outbox_says_which_room_ran_out():
    # The words come from reasons.py with the first error: each limit is named.
    from holdfast import OutboxFull
    top, d = _new()
    st = FileStore(d, slots=2, limit=200)
    e = raises(OutboxFull, st.put, b"t", _Long(70000), 0, False, 0)
    # The stored PUBLISH: 1 + 3 bytes of fixed header, 2 + 1 of topic, the payload.
    assert "a 70007-byte message is too large for the outbox (most 65535)" in str(e), e
    st.put(b"t", b"x" * 40, 1, False, 1)
    e = raises(OutboxFull, st.put, b"t", b"x" * 120, 1, False, 2)
    # Records of 16 + 47 and 16 + 127 bytes, 4-aligned.
    assert "64 bytes pending, limit 200, the next record needs 144" in str(e), e
    # A record over the limit itself never fits, whatever is pending: the
    # largest message is the limit less a record header and a deadline.
    e = raises(OutboxFull, st.put, b"t", b"x" * 200, 1, False, 2)
    assert "a 208-byte message can never fit this outbox: its records hold messages of up to 180 bytes" \
        in str(e), e
    st.put(b"t", b"x" * 40, 1, False, 2)
    e = raises(OutboxFull, st.put, b"t", b"x", 1, False, 3)
    assert "outbox full: 2 messages pending (slots=2)" in str(e), e
    st.close()
    rmtree(top)


def test_a_publishing_store_holds_at_most_47_attributes():
    # An instance's attribute table grows in steps (MicroPython: 48 to 59
    # entries take 224 B more than 47): what a store sets only when it
    # happens (held ids, deadlines, damage found, lost writes) is a class
    # default, and a new attribute should not push a publishing store over.
    top, d = _new()
    st = FileStore(d, slots=8)
    for i in range(40):
        st.done(st.put(b"t", b"x" * 40, 1, False, i + 1))
    st.close()
    st = FileStore(d, slots=8)  # reopened: the scan's attributes too
    st.done(st.put(b"t", b"x" * 40, 1, False, 1))
    assert len(st.__dict__) <= 47, sorted(st.__dict__)
    st.close()
    rmtree(top)


def test_put_and_done_between_rotations_allocate_nothing():
    # A sensor that reaches its broker: put() then done(), each durable or
    # group-committed. Only a new segment allocates (its name; open() its
    # file object and, as remove() does, a copy of the path: the VFS's own);
    # in the segment being written nothing does. On a 64-bit MicroPython under heap_lock, so any
    # allocation fails the test; a 32-bit port makes a CRC-32 over 30 bits a
    # long int, and CPython allocates ints: there the same calls run unlocked.
    import sys
    top = tmpdir()
    locked = sys.implementation.name == "micropython" and sys.maxsize > 1 << 32
    topic = b"sensors/dev-1/telemetry"
    payload = b"x" * 64
    for i, (sync_done, group) in enumerate(((True, 1), (False, 1), (False, 8))):
        # 40 puts and dones take 5 KB: one segment holds them all.
        st = FileStore(top + "/ob%d" % i, segment_bytes=16384, sync_done=sync_done, group=group)
        for pid in range(1, 4):  # warm: the reserve file and the first segment made
            st.done(st.put(topic, payload, 1, False, pid))
        seg = st._wunit
        n = 0
        if locked:
            import micropython
            micropython.heap_lock()
        try:
            for pid in range(1, 41):
                st.done(st.put(topic, payload, 1, False, pid))
                n += 1
        finally:
            if locked:
                micropython.heap_unlock()
        assert n == 40 and len(st) == 0 and st._wunit == seg, (sync_done, group, n, len(st), st._wunit, seg)
        st.close()
    rmtree(top)


def _segment(d):
    return d + "/" + [n for n in os.listdir(d) if n.endswith(".hfo")][0]


def _rewrite(path, data):
    f = open(path, "wb")
    f.write(data)
    f.close()


def test_a_torn_put_whose_payload_holds_records_neither_forgets_nor_conjures():
    # Issue 30, C9: the scan resynchronised inside a torn record's body at
    # 4-byte steps, so records a payload carries (a D for a pending message,
    # an M) were taken for real: one accepted message forgotten, one conjured.
    top, d = _new()
    st = FileStore(d)
    a = st.put(b"t/a", b"keep me", 1, False, 1)
    p = w.forging(b"t/x", w.forged_records(a, 7))
    b = st.put(b"t/x", p, 1, False, 2)
    st.close()
    seg = _segment(d)
    f = open(seg, "rb")
    data = f.read()
    f.close()
    _rewrite(seg, data[:len(data) - 3 - (-len(p) % 4)])  # the put torn in its payload's last bytes
    st = FileStore(d)
    assert w.pending(st) == [a] and st.corrupt == 1, (w.pending(st), st.corrupt)
    assert st.tail == b, st.tail  # the torn put's key is free again
    st.close()
    rmtree(top)


def test_a_damaged_segment_header_loses_none_of_its_records():
    # Issue 30, C10: one flipped bit in a segment's header skipped the whole
    # segment, though each record carries its own CRC.
    top, d = _new()
    st = FileStore(d)
    for i in range(4):
        st.put(b"t/x", bytes([i]) * 20, 1, False, i + 1)
    st.done(1)
    st.close()
    seg = _segment(d)
    f = open(seg, "rb")
    data = f.read()
    f.close()
    for at in (0, 5, 9, 13, 17):  # magic, kind, number, base, CRC
        bad = bytearray(data)
        bad[at] ^= 4
        _rewrite(seg, bad)
        st = FileStore(d)
        assert w.pending(st) == [0, 2, 3] and st.corrupt == 1, (at, w.pending(st), st.corrupt)
        w.same(st, 2, 2, b"t/x", bytes([2]) * 20, 1)
        assert st.tail == 4, (at, st.tail)
        k = st.put(b"t/x", b"new", 1, False, 9)  # into a new segment: that one's header is not trusted
        st.close()
        st = FileStore(d)
        assert k == 4 and w.pending(st) == [0, 2, 3, 4], (at, k, w.pending(st))
        for key in (0, 2, 3, 4):
            st.done(key)
        st.close()
        assert sorted(os.listdir(d)) == ["%08x.hfo" % 2, "reserve"], (at, os.listdir(d))  # the damaged one went
        for name in os.listdir(d):
            os.remove(d + "/" + name)
        _rewrite(seg, data)
    rmtree(top)


def test_a_flipped_bit_in_a_records_type_or_length_is_mended_by_its_crc():
    # Issue 30, C9: with no 4-byte stepping through a damaged record, its
    # own length is where the scan goes on; one flipped bit there (or in its
    # type) would lose the rest of the segment, so the scan mends it when
    # the CRC, over the length the mended header gives, checks out.
    top, d = _new()
    st = FileStore(d)
    for i in range(4):
        st.put(b"t/x", bytes([i]) * (20 + 60 * (i == 1)), 1, False, i + 1)
    st.close()
    seg = _segment(d)
    f = open(seg, "rb")
    data = f.read()
    f.close()
    second = 20 + 48  # the unit header, the first record
    for at in (0, 2, 3):  # type, length (low, high)
        for bit in range(8):
            bad = bytearray(data)
            bad[second + at] ^= 1 << bit
            _rewrite(seg, bad)
            st = FileStore(d)
            assert w.pending(st) == [0, 1, 2, 3] and st.corrupt == 1, (at, bit, w.pending(st), st.corrupt)
            w.same(st, 1, 1, b"t/x", bytes([1]) * 80, 1)
            w.same(st, 3, 3, b"t/x", bytes([3]) * 20, 1)
            st.close()
    _rewrite(seg, data)
    rmtree(top)

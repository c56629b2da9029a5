# FlashStore (holdfast.durable.flash): the outbox as a ring log on raw NOR
# flash. The simulated chip refuses any program that would need an erase, so
# every test also checks that the store only programs erased bytes.
from holdfast.durable import FlashStore
import holdfast.durable.scan as boot_scan
from holdfast.errors import OutboxFull
from flashsim import Flash
from support import raises
import outbox_work as w
from holdfast.held import table


def test_reopen_keeps_state():
    for prog in (1, 256):
        dev = Flash(5, 256, 1) if prog == 1 else Flash(3, 512, 256)
        st = FlashStore(dev, prog=prog)
        m = w.Model()
        m.run(st, w.script(80, seed=3, span=8))
        w.check(st, m, "live")
        st = FlashStore(dev, prog=prog)
        w.check(st, m, "reopened %d" % prog)
        assert st.corrupt == 0, st.corrupt
        w.after(st)
        assert dev.erased > 0, "the ring never wrapped"


def test_reopen_with_fewer_slots_keeps_moved_backlog_in_order():
    # Block moves copy pending messages after newer ones; the boot scan puts
    # them back in key order, and grows the index past slots to keep all.
    dev = Flash(5, 256, 1)
    st = FlashStore(dev)
    keep = w.backlog_out_of_order(st)
    st = FlashStore(dev, slots=4)
    w.check_backlog(st, keep, "flash")


def _undone(st):
    # Records on flash not marked done: after recovery, exactly the pending
    # messages and held ids (no stale copy left behind by a cut compaction).
    n = [0]

    def on(log, b, p, t, flags, blen, seq, pid, rel, done):
        n[0] += not done

    for b in range(st.n):
        if st._bst[b] == 2:
            boot_scan.scan(st, b, 20, st.bs, True, on)
    return n[0]


def _undone_is_pending(st, t):
    c = st.corrupt
    n = _undone(st)
    st.corrupt = c
    held = len([p for p in st.held_ids._hpid if p]) if st.held_ids else 0
    assert n == len(st) + held, (t, n, len(st), held)


def _cuts(ops, blocks, prog, tag):
    run = Flash(blocks, 256, prog)  # reused round after round: no heap churn
    boot = Flash(blocks, 256, prog)

    def make():
        run.wipe()
        return FlashStore(run, prog=prog), run

    def reopen(dev):
        boot.load(dev)  # (dev may be boot itself, after a second cut)
        return FlashStore(boot, prog=prog)

    return w.cuts(ops, make, reopen, tag, _undone_is_pending, lambda st: st.dev)


# On 4 blocks this workload erases 9 blocks and compacts 7 times (no cut).
OPS = (60, 1, 10)


def test_power_cut_at_every_program_and_erase():
    n = _cuts(w.script(OPS[0], seed=OPS[1], span=OPS[2]), 4, 1, "flash")
    assert n > 150, n


def test_power_cut_with_page_programming():
    n = _cuts(w.script(OPS[0], seed=OPS[1], span=OPS[2]), 4, 256, "pages")
    assert n > 150, n


def test_no_record_goes_where_a_torn_one_ends():
    # A put cut before its last byte (the payload, 0x4D = "M") leaves a
    # record whose header claims one still erased byte, at a 4-byte
    # boundary. Had the next record been programmed there, its first byte
    # ("M") would complete the torn one, which would come back and hide it.
    dev = Flash(4, 256)
    st = FlashStore(dev)
    dev.cut(5, 0)  # block header, record header, topic, pid, then the payload
    raises(OSError, st.put, b"ab", b"M", 1, False, 7)
    st = FlashStore(dev.clone())
    assert len(st) == 0 and st.corrupt == 1, (len(st), st.corrupt)
    k = st.put(b"cd", b"new", 1, False, 8)
    st = FlashStore(st.dev)
    assert w.pending(st) == [k], w.pending(st)
    w.same(st, k, 7, b"cd", b"new", 1)


def test_bit_flips_drop_only_the_damaged_record():
    dev = Flash(5, 256)
    st = FlashStore(dev)
    m = w.Model()
    m.run(st, w.script(40, seed=11, span=8))
    want = w.pending(st)
    r = w.Rand(3)
    used = [a for a in range(len(dev.mem)) if dev.mem[a] != 255]
    for trial in range(60):
        flips = 1 + trial % 3
        d = dev.clone()
        for _ in range(flips):
            d.flip(used[r.next(len(used))], r.next(8))
        st = FlashStore(d)
        got = w.pending(st)
        for k in got:
            assert k in want, (trial, "came back", k)
            e = m.msgs[k]
            w.same(st, k, e[0], e[1], e[2], e[3])
        lost = len(want) - len(got)
        assert lost <= flips and (not lost or st.corrupt), (trial, lost, st.corrupt)
        w.after(st, "flip %d" % trial)


def test_torn_erase_and_garbage_blocks_are_reused():
    dev = Flash(4, 256)
    st = FlashStore(dev)
    for i in range(40):
        st.done(st.put(b"t", b"x" * 30, 1, False, 1 + i))
    keep = st.put(b"t/keep", b"k", 1, False, 99)
    erase = dev.ioctl
    hit = []

    def torn(op, arg):  # the next erase stops after 100 bytes
        if op == 6 and not hit:
            hit.append(arg)
            dev.cut(1, 100)
        return erase(op, arg)

    dev.ioctl = torn
    raises(OSError, lambda: [st.done(st.put(b"t", b"x" * 30, 1, False, 1)) for _ in range(20)])
    a = hit[0] * 256
    assert dev.mem[a:a + 100] == b"\xff" * 100 and dev.mem[a + 100:a + 256] != b"\xff" * 156, hit
    d = dev.clone()
    st = FlashStore(d)
    assert w.pending(st)[0] == keep, w.pending(st)
    for i in range(60):
        st.done(st.put(b"t", b"y" * 30, 1, False, 1 + i))
    assert w.pending(FlashStore(d))[0] == keep


def test_full_then_usable_after_acks():
    dev = Flash(4, 256)
    st = FlashStore(dev, slots=64)
    keys = w.fill(st, 2, "flash outbox full")
    assert len(keys) >= 8, keys
    table(st).hold(5)
    e = raises(OutboxFull, st.put, b"x", b"y" * 300, 1, False, 1)
    assert "can never fit this outbox" in str(e) and str(st.most) in str(e), e
    for k in keys[1:]:
        st.release(k)
        st.done(k)
    more = [st.put(b"fill/up", b"g" * 40, 1, False, 1) for _ in range(len(keys) - 2)]
    st = FlashStore(dev, slots=64)
    assert w.pending(st) == keys[:1] + more, w.pending(st)
    assert st.held_ids.held(5)


def test_wear_spreads_over_all_blocks():
    dev = Flash(6, 256)
    counts = [0] * 6
    erase = dev.ioctl

    def ioctl(op, arg):
        if op == 6:
            counts[arg] += 1
        return erase(op, arg)

    dev.ioctl = ioctl
    st = FlashStore(dev)
    old = st.put(b"t/old", b"o", 1, False, 1)  # pending throughout
    for i in range(300):
        st.done(st.put(b"t", b"w" * 40, 1, False, 2 + i % 60000))
    used = [c for c in counts if c]
    assert len(used) >= 5 and max(used) - min(used) <= 2, counts
    assert w.pending(st) == [old]


def test_a_block_of_a_newer_format_is_left_alone():
    # A block whose header says a later holdfast wrote it is counted in
    # foreign and never erased nor written, however often the ring wraps.
    import struct
    from holdfast.durable.log import crc32
    dev = Flash(5, 256, 1)
    h = bytearray(struct.pack("<4sBBHIII", b"hfOB", 9, 0x42, 0, 7, 0, 0))
    struct.pack_into("<I", h, 16, crc32(h[0:16]))
    dev.mem[2 * 256:2 * 256 + 20] = h
    before = bytes(dev.mem[2 * 256:3 * 256])
    st = FlashStore(dev)
    assert st.foreign == 1, st.foreign
    for i in range(200):  # several times round the other blocks
        st.done(st.put(b"t", b"p" * 30, 1, False, i % 60000 + 1))
    assert bytes(dev.mem[2 * 256:3 * 256]) == before, "the newer block was written"
    assert dev.erased > 4, dev.erased
    st = FlashStore(dev)
    assert st.foreign == 1 and st.corrupt == 0, (st.foreign, st.corrupt)


def test_a_torn_put_whose_payload_holds_records_neither_forgets_nor_conjures():
    # Issue 30, C9: the scan resynchronised inside a torn record's body at
    # 4-byte steps, so records a payload carries (a D for a pending message,
    # an M) were taken for real: one accepted message forgotten, one conjured.
    # On flash a D record marks nothing (done bytes do): an M conjures.
    dev = Flash(4, 512)
    st = FlashStore(dev)
    a = st.put(b"t/a", b"keep me", 1, False, 1)
    p = w.forging(b"t/x", w.forged_records(a, 7))
    dev.cut(4, -3)  # record header, topic, pid, then the payload: all but 3 bytes
    raises(OSError, st.put, b"t/x", p, 1, False, 2)
    st = FlashStore(dev.clone())
    assert w.pending(st) == [a] and st.corrupt == 1, (w.pending(st), st.corrupt)
    assert st.tail == a + 1, st.tail
    k = st.put(b"t/b", b"next", 1, False, 3)
    st = FlashStore(st.dev)
    assert w.pending(st) == [a, k], w.pending(st)

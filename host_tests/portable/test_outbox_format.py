# The outbox format across versions of holdfast: outboxes that an earlier
# holdfast wrote (outbox_images.py) open with this one, and hold what the
# same calls leave in a MemoryStore: the same pending messages byte for
# byte, their ids, QoS, released marks and deadlines, the same held inbound
# ids in the same order, and the same tail. Then the store takes new work.
import os
from holdfast.memstore import MemoryStore
from holdfast.durable import FileStore
from holdfast.durable import FlashStore
import holdfast.durable.scan as boot_scan
from flashsim import Flash
from support import tmpdir, rmtree
import outbox_images as img
import outbox_work as w
from holdfast.held import table

A = bytearray(160)
B = bytearray(160)
F_REL_EXP = 12  # M record flags: written released, with a deadline


def _reference(traffic):
    ref = MemoryStore(8192, 64)
    img.scenario(ref, traffic)
    return ref


def _flags(st, units, ends, blank):
    """The flags of the message records in the image."""
    flags = []

    def on(log, u, p, t, f, blen, seq, pid, rel, done):
        if t == 0x4D:
            flags.append(f)

    for i in range(len(units)):
        boot_scan.scan(st, units[i], 20, ends[i], blank, on)
    return flags


def _same(st, ref, tag):
    keys = w.pending(ref)
    assert w.pending(st) == keys and len(st) == len(keys), (tag, w.pending(st), keys)
    for k in keys:
        n = st.get(k, A, 0)
        assert n == ref.get(k, B, 0) == st.size(k) and A[:n] == B[:n], (tag, k, bytes(A[:n]), bytes(B[:n]))
        got = (st.pid(k), st.qos(k), st.deadline(k))  # qos 3: released
        assert got == (ref.pid(k), ref.qos(k), ref.deadline(k)), (tag, k, got)
    assert st.tail == ref.tail, (tag, st.tail, ref.tail)
    assert st.corrupt == 0 and st.foreign == 0, (tag, st.corrupt, st.foreign)
    # The held ids, and their order: hold new ids until every old one is
    # evicted; each store must evict the same ids in the same order.
    for pid in range(100, 140):
        table(st).hold(pid)
        table(ref).hold(pid)
        for p in list(range(1, 13)) + [7, 9, 11, pid - 31]:
            assert st.held_ids.held(p) == ref.held_ids.held(p), (tag, "held", p, "after holding", pid)
    assert st.held_evicted == ref.held_evicted > 0, (tag, st.held_evicted, ref.held_evicted)
    w.after(st, tag)


def test_a_flash_outbox_written_by_an_earlier_version_opens():
    dev = Flash(4, 256)
    dev.mem[:] = bytes.fromhex("".join(img.FLASH))
    st = FlashStore(dev)
    flags = _flags(st, range(4), [256] * 4, True)
    assert (2 | F_REL_EXP) in flags, ("not the image described", flags)
    _same(st, _reference(img.FLASH_TRAFFIC), "flash")


def test_a_file_outbox_written_by_an_earlier_version_opens():
    top = tmpdir()
    d = top + "/ob"
    os.mkdir(d)
    units = []
    ends = []
    for name in img.FILES:
        b = bytes.fromhex("".join(img.FILES[name]))
        with open(d + "/" + name, "wb") as f:
            f.write(b)
        units.append(int(name[:8], 16))
        ends.append(len(b))
    st = FileStore(d, segment_bytes=512, compact=2)
    flags = _flags(st, units, ends, False)
    assert (2 | F_REL_EXP) in flags, ("not the image described", flags)
    _same(st, _reference(img.FILE_TRAFFIC), "file")
    st.close()
    rmtree(top)

# Write amplification and RAM of the persistent outboxes, on a simulated NOR
# flash (host_tests/portable/flashsim.py):
#     micropython tools/bench/outbox_wear.py [N]   FlashStore; FileStore on LittleFS
#                                                  and on a directory (build/)
#     python3 tools/bench/outbox_wear.py [N]       FlashStore; FileStore on a directory
# N messages (default 1000) of a 64-byte payload at QoS 1, each acknowledged
# (done) before the next, as a sensor that reaches its broker does, counted
# after a warm-up that has cycled every block of the 256 KB partition once
# (steady state: the ring has wrapped). One JSON line per case:
#   programmed_per_msg  bytes handed to the flash per message (the file cases
#                       on a host directory: bytes written to the files)
#   record              bytes of one message's record (16-byte header + the PUBLISH)
#   logical_per_msg     bytes the store itself wrote per message
#   erases_per_msg      flash blocks erased per message (4 KB blocks)
#   heap_open           heap bytes the store holds once opened on empty storage,
#   heap_reopen         and once reopened after the run (the scan's temporary
#                       objects collected; MicroPython: gc.mem_alloc, CPython:
#                       tracemalloc)
#   alloc_per_msg       heap bytes allocated by one put() + done() (MicroPython,
#                       gc disabled; not measured on CPython), averaged over
#                       128: between segment rotations FileStore allocates
#                       nothing (test_outbox_file.py checks it); a rotation
#                       makes the new segment's name (a str open() needs),
#                       and open() and os.remove() allocate in the VFS: each
#                       copies the path it is given, open() makes the file
#                       object (unix: 32 bytes, LittleFS: 320 with its cache).
#                       Unix port, 64-bit, this script's 45-character paths:
#                       96 + (96 + 32) + 96 = 320 bytes a rotation, 4 of them
#                       in 128 messages
# Then one more JSON line per backend (FlashStore prog=1, FileStore on LittleFS,
# FileStore on a directory), on fresh storage: 1000 messages put and never
# acknowledged (a sensor cut off from its broker), then the store reopened:
#   recovery_ms_1000    time to reopen it (the boot scan), milliseconds
#   pending_1000        len(store) once reopened (must be 1000)
#   heap_10, heap_1000  heap bytes the reopened store holds with 10 and with
#                       1000 messages pending (slots=1024 in both cases)
#   heap_per_pending    (heap_1000 - heap_10) / 990: bytes per pending message
#                       beyond the fixed index (the record bodies stay on
#                       flash; the index is allocated for `slots` up front)
import sys
import gc
import os
import time

_here = sys.argv[0].rsplit("/", 1)[0] if "/" in sys.argv[0] else "."
sys.path.insert(0, _here + "/../../firmware")
sys.path.insert(0, _here + "/../../host_tests/portable")
from flashsim import Flash  # noqa: E402
from holdfast.durable import FlashStore  # noqa: E402
from holdfast.durable import FileStore  # noqa: E402

MPY = sys.implementation.name == "micropython"
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
TOPIC = b"sensors/dev-1/telemetry"
PAYLOAD = b"x" * 64
BLOCKS = 64  # a 256 KB partition
BS = 4096
MNT = "/outbox-wear"
GROUPS = (8, 16, 32)  # group commit: every N messages


def _used():
    if MPY:
        gc.collect()
        return gc.mem_alloc()
    import tracemalloc
    return tracemalloc.get_traced_memory()[0]


def opened(make):
    """(store, heap bytes it holds)."""
    if not MPY:
        import tracemalloc
        tracemalloc.start()
    before = _used()
    st = make()
    after = _used()
    if not MPY:
        import tracemalloc
        tracemalloc.stop()
    return st, after - before


def churn(st, n):
    for i in range(n):
        st.done(st.put(TOPIC, PAYLOAD, 1, False, i % 65535 + 1))


def warm(st, dev):
    n = 0
    while dev.erased < BLOCKS and n < 20000:
        churn(st, 16)
        n += 16


def alloc(st, dev):
    if not MPY:
        return None
    if dev is not None:
        dev.quiet = True  # the simulator itself allocates nothing then
    churn(st, 5)
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    churn(st, 128)  # several segment rotations: they allocate (a file, a name)
    b = gc.mem_alloc()
    gc.enable()
    if dev is not None:
        dev.quiet = False
    return (b - a) / 128


def report(name, make, dev):
    st, heap = opened(make)
    if dev is not None:
        warm(st, dev)
        base = (dev.programmed, dev.erased)
    else:
        churn(st, 64)  # the first put writes the reserve file
    logical = st.bytes_written
    churn(st, N)
    out = {"case": name, "messages": N, "payload": len(PAYLOAD),
           "record": 16 + 2 + 2 + len(TOPIC) + 2 + len(PAYLOAD),
           "logical_per_msg": round((st.bytes_written - logical) / N, 1), "heap_open": heap}
    if dev is not None:
        out["programmed_per_msg"] = round((dev.programmed - base[0]) / N, 1)
        out["erases_per_msg"] = round((dev.erased - base[1]) / N, 4)
    out["alloc_per_msg"] = alloc(st, dev)
    if hasattr(st, "close"):
        st.close()
    st = None
    st, out["heap_reopen"] = opened(make)
    if hasattr(st, "close"):
        st.close()
    items = []
    for k in KEYS:
        if k in out:
            v = out[k]
            items.append('"%s": %s' % (k, "null" if v is None else
                                       '"%s"' % v if isinstance(v, str) else v))
    print("{" + ", ".join(items) + "}")


KEYS = ("case", "messages", "payload", "record", "programmed_per_msg", "erases_per_msg",
        "logical_per_msg", "heap_open", "heap_reopen", "alloc_per_msg")


def flash(prog):
    dev = Flash(BLOCKS, BS, prog)
    report("FlashStore prog=%d" % prog, lambda: FlashStore(dev, prog=prog), dev)


def mount_new_lfs():
    """A freshly formatted LittleFS on a new simulated chip, mounted at MNT."""
    dev = Flash(BLOCKS, BS, errno=True)
    os.VfsLfs2.mkfs(dev)
    try:
        os.umount(MNT)
    except OSError:
        pass
    os.mount(os.VfsLfs2(dev), MNT)
    return dev


def littlefs(sync_done, group=1):
    dev = mount_new_lfs()
    report("FileStore on LittleFS sync_done=%s group=%d" % (sync_done, group),
           lambda: FileStore(MNT + "/ob", sync_done=sync_done, group=group), dev)
    os.umount(MNT)


def directory(sync_done):
    try:
        os.mkdir(_here + "/../build")
    except OSError:
        pass  # there already
    top = _here + "/../build/outbox-wear"
    report("FileStore on a host directory sync_done=%s" % sync_done,
           lambda: FileStore(top, sync_done=sync_done, fsync=False), None)
    for name in os.listdir(top):
        os.remove(top + "/" + name)
    os.rmdir(top)


def _ticks_us():
    if MPY:
        return time.ticks_us()
    return int(time.perf_counter() * 1000000)


def _us_since(t0):
    if MPY:
        return time.ticks_diff(time.ticks_us(), t0)
    return _ticks_us() - t0


SLOTS = 1024
RKEYS = ("case", "recovery_ms_1000", "pending_1000", "slots", "heap_10", "heap_1000",
         "heap_per_pending")


def _close(st):
    if hasattr(st, "close"):
        st.close()


def _fill(make, n):
    st = make()
    for i in range(n):
        st.put(TOPIC, PAYLOAD, 1, False, i % 65535 + 1)
    _close(st)


def _scrub(d=40):
    # Overwrite the C stack, so no stale pointer left there by the previous
    # store keeps it alive for the conservative collector (MicroPython).
    a = b = c = d
    if d:
        _scrub(d - 1)
    return a + b + c


def _reopen(make):
    """(store, microseconds to open it, heap bytes it holds)."""
    _scrub()
    if not MPY:
        import tracemalloc
        tracemalloc.start()
    before = _used()
    t0 = _ticks_us()
    st = make()
    us = _us_since(t0)
    after = _used()
    if not MPY:
        tracemalloc.stop()
    return st, us, after - before


def pending(fresh, n):
    """fresh() -> (make, fin) on fresh storage. Put n messages, none
    acknowledged, then reopen: (ms to reopen, heap the store holds, len)."""
    make, fin = fresh()
    _fill(make, n)
    st, us, heap = _reopen(make)
    k = len(st)
    _close(st)
    fin()
    return us / 1000, heap, k


def recovery(name, fresh):
    ms, h1000, k = pending(fresh, 1000)
    _, h10, _ = pending(fresh, 10)
    out = {"case": name, "recovery_ms_1000": round(ms, 1), "pending_1000": k, "slots": SLOTS,
           "heap_10": h10, "heap_1000": h1000, "heap_per_pending": round((h1000 - h10) / 990, 2)}
    if k != 1000:
        raise SystemExit("%s: %d pending after reopening, not 1000" % (name, k))
    print("{" + ", ".join('"%s": %s' % (x, '"%s"' % out[x] if isinstance(out[x], str) else out[x])
                          for x in RKEYS) + "}")


def fresh_flash():
    dev = Flash(BLOCKS, BS, 1)
    return (lambda: FlashStore(dev, slots=SLOTS, prog=1)), (lambda: None)


def fresh_lfs():
    dev = mount_new_lfs()
    first = [True]

    def make():
        if first[0]:
            first[0] = False
        else:  # a reboot: remount before the scan
            os.umount(MNT)
            os.mount(os.VfsLfs2(dev), MNT)
        return FileStore(MNT + "/ob", slots=SLOTS)
    return make, lambda: os.umount(MNT)


def fresh_dir():
    try:
        os.mkdir(_here + "/../build")
    except OSError:
        pass
    top = _here + "/../build/outbox-recovery"

    def fin():
        for name in os.listdir(top):
            os.remove(top + "/" + name)
        os.rmdir(top)
    try:
        fin()
    except OSError:
        pass
    return (lambda: FileStore(top, slots=SLOTS, fsync=False)), fin


flash(1)
flash(256)
if MPY and hasattr(os, "VfsLfs2"):
    littlefs(True)
    littlefs(False)
    for g in GROUPS:
        littlefs(False, g)
directory(True)
directory(False)
recovery("FlashStore prog=1", fresh_flash)
if MPY and hasattr(os, "VfsLfs2"):
    recovery("FileStore on LittleFS", fresh_lfs)
recovery("FileStore on a host directory", fresh_dir)

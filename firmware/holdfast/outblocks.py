# FlashStore's opening: its state and the scan of its blocks. A FlashStore
# loads it with outscan.py while it opens and unloads both after
# (unload.py); apart from outscan so that a FileStore's opening, the peak of
# a sensor application's boot, does not load it too.
from array import array
import holdfast.outscan as sc
from .outscan import init, unit_check, scan, found, opened
# outlog's and flashoutbox's constants (const() names with _ are not importable;
# test_outbox_consts.py checks that the copies agree):
_VERSION = const(2)  # 2 added _F_EXP; version 1 units are read as they are
_UNIT = const(20)  # segment file / flash block header
_USED = const(2)  # block states
_FOREIGN = const(3)


def blocks(log, kind, bdev, slots, held, prog, start, count, limit):
    """FlashStore's opening (its arguments): makes its state, reads the
    block headers, then scans the log's blocks in the order they were
    written."""
    bs = bdev.ioctl(5, 0)
    n = count or bdev.ioctl(4, 0) - start
    init(log, slots, held, limit, bs, n)
    log.dev = bdev
    log.bs = bs
    log.start = start
    log.n = n
    if log.n < 3:
        raise ValueError("a flash outbox needs at least 3 blocks, has %d" % log.n)
    log._page = bytearray(prog) if prog > 1 else None  # a page, for prog > 1
    log._zero = bytearray(1)
    log.erases = 0
    log._bst = bytearray(log.n)
    log._live = array("i", [0] * log.n)  # block -> bytes of its live records
    log._wunit = -1  # block being written
    log._wpos = bs  # where its next record goes
    log._nseq = 1
    used = []
    salvage = []
    for b in range(log.n):
        log._rd(b, 0, log._unithead)
        u = unit_check(log.buf, kind)
        if u is None:
            if log._nonff(b, 0, _UNIT) < _UNIT:
                salvage.append(b)  # torn header or erase, or damage
            continue
        if u[0] > _VERSION:
            log._bst[b] = _FOREIGN
            log.foreign += 1
            continue
        log._bst[b] = _USED
        used.append((u[1], b, u[2]))
    # A block whose header is damaged but holds valid records is read as
    # the oldest part of the log.
    for b in salvage:
        live = []  # the block's records not done (the last of on()'s arguments)
        c = log.corrupt
        scan(log, b, _UNIT, bs, True, lambda *r: r[-1] or live.append(b))
        log.corrupt = c
        if live:
            log.corrupt += 1
            log._bst[b] = _USED
            used.append((-1, b, 0))
    used.sort()
    sc._holds = []
    for seq, b, base in used:
        if base > log.tail:
            log.tail = base
        if seq >= log._nseq:
            log._nseq = seq + 1
        wp = scan(log, b, _UNIT, bs, True, found)
        if seq >= 0:
            log._wunit = b
            log._wpos = wp
    opened(log)

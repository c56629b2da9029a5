# FlashStore's opening: the scan of its blocks. A FlashStore loads it with
# scan.py while it opens and unloads both after (unload.py); apart from
# scan.py so that a FileStore's opening, the peak of a sensor application's
# boot, does not load it too.
from .scan import unit_check, scan, found, opened
# log's and flash's constants (const() names with _ are not importable;
# test_outbox_consts.py checks that the copies agree):
_VERSION = const(2)  # 2 added _F_EXP; version 1 units are read as they are
_UNIT = const(20)  # segment file / flash block header
_USED = const(2)  # block states
_FOREIGN = const(3)


def blocks(log, kind):
    """FlashStore log's opening: reads the block headers, then scans the
    log's blocks in the order they were written. Returns the blocks'
    states, the block being written (-1: none), where its next record goes
    and the sequence number of the next block taken."""
    bs = log.bs
    bst = bytearray(log.n)
    wunit = -1
    wpos = bs
    nseq = 1
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
            bst[b] = _FOREIGN
            log.foreign += 1
            continue
        bst[b] = _USED
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
            bst[b] = _USED
            used.append((-1, b, 0))
    used.sort()
    for seq, b, base in used:
        if base > log.tail:
            log.tail = base
        if seq >= nseq:
            nseq = seq + 1
        wp = scan(log, b, _UNIT, bs, True, found)
        if seq >= 0:
            wunit = b
            wpos = wp
    opened(log)
    return bst, wunit, wpos, nseq

# The outbox on a raw flash partition (esp32.Partition, rp2.Flash or any
# object with the extended block protocol): a ring log of blocks that only
# ever programs erased bytes (NOR flash: bits go 1 -> 0) and erases a block
# only to reuse it once nothing in it is pending. Format, recovery rules and
# what each failure keeps or drops: docs/outbox.md.
from array import array
from .. import codec
from .. import errors  # errors.X where raised or caught: the class loads with the first failure
from .log import Log
# log's format constants (const() names with _ are not importable; test_outbox_consts.py
# checks that the copies agree):
_UNIT = const(20)  # segment file / flash block header
_T_REL = const(0x52)  # 'R' file log: message seq reached PUBREC

_KIND = const(0x42)  # 'B': a flash block
# Error reasons (reasons.py has the words).
_E_BLOCK_FIT = const(75)
_E_FLASH_FULL = const(76)
# Block states (blocks.py has its own _USED and _FOREIGN: const() names with _ are not importable)
_UNKNOWN = const(0)  # no valid header: must be blank-checked (and maybe erased) before use
_BLANK = const(1)  # erased by us
_USED = const(2)  # valid header: part of the log
_FOREIGN = const(3)  # a newer format: left alone


class FlashStore(Log):
    """Outbox on the blocks of bdev (ioctl 4 = count, 5 = size, 6 = erase;
    readblocks/writeblocks with a byte offset).

    Records are programmed once into erased space; release(), done() and
    unhold() program one state byte of the record to 0 in place. Blocks are
    used in ring order; the next block is erased only when nothing in it is
    pending any more. One block stays in reserve so the pending records of a
    block can be copied forward when the ring is full (OutboxFull if even
    that frees nothing).

    prog: program granularity in bytes. 1 for esp32.Partition; 256 for
    rp2.Flash (the Pico SDK programs whole 256-byte pages): writes are then
    padded with 0xFF, which leaves programmed bytes as they are.
    start, blocks: use only this range of the device's blocks.
    held: inbound QoS 2 ids kept (32; held.Held says why).
    Counters: corrupt, foreign, bytes_written (bytes handed to writeblocks),
    erases, unsaved (held ids kept in RAM only: no room), held_evicted.
    """

    def __init__(self, bdev, slots=32, held=32, prog=1, start=0, blocks=0, limit=0):
        from ..unload import unload  # loaded first: loading it in the finally could hide the error
        from .blocks import blocks as scan  # with scan.py: run only to open
        try:
            bs = bdev.ioctl(5, 0)
            n = blocks or bdev.ioctl(4, 0) - start
            Log.__init__(self, slots, held, limit, bs, n)
            self.dev = bdev
            self.bs = bs
            self.start = start
            self.n = n
            if n < 3:
                raise ValueError("a flash outbox needs at least 3 blocks, has %d" % n)
            self._page = bytearray(prog) if prog > 1 else None  # a page, for prog > 1
            self._zero = bytearray(1)
            self.erases = 0
            self._live = array("i", [0] * n)  # block -> bytes of its live records
            # Each block's state; the block being written (-1: none), where
            # its next record goes; the sequence number of the next block taken.
            self._bst, self._wunit, self._wpos, self._nseq = scan(self, _KIND)
        finally:
            unload("durable.blocks", "durable.scan")

    def sync(self, now=0):
        """Makes what was written durable: it is, once programmed. Nothing
        to commit (_commit), nor to do as time passes (tick)."""
        return True

    _commit = tick = sync

    # -- device access -----------------------------------------------------

    def _rd(self, unit, pos, mv):
        self.dev.readblocks(self.start + unit, mv, pos)
        return len(mv)

    def _prog(self, unit, pos, data):
        n = len(data)
        self._wrote(n)
        if self._page is None:
            self.dev.writeblocks(self.start + unit, data, pos)
            return
        # Whole aligned pages, 0xFF around the data.
        pg = self._page
        ps = len(pg)
        i = 0
        while i < n:
            a = (pos + i) // ps * ps
            o = pos + i - a
            k = min(ps - o, n - i)
            for j in range(ps):
                pg[j] = 255
            for j in range(k):
                pg[o + j] = data[i + j]
            self.dev.writeblocks(self.start + unit, pg, a)
            i += k

    def _erase(self, unit):
        self._bst[unit] = _UNKNOWN
        self.erases += 1
        self.dev.ioctl(6, self.start + unit)
        self._bst[unit] = _BLANK
        self._live[unit] = 0

    def _nonff(self, unit, pos, end):
        """Offset of the first byte in [pos, end) that is not 0xFF, or end
        (erased flash reads 0xFF)."""
        b = self.buf
        while pos < end:
            n = min(len(b), end - pos)
            self._rd(unit, pos, b if n == len(b) else b[0:n])
            for i in range(n):
                if b[i] != 255:
                    return pos + i
            pos += n
        return end

    # -- space -------------------------------------------------------------------

    def _take(self, b):
        """Makes block b (one with nothing live) the one written: erased if
        needed, header programmed."""
        s = self._bst[b]
        if s == _USED or (s == _UNKNOWN and self._nonff(b, 0, self.bs) < self.bs):
            self._erase(b)
        self._bst[b] = _UNKNOWN  # until its header is programmed
        seq = self._nseq
        self._nseq = seq + 1
        self._unit_head(_KIND, seq, self.tail)
        self._wunit = b
        self._wpos = self.bs
        self._prog(b, 0, self._unithead)
        self._bst[b] = _USED
        self._live[b] = 0
        self._wpos = _UNIT

    # -- the log -------------------------------------------------------------------

    def _append(self, n, parts, t):
        if _UNIT + n > self.bs:
            raise errors.OutboxFull(codec.why(_E_BLOCK_FIT, n, self.bs))
        if self._wunit < 0 or self._wpos + n > self.bs:
            # A block with room: a free one, but every record, a held id's
            # too, leaves the reserve block for a compaction: taken by a
            # record, it would leave put() no way to make room.
            k = self.n
            first = -1
            count = 0
            w = self._wunit
            h = w if w >= 0 else k - 1
            for i in range(1, k + 1):
                b = (h + i) % k
                s = self._bst[b]
                if b != w and (s == _UNKNOWN or s == _BLANK or (s == _USED and not self._live[b])):
                    count += 1
                    if first < 0:
                        first = b
            if count >= 2:
                self._take(first)
            else:
                # Only the reserve is left (or not even that): copy the
                # pending records of the block with the fewest live bytes
                # into it, then erase that block.
                v = -1
                for b in range(k if count else 0):
                    if self._bst[b] == _USED and self._live[b] and (v < 0 or self._live[b] < self._live[v]):
                        v = b
                if v < 0 or _UNIT + self._live[v] + n > self.bs:
                    held = 0
                    for p in self.held_ids._hpid if self.held_ids else ():
                        if p:
                            held += 1
                    raise errors.OutboxFull(codec.why(_E_FLASH_FULL, len(self), held, k, self.bs))
                # The mover is loaded before the spare block is taken: a
                # MemoryError loading it leaves the reserve as it was.
                from .compaction import move
                from ..unload import unload
                try:
                    self._take(first)
                    move(self, v)
                finally:
                    unload("durable.compaction")
                self._erase(v)
        b = self._wunit
        p = q = self._wpos
        self._wpos = self.bs  # if programming fails, nothing more goes in this block
        for x in parts:
            if x:
                self._prog(b, q, x)
                q += len(x)
        self._wpos = p + n  # the padding stays erased
        return p

    def _mark(self, t, unit, pos, key, pid):
        self._prog(unit, pos + (10 if t == _T_REL else 11), self._zero)
        return True

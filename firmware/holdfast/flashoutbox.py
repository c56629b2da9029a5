# The outbox on a raw flash partition (esp32.Partition, rp2.Flash or any
# object with the extended block protocol): a ring log of blocks that only
# ever programs erased bytes (NOR flash: bits go 1 -> 0) and erases a block
# only to reuse it once nothing in it is pending. Format, recovery rules and
# what each failure keeps or drops: docs/outbox.md.
from array import array
from .compat import const
from .errors import OutboxFull
from .outlog import Log, unit_check, VERSION, UNIT, REC, M, H, S_REL

_KIND = const(0x42)  # 'B': a flash block
# Block states
_UNKNOWN = const(0)  # no valid header: must be blank-checked (and maybe erased) before use
_BLANK = const(1)  # erased by us
_USED = const(2)  # valid header: part of the log
_FOREIGN = const(3)  # a newer format: left alone


class FlashStore(Log):
    """Outbox on the blocks of bdev (ioctl 4 = count, 5 = size, 6 = erase;
    readblocks/writeblocks with a byte offset).

    Records are programmed once into erased space; release(), done() and
    drop() program one state byte of the record to 0 in place. Blocks are
    used in ring order; the next block is erased only when nothing in it is
    pending any more. One block stays in reserve so the pending records of a
    block can be copied forward when the ring is full (OutboxFull if even
    that frees nothing).

    prog: program granularity in bytes. 1 for esp32.Partition; 256 for
    rp2.Flash (the Pico SDK programs whole 256-byte pages): writes are then
    padded with 0xFF, which leaves programmed bytes as they are.
    start, blocks: use only this range of the device's blocks.
    held: inbound QoS 2 ids kept (32; store.Held says why).
    Counters: corrupt, foreign, bytes_written (bytes handed to writeblocks),
    erases, unsaved (held ids kept in RAM only: no room), held_evicted.
    """

    def __init__(self, bdev, slots=32, held=32, prog=1, start=0, blocks=0, limit=0):
        Log.__init__(self, slots, held, limit)
        self.dev = bdev
        self.bs = bdev.ioctl(5, 0)
        self.start = start
        self.n = blocks or bdev.ioctl(4, 0) - start
        if self.n < 3:
            raise ValueError("a flash outbox needs at least 3 blocks, has %d" % self.n)
        self.prog = prog
        self._page = bytearray(prog) if prog > 1 else None
        self._zero = bytearray(1)
        self.erases = 0
        n = self.n
        self._bst = bytearray(n)
        self._lcnt = array("H", [0] * n)
        self._lbytes = array("i", [0] * n)
        self._head = -1  # block being written
        self._wp = self.bs  # where its next record goes
        self._nseq = 1
        self._open()

    # -- device access -----------------------------------------------------

    def _rd(self, blk, pos, mv):
        self.dev.readblocks(self.start + blk, mv, pos)
        return len(mv)

    def _prog(self, blk, pos, data):
        n = len(data)
        self._wrote(n)
        if self._page is None:
            self.dev.writeblocks(self.start + blk, data, pos)
            return
        # Whole aligned pages, 0xFF around the data.
        pg = self._page
        ps = self.prog
        i = 0
        while i < n:
            a = (pos + i) // ps * ps
            o = pos + i - a
            k = min(ps - o, n - i)
            for j in range(ps):
                pg[j] = 255
            for j in range(k):
                pg[o + j] = data[i + j]
            self.dev.writeblocks(self.start + blk, pg, a)
            i += k

    def _erase(self, blk):
        self._bst[blk] = _UNKNOWN
        self.erases += 1
        self.dev.ioctl(6, self.start + blk)
        self._bst[blk] = _BLANK
        self._lcnt[blk] = 0
        self._lbytes[blk] = 0

    # -- recovery ----------------------------------------------------------------

    def _open(self):
        bs = self.bs
        hv = self.bv[0:UNIT]
        used = []
        salvage = []
        for b in range(self.n):
            self._rd(b, 0, hv)
            u = unit_check(self.buf, _KIND)
            if u is None:
                if self._nonff(b, 0, UNIT) < UNIT:
                    salvage.append(b)  # torn header or erase, or damage
                continue
            if u[0] > VERSION:
                self._bst[b] = _FOREIGN
                self.foreign += 1
                continue
            self._bst[b] = _USED
            used.append((u[1], b, u[2]))
        # A block whose header is damaged but holds valid records is read as
        # the oldest part of the log.
        self._any = False
        for b in salvage:
            self._any = False
            c = self.corrupt
            self._scan(b, UNIT, bs, True, self._probe)
            self.corrupt = c
            if self._any:
                self.corrupt += 1
                self._bst[b] = _USED
                used.append((-1, b, 0))
        used.sort()
        holds = []
        last = [-1]
        stale = []
        self._scan_state = (holds, last, stale)
        for seq, b, base in used:
            if base - 1 > last[0]:
                last[0] = base - 1
            if seq >= self._nseq:
                self._nseq = seq + 1
            wp = self._scan(b, UNIT, bs, True, self._found)
            if seq >= 0:
                self._head = b
                self._wp = wp
        self._scan_state = None
        self._held(holds, last[0])
        for i in range(self._n):
            if self._st[i]:
                u = self._unit[i]
                self._lcnt[u] += 1
                self._lbytes[u] += (REC + self._size[i] + 3) & ~3
        for i in range(len(self._hpid)):
            if self._hpid[i]:
                b = self._hat[i] // bs
                self._lcnt[b] += 1
                self._lbytes[b] += REC
        # Copies left behind by a compaction cut short: mark them done so
        # they cannot come back once their newer copy is gone.
        for b, p in stale:
            self._prog(b, p + 11, self._zero)

    def _probe(self, blk, pos, t, flags, blen, seq, pid, rel, done):
        if not done:
            self._any = True

    def _found(self, blk, pos, t, flags, blen, seq, pid, rel, done):
        holds, last, stale = self._scan_state
        if t == M:
            if seq > last[0]:
                last[0] = seq
            i = self._find(seq)
            if i >= 0:
                stale.append((self._unit[i], self._off[i]))  # an older copy of this message
                if done:
                    self._forget(i)
            if not done:
                self._scanned(seq, blk, pos, flags, blen, pid, rel)
        elif t == H:
            bs = self.bs
            for i in range(len(holds)):
                if holds[i][1] == pid:
                    at = holds.pop(i)[2]
                    stale.append((at // bs, at % bs))  # an older copy of this hold
                    break
            if not done:
                holds.append([seq, pid, blk * bs + pos])

    # -- space -------------------------------------------------------------------

    def _usable(self, b):
        s = self._bst[b]
        return b != self._head and (s == _UNKNOWN or s == _BLANK or (s == _USED and not self._lcnt[b]))

    def _take(self, b):
        """Makes block b (usable) the head: erased if needed, header programmed."""
        s = self._bst[b]
        if s == _USED or (s == _UNKNOWN and self._nonff(b, 0, self.bs) < self.bs):
            self._erase(b)
        self._bst[b] = _UNKNOWN  # until its header is programmed
        seq = self._nseq
        self._nseq = seq + 1
        self._unit_head(_KIND, seq, self.tail)
        self._head = b
        self._wp = self.bs
        self._prog(b, 0, self._uv)
        self._bst[b] = _USED
        self._lcnt[b] = 0
        self._lbytes[b] = 0
        self._wp = UNIT

    def _advance(self, need):
        """A head block with room for need more bytes. Every record, a held
        id's too, leaves the reserve block for a compaction: taken by a
        record, it would leave put() no way to make room."""
        n = self.n
        first = -1
        count = 0
        h = self._head if self._head >= 0 else n - 1
        for i in range(1, n + 1):
            b = (h + i) % n
            if self._usable(b):
                count += 1
                if first < 0:
                    first = b
        if count >= 2:
            self._take(first)
            return
        if count == 1:
            # Only the reserve is left: copy the pending records of the block
            # with the fewest live bytes into it, then erase that block.
            v = -1
            for b in range(n):
                if self._bst[b] == _USED and self._lcnt[b] and (v < 0 or self._lbytes[b] < self._lbytes[v]):
                    v = b
            if v >= 0 and UNIT + self._lbytes[v] + need <= self.bs:
                self._take(first)
                self._move(v)
                self._erase(v)
                return
        raise OutboxFull("flash outbox full: %d pending messages and %d held ids fill %d blocks of %d bytes"
                         % (len(self), self._nheld(), n, self.bs))

    def _nheld(self):
        c = 0
        for p in self._hpid:
            if p:
                c += 1
        return c

    def _move(self, v):
        """Copies block v's pending records to the head."""
        b = self._head
        for s in range(self._n):
            k = self._key[s]
            st = self._st[s]
            if st and self._unit[s] == v:
                n = self._size[s]
                body = bytearray(n)
                self._rd(v, self._off[s] + REC, body)
                self._marker(M, k, self._pid[s], self._mflags(s), body)
                p = self._wp
                rec = (REC + n + 3) & ~3
                self._wp = self.bs
                self._prog(b, p, self.mb)
                self._prog(b, p + REC, body)
                self._wp = p + rec
                self._unit[s] = b
                self._off[s] = p
                self._lcnt[b] += 1
                self._lbytes[b] += rec
        bs = self.bs
        for i in range(len(self._hpid)):
            if self._hpid[i] and self._hat[i] // bs == v:
                self._hat[i] = b * bs + self._append(H, self._hord[i], self._hpid[i])
                self._lcnt[b] += 1
                self._lbytes[b] += REC
        self._lcnt[v] = 0
        self._lbytes[v] = 0

    def _append(self, t, seq, pid):
        """Programs a record without body at the head; returns its offset."""
        if self._wp + REC > self.bs:
            self._advance(REC)
        self._marker(t, seq, pid)
        p = self._wp
        self._wp = self.bs  # if programming fails, nothing more goes in this block
        self._prog(self._head, p, self.mb)
        self._wp = p + REC
        return p

    # -- the interface -------------------------------------------------------------

    def put(self, topic, payload, qos, retain, pid, deadline=0):
        n = self._message(topic, payload, qos, retain, pid, deadline)
        self._room(n)
        if UNIT + n > self.bs:
            raise OutboxFull("a %d-byte record does not fit a %d-byte flash block" % (n, self.bs))
        if self._head < 0 or self._wp + n > self.bs:
            self._advance(n)
        b = self._head
        p = self._wp
        self._wp = self.bs  # if programming fails, nothing more goes in this block
        v = self._v
        self._prog(b, p, v)
        q = p + len(v)
        self._prog(b, q, self._t)
        q += len(self._t)
        if qos:
            self._prog(b, q, self.pb)
            q += 2
        self._prog(b, q, self._p)
        if deadline:
            self._prog(b, q + len(self._p), self.db)
        self._wp = p + n
        k = self.tail
        self._add(b, p, pid, qos)
        self._lcnt[b] += 1
        self._lbytes[b] += n
        self._t = self._p = None
        return k

    def release(self, key):
        s = self._find(key)
        if s >= 0:
            self._st[s] |= S_REL
            self._prog(self._unit[s], self._off[s] + 10, self._zero)

    def done(self, key):
        s = self._find(key)
        if s >= 0:
            b = self._unit[s]
            self._forget(s)
            self._lcnt[b] -= 1
            self._lbytes[b] -= (REC + self._size[s] + 3) & ~3
            self._prog(b, self._off[s] + 11, self._zero)

    def get(self, key, buf, off):
        s = self._find(key)
        n = self._psize(s)
        self._rd(self._unit[s], self._off[s] + REC, memoryview(buf)[off:off + n])
        return off + n

    def _hsave(self, i, pid, order):
        try:
            p = self._append(H, order, pid)
        except OutboxFull:
            self._hat[i] = -1  # in RAM only: no room
            self.unsaved += 1
            return
        b = self._head
        self._hat[i] = b * self.bs + p
        self._lcnt[b] += 1
        self._lbytes[b] += REC

    def _unhold(self, i, strict):
        at = self._hat[i]
        if at >= 0:
            b = at // self.bs
            self._lcnt[b] -= 1
            self._lbytes[b] -= REC
            self._prog(b, at - b * self.bs + 11, self._zero)

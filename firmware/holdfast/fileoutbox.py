# The outbox on a filesystem (LittleFS on the boards, a directory on unix and
# CPython): append-only segment files of self-checking records. Format,
# recovery rules and what each failure keeps or drops: docs/outbox.md.
import os
from .compat import const, ticks_ms, ticks_diff
from .errors import OutboxFull
from .outlog import Log, unit_check, VERSION, UNIT, REC, M, D, R, H, X, FF, S_REL

_KIND = const(0x46)  # 'F': a segment file
_ENOSPC = const(28)
_fsync = getattr(os, "fsync", None)  # CPython
_sync = getattr(os, "sync", None)  # MicroPython ports that have it


class _Files:
    """The filesystem calls a FileStore makes; tests pass their own."""

    def open(self, path, mode):
        return open(path, mode)

    def remove(self, path):
        os.remove(path)

    def listdir(self, path):
        return os.listdir(path)

    def mkdir(self, path):
        os.mkdir(path)


def _errno(e):
    return e.args[0] if e.args else 0


class FileStore(Log):
    """Outbox in directory `dir`, one segment file per `segment_bytes` of log.

    put() returns once its record is flushed (and fsynced where the runtime
    can): LittleFS commits on flush. With group=N (group commit), only every
    N-th put() commits, or the first one group_ms after the oldest
    uncommitted record (tick() commits it too, so it need not wait for a
    put): a power cut loses the messages put since the last commit (at most
    N-1, or group_ms of them), and a failing write loses them too (counted
    in lost). sync() commits now (before a deep sleep). release() and
    hold()/drop() are durable on return too; done() is durable on return
    when sync_done (the default),
    otherwise its marker rides on the next durable write (a power cut before
    that brings the message back once). A segment is deleted once nothing in
    it is pending (oldest first); when `compact` or more segments exist, the
    live records of a mostly-done oldest segment are copied forward.

    A file of `reserve` bytes keeps room for acknowledgements: when the
    filesystem is full, it is deleted so release(), done(), hold() and
    drop() can still be written, and put() raises OutboxFull until it can be
    made again. Only if even that room is gone does release() or drop()
    raise OutboxFull (the broker then repeats the flow), and done() or
    hold() hold in RAM only (counted in unsaved).

    slots: most messages pending at once (OutboxFull beyond), as MemoryStore.
    held: inbound QoS 2 ids kept (32; store.Held says why). fs: filesystem
    calls (tests inject faults).
    limit: most bytes of pending records (0: only the filesystem's room).
    Counters: corrupt (records skipped by the scan), foreign (segments of a
    newer format, left alone), unsaved, lost, bytes_written, held_evicted.
    """

    def __init__(self, dir, segment_bytes=4096, slots=32, held=32, sync_done=True, compact=4,
                 fs=None, fsync=True, reserve=8192, limit=0, group=1, group_ms=0):
        Log.__init__(self, slots, held, limit)
        self.group = group
        self.group_ms = group_ms
        self.uncommitted = 0  # puts since the last commit (lost by a power cut)
        self._first = 0  # tick of the oldest of them
        self._csize = 0  # size of the active segment at its last commit
        self.lost = 0  # uncommitted messages dropped after a failed write
        self.dir = dir.rstrip("/") if len(dir) > 1 else dir
        self._fmt = self.dir.replace("%", "%%") + "/%08x.hfo"  # a segment's path
        self._pn = self._qn = -1  # the segments of the two paths made last
        self._ps = self._qs = None
        self.segment_bytes = segment_bytes
        self.sync_done = sync_done
        self.compact = compact
        self.fs = fs or _Files()
        self.fsync = fsync
        self._f = None  # active segment, open "a+b"
        self._wseg = -1  # its number
        self._wsize = 0  # its size
        self._rf = None  # a read handle on an older segment
        self._rseg = -1
        self._segs = []  # segment numbers, oldest first (ours, readable)
        self._live = {}  # segment -> [live records, live bytes]
        self._spare = None  # such a list, of a deleted segment: the next one's
        self._nseg = 1  # number of the next new segment
        self._dirty = False  # the active segment holds uncommitted records
        self.reserve = reserve
        self._kept = False  # the reserve file is there, whole
        try:
            self.fs.mkdir(self.dir)
        except OSError:
            pass  # there already, or its parent is missing: listdir says which
        self._open()

    # -- paths and handles -------------------------------------------------

    def _path(self, n):
        # One string per new segment: the path made last and the one before
        # are kept, so deleting the segment before the active one (what a
        # rotation does in steady state) makes no new string.
        if n == self._pn:
            return self._ps
        if n == self._qn:
            return self._qs
        p = self._fmt % n
        self._qn = self._pn
        self._qs = self._ps
        self._pn = n
        self._ps = p
        return p

    def _rd(self, seg, pos, mv):
        f = self._reader(seg)
        f.seek(pos)
        return f.readinto(mv) or 0

    def _reader(self, seg):
        if seg == self._wseg and self._f is not None:
            return self._f
        if seg != self._rseg:
            self._close_reader()
            self._rf = self.fs.open(self._path(seg), "rb")
            self._rseg = seg
        return self._rf

    def _close_reader(self):
        if self._rf is not None:
            try:
                self._rf.close()
            except OSError:
                pass
        self._rf = None
        self._rseg = -1

    def close(self):
        """Flushes pending markers and closes the files (the store is not
        usable afterwards)."""
        f = self._f
        self._f = None
        self._wseg = -1
        self._close_reader()
        if f is not None:
            try:
                if self._dirty:
                    self._commit(f)
            finally:
                f.close()

    # -- recovery ----------------------------------------------------------------

    def _open(self):
        nums = []
        try:
            names = self.fs.listdir(self.dir)
        except OSError as err:
            raise OSError(_errno(err), "outbox directory %r cannot be made or read (does its parent exist?)"
                          % self.dir)
        for name in names:
            if len(name) == 12 and name.endswith(".hfo"):
                try:
                    nums.append(int(name[:8], 16))
                except ValueError:
                    pass
        nums.sort()
        holds = []
        last = [-1]
        self._scan_state = (holds, last)
        end = 0
        clean = False
        for n in nums:
            if n >= self._nseg:
                self._nseg = n + 1
            f = self.fs.open(self._path(n), "rb")
            self._rf = f
            self._rseg = n
            size = f.seek(0, 2)
            f.seek(0)
            hv = self.bv[0:UNIT]
            got = f.readinto(hv) or 0
            if got < UNIT:
                # Created, header not (all) written: a power cut at creation.
                # It can hold no record.
                self._close_reader()
                self._remove(n)
                continue
            u = unit_check(self.buf, _KIND)
            if u is None:
                self.corrupt += 1  # unreadable header: left alone
                self._close_reader()
                continue
            if u[0] > VERSION:
                self.foreign += 1  # a newer format: left alone for it
                self._close_reader()
                continue
            if u[2] - 1 > last[0]:
                last[0] = u[2] - 1
            self._segs.append(n)
            self._live[n] = [0, 0]
            end = self._scan(n, UNIT, size, False, self._found)
            clean = end == size
            self._close_reader()
        self._scan_state = None
        self._held(holds, last[0])
        for i in range(self._n):
            if self._st[i]:
                a = self._live[self._unit[i]]
                a[0] += 1
                a[1] += (REC + self._size[i] + 3) & ~3
        for i in range(len(self._hpid)):
            if self._hpid[i]:
                a = self._live[self._hat[i]]
                a[0] += 1
                a[1] += REC
        # Keep appending to the newest segment if it ended cleanly.
        if self._segs and clean and end < self.segment_bytes and self._segs[-1] == nums[-1]:
            n = self._segs[-1]
            self._f = self.fs.open(self._path(n), "a+b")
            self._wseg = n
            self._wsize = self._csize = end
        self._reclaim()

    def _found(self, seg, pos, t, flags, blen, seq, pid, rel, done):
        holds, last = self._scan_state
        if t == M:
            if seq > last[0]:
                last[0] = seq
            self._scanned(seq, seg, pos, flags, blen, pid, False)
        elif t == D or t == R:
            i = self._find(seq)
            if i >= 0:
                if t == D:
                    self._forget(i)
                else:
                    self._st[i] |= S_REL
        else:
            for i in range(len(holds)):
                if holds[i][1] == pid:
                    holds.pop(i)
                    break
            if t == H:
                holds.append([seq, pid, seg])

    # -- writing -----------------------------------------------------------------

    def _w(self, b):
        self._f.write(b)
        self._wrote(len(b))

    def _commit(self, f=None):
        f = f or self._f
        f.flush()
        if self.fsync:
            if _fsync is not None and hasattr(f, "fileno"):
                _fsync(f.fileno())
            elif _sync is not None:
                _sync()
        if f is self._f:
            self._dirty = False
            self.uncommitted = 0
            self._csize = self._wsize

    def _group(self):
        """A record was written: commits it now or with later ones."""
        self._dirty = True
        n = self.uncommitted = self.uncommitted + 1
        if n >= self.group:
            self._commit()
        elif self.group_ms:
            if n == 1:
                self._first = ticks_ms()
            elif ticks_diff(ticks_ms(), self._first) >= self.group_ms:
                self._commit()

    def tick(self, now):
        if self.uncommitted and self.group_ms and ticks_diff(now, self._first) >= self.group_ms:
            self.sync()

    def sync(self):
        """Commits what is written; False if that failed (those messages are lost)."""
        if self._f is None or not self._dirty:
            return True
        try:
            self._commit()
            return True
        except OSError as e:
            self._failed(e)
            return False

    def _lose(self):
        # The uncommitted tail of the active segment may be gone: forget the
        # messages stored there (a reboot may still find some of them).
        seg = self._wseg
        a = self._live[seg]
        for i in range(self._n):
            if self._st[i] and self._unit[i] == seg and self._off[i] >= self._csize:
                a[0] -= 1
                a[1] -= (REC + self._size[i] + 3) & ~3
                self._forget(i)
                self.lost += 1
        self._wsize = self._csize
        self.uncommitted = 0

    def _remove(self, n):
        if n == self._rseg:
            self._close_reader()
        self.fs.remove(self._path(n))

    def _start(self):
        """Opens a new segment file and makes it the active one."""
        if self._f is not None:
            if self._dirty:
                self._commit()
            self._f.close()
            self._f = None
        n = self._nseg
        self._nseg = n + 1
        path = self._path(n)
        self._unit_head(_KIND, n, self.tail)
        try:
            f = self.fs.open(path, "a+b")
            try:
                f.write(self._uv)
                self._wrote(UNIT)
                self._commit(f)
            except OSError:
                f.close()
                raise
        except OSError:
            try:
                self.fs.remove(path)
            except OSError:
                pass
            raise
        self._f = f
        self._wseg = n
        self._wsize = self._csize = UNIT
        self._segs.append(n)
        a = self._spare or [0, 0]
        self._spare = None
        a[0] = a[1] = 0
        self._live[n] = a

    def _failed(self, e):
        """A write failed. The filesystem keeps what was committed before it;
        if the segment file now holds a partial record, writing goes on in a
        new segment."""
        f = self._f
        self._f = None
        self._dirty = False
        if f is None:
            return
        if self.uncommitted:
            self._lose()
        try:
            f.close()
        except OSError:
            pass
        if _errno(e) != _ENOSPC:
            return
        try:
            f = self.fs.open(self._path(self._wseg), "a+b")
            if f.seek(0, 2) == self._wsize:
                self._f = f
                return
            f.close()
        except OSError:
            pass

    def _ensure(self, n):
        """An active segment with room for n more bytes."""
        if self._f is None or (self._wsize + n > self.segment_bytes and self._wsize > UNIT):
            self._rotate()

    def _rotate(self):
        self._start()
        self._reclaim()
        self._compact()

    def _full(self, e, what):
        return OutboxFull("outbox full: the filesystem has no room for %s (%s); %d messages pending"
                          % (what, e, len(self)))

    def _keep(self):
        """Makes sure the reserve file is there; OutboxFull if it cannot be."""
        if self._kept or not self.reserve:
            return
        path = self.dir + "/reserve"
        try:
            f = self.fs.open(path, "a+b")
            try:
                n = f.seek(0, 2)
                b = self.buf
                for i in range(len(b)):
                    b[i] = 255
                while n < self.reserve:
                    k = min(len(b), self.reserve - n)
                    f.write(self.bv[0:k] if k < len(b) else b)
                    n += k
                    self._wrote(k)
                self._commit(f)
            finally:
                f.close()
            self._kept = True
        except OSError as e:
            if _errno(e) != _ENOSPC:
                raise
            raise self._full(e, "the %d bytes it keeps for acknowledgements" % self.reserve)

    def _spend(self):
        """Frees the reserve for an acknowledgement; False if it is gone."""
        if not self._kept:
            return False
        self._kept = False
        try:
            self.fs.remove(self.dir + "/reserve")
        except OSError:
            return False
        return True

    def put(self, topic, payload, qos, retain, pid, deadline=0):
        n = self._message(topic, payload, qos, retain, pid, deadline)
        self._room(n)
        self._keep()
        pad = n - REC - (self.hb[2] | self.hb[3] << 8)
        for attempt in (0, 1):
            try:
                self._ensure(n)
                p = self._wsize
                self._w(self._v)
                self._w(self._t)
                if qos:
                    self._w(self.pb)
                self._w(self._p)
                if deadline:
                    self._w(self.db)
                if pad:
                    self._w(FF[pad])
                self._wsize = p + n
                self._group()
                break
            except OSError as e:
                self._failed(e)
                if _errno(e) != _ENOSPC:
                    raise
                if attempt or not self._reclaim(True):
                    raise self._full(e, "a %d-byte record" % n)
        k = self.tail
        self._add(self._wseg, p, pid, qos)
        a = self._live[self._wseg]
        a[0] += 1
        a[1] += n
        self._t = self._p = None
        return k

    def _mark(self, t, seq, pid, sync):
        """Appends a marker record; returns its offset in the active segment,
        or -1 if the filesystem is full even without the reserve."""
        for attempt in (0, 1):
            try:
                self._ensure(REC)
                self._marker(t, seq, pid)
                p = self._wsize
                self._w(self.mb)
                self._dirty = True
                if sync:
                    self._commit()
                self._wsize = p + REC
                return p
            except OSError as e:
                self._failed(e)
                if _errno(e) != _ENOSPC:
                    raise
                if attempt or not self._spend():
                    return -1
        return -1

    def release(self, key):
        s = self._find(key)
        if s < 0:
            return
        if self._mark(R, key, self._pid[s], True) < 0:
            raise OutboxFull("outbox full: no room on the filesystem to record that message %d"
                             " reached PUBREC" % self._pid[s])
        self._st[s] |= S_REL

    def done(self, key):
        s = self._find(key)
        if s < 0:
            return
        seg = self._unit[s]
        a = self._live[seg]
        a[0] -= 1
        a[1] -= (REC + self._size[s] + 3) & ~3
        self._forget(s)
        if not a[0] and seg == self._segs[0] and len(self._segs) > 1:
            self._reclaim()  # deleting the segment is the acknowledgement
        elif self._mark(D, key, self._pid[s], self.sync_done) < 0:
            self.unsaved += 1  # may come back after a reboot: at least once

    def get(self, key, buf, off):
        s = self._find(key)
        if s < 0:
            return off  # lost after a failed write
        n = self._psize(s)
        f = self._reader(self._unit[s])
        f.seek(self._off[s] + REC)
        f.readinto(memoryview(buf)[off:off + n])
        return off + n

    def _hsave(self, i, pid, order):
        p = self._mark(H, order, pid, True)
        if p < 0:
            self._hat[i] = -1  # in RAM only: the filesystem is full
            self.unsaved += 1
            return
        self._hat[i] = self._wseg
        a = self._live[self._wseg]
        a[0] += 1
        a[1] += REC

    def _unhold(self, i, strict):
        seg = self._hat[i]
        if seg < 0:
            return
        a = self._live[seg]
        if a[0] == 1 and seg == self._segs[0] and len(self._segs) > 1:
            a[0] = 0
            a[1] -= REC
            self._reclaim()  # deleting the segment is the record
            return
        if self._mark(X, 0, self._hpid[i], True) < 0:
            if strict:
                raise OutboxFull("outbox full: no room on the filesystem to record that inbound"
                                 " message %d is complete" % self._hpid[i])
            self.unsaved += 1  # in RAM only: its H record lives until its segment goes
        a = self._live.get(self._hat[i])  # (writing may have compacted it elsewhere)
        if a:
            a[0] -= 1
            a[1] -= REC

    # -- space ---------------------------------------------------------------------

    def _reclaim(self, all=False):
        """Deletes segments with nothing pending, oldest first (a younger one
        may hold the acknowledgements of an older one). The active segment
        goes too when all=True and every segment is dead. True if any went."""
        gone = False
        segs = self._segs
        while segs and not self._live[segs[0]][0]:
            n = segs[0]
            if len(segs) == 1:
                if not all:
                    break  # the newest segment carries last() across reboots
                if self._f is not None:
                    try:
                        self._f.close()
                    except OSError:
                        pass
                    self._f = None
                self._wseg = -1
                self._dirty = False
            self._remove(n)
            segs.pop(0)
            self._spare = self._live.pop(n)
            gone = True
        return gone

    def _compact(self):
        """Copies the live records of the oldest segment into the active one
        when there are `compact` segments or more and it is mostly done."""
        segs = self._segs
        if len(segs) < self.compact or len(segs) < 2:
            return
        old = segs[0]
        a = self._live[old]
        if a[1] * 4 > self.segment_bytes:
            return
        moves = []
        p = self._wsize
        for s in range(self._n):
            k = self._key[s]
            if self._st[s] and self._unit[s] == old:
                n = self._size[s]
                body = bytearray(n)
                f = self._reader(old)
                f.seek(self._off[s] + REC)
                f.readinto(body)
                self._marker(M, k, self._pid[s], self._mflags(s), body)
                self._w(self.mb)
                self._w(body)
                rec = (REC + n + 3) & ~3
                if rec - REC - n:
                    self._w(FF[rec - REC - n])
                moves.append((s, p, rec))
                p += rec
        for i in range(len(self._hpid)):
            if self._hpid[i] and self._hat[i] == old:
                self._marker(H, self._hord[i], self._hpid[i])
                self._w(self.mb)
                moves.append((-1 - i, p, REC))
                p += REC
        self._commit()
        self._wsize = p
        w = self._live[self._wseg]
        for s, p, rec in moves:
            if s >= 0:
                self._unit[s] = self._wseg
                self._off[s] = p
            else:
                self._hat[-1 - s] = self._wseg
            w[0] += 1
            w[1] += rec
        a[0] = 0
        a[1] = 0
        self._reclaim()

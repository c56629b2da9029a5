# The outbox on a filesystem (LittleFS on the boards, a directory on unix and
# CPython): append-only segment files of self-checking records. Format,
# recovery rules and what each failure keeps or drops: docs/outbox.md.
import os
from time import ticks_ms, ticks_diff
from .. import codec
from .. import errors  # errors.X where raised or caught: the class loads with the first failure
from .log import Log
# log's format constants (const() names with _ are not importable; test_outbox_consts.py
# checks that the copies agree):
_UNIT = const(20)  # segment file / flash block header
_REC = const(16)  # record header
_T_MSG = const(0x4D)  # 'M' a stored PUBLISH: seq = key, body = the packet
_T_DONE = const(0x44)  # 'D' file log: message seq is done
_T_REL = const(0x52)  # 'R' file log: message seq reached PUBREC

_KIND = const(0x46)  # 'F': a segment file
_ENOSPC = const(28)
_E_FS_RESERVE = const(73)  # error reasons (reasons.py has the words)
_E_FS_RECORD = const(74)
_fsync = getattr(os, "fsync", None)  # CPython
_sync = getattr(os, "sync", None)  # MicroPython ports that have it
_PAD = (b"", b"\xff", b"\xff\xff", b"\xff\xff\xff")  # a record to a multiple of 4 bytes


def _full(e):
    # An OSError for a full filesystem (ENOSPC). args[0], not errno: CPython
    # sets errno only from two arguments, MicroPython raises OSError(errno).
    return (e.args or (0,))[0] == _ENOSPC


class FileStore(Log):
    """Outbox in directory `dir`, one segment file per `segment_bytes` of log.

    put() returns once its record is flushed (and fsynced where the runtime
    can): LittleFS commits on flush. With group=N (group commit), only every
    N-th put() commits, or the first one group_ms after the oldest
    uncommitted record (tick() commits it too, so it need not wait for a
    put): a power cut loses the messages put since the last commit (at most
    N-1, or group_ms of them), and a failing write loses them too (counted
    in lost). sync() commits now (before a deep sleep). release() and
    hold()/unhold() are durable on return too; done() is durable on return
    when sync_done (the default),
    otherwise its marker rides on the next durable write (a power cut before
    that brings the message back once). A segment is deleted once nothing in
    it is pending (oldest first); when `compact` or more segments exist, the
    live records of a mostly-done oldest segment are copied forward.

    A file of `reserve` bytes keeps room for acknowledgements: when the
    filesystem is full, it is deleted so release(), done(), hold() and
    unhold() can still be written, and put() raises OutboxFull until it can
    be made again. Only if even that room is gone does release() or unhold()
    raise OutboxFull (the session then fails the link: the broker repeats
    the flow on the next), and done() or hold() hold in RAM only (counted
    in unsaved).

    slots: most messages pending at once (OutboxFull beyond), as MemoryStore.
    held: inbound QoS 2 ids kept (32; held.Held says why). fs: an object
    with open, remove, listdir and mkdir, for the filesystem's own (tests
    inject faults).
    limit: most bytes of pending records (0: only the filesystem's room).
    Counters: corrupt (records skipped by the scan), foreign (segments of a
    newer format, left alone), unsaved, lost, bytes_written, held_evicted.
    """

    lost = 0  # uncommitted messages forgotten after a failed write (a class default, as Log's)
    _first = 0  # group_ms: the tick of the oldest uncommitted put

    def __init__(self, dir, segment_bytes=4096, slots=32, held=32, sync_done=True, compact=4,
                 fs=None, fsync=True, reserve=8192, limit=0, group=1, group_ms=0):
        from ..unload import unload  # loaded first: loading it in the finally could hide the error
        from .scan import files as scan  # the code a store runs only to open
        try:
            Log.__init__(self, slots, held, limit, segment_bytes, 0)  # segment numbers grow with every segment
            self.group = group
            self.group_ms = group_ms
            self.uncommitted = 0  # puts since the last commit (lost by a power cut)
            self._csize = 0  # size of the active segment at its last commit (smaller than _wpos: uncommitted records)
            self.dir = dir = dir.rstrip("/") if len(dir) > 1 else dir
            self._fmt = dir.replace("%", "%%") + "/%08x.hfo"  # a segment's path (no tuple to format it)
            self._paths = [-1, None, -1, None]  # the segments of the two paths made last, and the paths
            self.segment_bytes = segment_bytes
            self.sync_done = sync_done
            self.compact = compact
            self.fs = fs or os
            self._fopen = fs.open if fs else open
            self.fsync = fsync
            self._f = None  # active segment, open "a+b"
            self._wunit = -1  # its number
            self._wpos = 0  # its size
            self._rf = None  # a read handle on an older segment
            self._rseg = -1
            self._segs = []  # segment numbers, oldest first (ours, readable)
            self._live = {}  # segment -> bytes of its live records
            self.reserve = reserve
            self._kept = False  # the reserve file is there, whole
            self._nseg, end = scan(self, _KIND)  # the number of the next new segment
        finally:
            unload("durable.scan")
        if end:  # the newest segment ended cleanly: writing goes on in it
            n = self._segs[-1]
            self._f = self._fopen(self._path(n), "a+b")
            self._wunit = n
            self._wpos = self._csize = end
        self._reclaim()

    # -- paths and handles -------------------------------------------------

    def _path(self, n):
        # One string per new segment: the path made last and the one before
        # are kept, so deleting the segment before the active one (what a
        # rotation does in steady state) makes no new string.
        c = self._paths
        if n == c[0]:
            return c[1]
        if n == c[2]:
            return c[3]
        p = self._fmt % n
        c[2] = c[0]
        c[3] = c[1]
        c[0] = n
        c[1] = p
        return p

    def _rd(self, unit, pos, mv):
        f = self._f
        if unit != self._wunit or f is None:
            f = self._reader(unit)
        f.seek(pos)
        return f.readinto(mv) or 0

    def _reader(self, unit):
        # The read handle on segment unit, opened if it is not the one open.
        if unit != self._rseg:
            self._close_reader()
            self._rf = self._fopen(self._path(unit), "rb")
            self._rseg = unit
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
        self._wunit = -1
        self._close_reader()
        if f is not None:
            try:
                if self._wpos != self._csize:  # records not committed
                    self._commit(f)
            finally:
                f.close()

    # -- writing -----------------------------------------------------------------

    def _commit(self, f=None):
        f = f or self._f
        f.flush()
        if self.fsync:
            if _fsync is not None and hasattr(f, "fileno"):
                _fsync(f.fileno())
            elif _sync is not None:
                _sync()
        if f is self._f:
            self.uncommitted = 0
            self._csize = self._wpos

    def tick(self, now):
        if self.uncommitted and self.group_ms and ticks_diff(now, self._first) >= self.group_ms:
            self.sync()

    def sync(self):
        """Commits what is written; False if that failed (those messages are lost)."""
        if self._f is None or self._wpos == self._csize:
            return True
        try:
            self._commit()
            return True
        except OSError as e:
            self._failed(_full(e))
            return False

    def _append(self, n, parts, t):
        # A message keeps the reserve and, when the filesystem is full, gets
        # room by deleting dead segments; any other record may spend the
        # reserve. A compaction copy is not tried again: the write that made
        # the segment it goes into is.
        if t == _T_MSG and not self._kept and self.reserve:
            # The reserve file: made with the first put, and again after it was
            # spent.
            try:
                f = self._fopen(self.dir + "/reserve", "a+b")
                try:
                    k = f.seek(0, 2)
                    b = self.buf
                    for i in range(len(b)):
                        b[i] = 255
                    while k < self.reserve:
                        m = min(len(b), self.reserve - k)
                        f.write(b[0:m] if m < len(b) else b)
                        k += m
                        self._wrote(m)
                    self._commit(f)
                finally:
                    f.close()
                self._kept = True
            except OSError as e:
                if not _full(e):
                    raise
                raise errors.OutboxFull(codec.why(_E_FS_RESERVE, self.reserve, e, len(self)))
        for attempt in (0, 1):
            try:
                if self._f is None or (self._wpos + n > self.segment_bytes and self._wpos > _UNIT):
                    self._rotate()
                p = self._wpos
                k = 0
                for x in parts:
                    if x:
                        self._f.write(x)
                        k += len(x)
                if k < n:
                    self._f.write(_PAD[n - k])
                self._wrote(n)
                self._wpos = p + n
                if t == _T_MSG:  # committed now or with later ones (group commit)
                    u = self.uncommitted = self.uncommitted + 1
                    if u >= self.group:
                        self._commit()
                    elif self.group_ms:
                        if u == 1:
                            self._first = ticks_ms()
                        elif ticks_diff(ticks_ms(), self._first) >= self.group_ms:
                            self._commit()
                elif t and (t != _T_DONE or self.sync_done):
                    self._commit()
                return p
            except OSError as e:
                if not t:
                    raise
                full = _full(e)
                self._failed(full)
                if not full:
                    raise
                room = not attempt and (self._reclaim(True) if t == _T_MSG else self._kept)
                if room and t != _T_MSG:  # spend the reserve: it is kept for this record
                    self._kept = False
                    try:
                        self.fs.remove(self.dir + "/reserve")
                    except OSError:
                        room = False
                if not room:
                    raise errors.OutboxFull(codec.why(_E_FS_RECORD, n, e, len(self)))

    def _failed(self, full):
        """A write failed (full: the filesystem is). The filesystem keeps
        what was committed before it; if the segment file now holds a
        partial record, writing goes on in a new segment. Resident, as what
        runs on a failure is."""
        f = self._f
        self._f = None
        if f is None:
            return
        if self.uncommitted:
            # The uncommitted tail of the active segment may be gone: forget
            # the messages stored there (a reboot may still find some of them).
            for i in range(self._n):
                if self._state[i] and self._unit[i] == self._wunit and self._off[i] >= self._csize:
                    self._forget(i)
                    self.lost += 1
            self._wpos = self._csize
            self.uncommitted = 0
        try:
            f.close()
        except OSError:
            pass
        if not full:
            return
        try:
            f = self._fopen(self._path(self._wunit), "a+b")
            if f.seek(0, 2) == self._wpos:
                self._f = f
                return
            f.close()
        except OSError:
            pass

    def _mark(self, t, unit, pos, key, pid):
        segs = self._segs
        if t != _T_REL and not self._live[unit] and unit == segs[0] and len(segs) > 1:
            self._reclaim()  # deleting the segment is the record
            return True
        self._head(self._rparts[0], t, 0, key, pid, None)
        try:
            self._append(_REC, self._rparts, t)
        except errors.OutboxFull:
            return t != _T_REL and unit not in self._live  # its segment went meanwhile: as good
        return True

    # -- space ---------------------------------------------------------------------

    def _rotate(self):
        """Opens a new segment file and makes it the active one, deletes the
        segments with nothing live; then, with `compact` segments or more,
        copies the live records of the oldest forward if they take at most a
        quarter of segment_bytes, and deletes it too."""
        segs = self._segs
        if self._f is not None:
            if self._wpos != self._csize:
                self._commit()
            self._f.close()
            self._f = None
        n = self._nseg
        self._nseg = n + 1
        path = self._path(n)
        self._unit_head(_KIND, n, self.tail)
        try:
            f = self._fopen(path, "a+b")
            try:
                f.write(self._unithead)
                self._wrote(_UNIT)
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
        self._wunit = n
        self._wpos = self._csize = _UNIT
        self._add(n)
        self._reclaim()
        if len(segs) >= self.compact and len(segs) > 1 and self._live[segs[0]] * 4 <= self.segment_bytes:
            from .compaction import move
            from ..unload import unload
            try:
                move(self, segs[0])
            finally:
                unload("durable.compaction")
            self._reclaim()

    def _add(self, n):
        # Segment n is the newest of the log.
        self._segs.append(n)
        self._live[n] = 0

    def _drop(self, n):
        # Segment n is no part of the log (its file deleted, or left alone).
        self._segs.remove(n)
        del self._live[n]

    def _reclaim(self, all=False):
        """Deletes segments with nothing pending, oldest first (a younger one
        may hold the acknowledgements of an older one). The active segment
        goes too when all=True and every segment is dead. True if any went."""
        gone = False
        segs = self._segs
        while segs and not self._live[segs[0]]:
            n = segs[0]
            if len(segs) == 1:
                if not all:
                    break  # the newest segment carries tail across reboots
                if self._f is not None:
                    try:
                        self._f.close()
                    except OSError:
                        pass
                    self._f = None
                self._wunit = -1
            if n == self._rseg:
                self._close_reader()
            self.fs.remove(self._path(n))
            self._drop(n)
            gone = True
        return gone

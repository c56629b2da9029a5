# What the durable outboxes (files.FileStore, flash.FlashStore) share: the
# record format and its CRC; the in-RAM index of pending messages and held
# inbound ids, with the bytes of live records in each unit (segment file,
# flash block); what put(), release(), done() and the held ids write. The
# scan that rebuilds the index after a reboot is scan.py, loaded only while
# a store opens; copying a unit's live records forward is compaction.py,
# loaded by a store only while it compacts; find_topic()'s search is
# latest.py, loaded with its first use. A backend only reads (_rd), appends
# a record to the unit it writes (_append) and marks a record released or
# done (_mark).
# Format and recovery rules: docs/outbox.md.
import struct
from array import array
from .. import codec
from .. import errors  # errors.X where raised or caught: the class loads with the first failure


# The format (docs/outbox.md). The modules that use a constant have their
# own copy (const() names with _ are not importable, and a public name costs
# heap); host_tests/test_outbox_consts.py checks that the copies agree.
_VERSION = const(2)  # 2 added _F_EXP; version 1 units are read as they are
_UNIT = const(20)  # segment file / flash block header
_REC = const(16)  # record header
# Record types (a record's first byte)
_T_MSG = const(0x4D)  # 'M' a stored PUBLISH: seq = key, body = the packet
_T_DONE = const(0x44)  # 'D' file log: message seq is done
_T_REL = const(0x52)  # 'R' file log: message seq reached PUBREC
_T_HOLD = const(0x48)  # 'H' inbound QoS 2 id held (pid); seq = hold number
_T_UNHOLD = const(0x58)  # 'X' file log: the hold of pid ended
# Flags of a _T_MSG record: bits 0-1 QoS, and
_F_REL = const(4)  # written already released (a compaction copy)
_F_EXP = const(8)  # the body ends with a 4-byte deadline (wall-clock seconds)
# An index entry's state: its record's flags (with _F_REL once released), and
_S_PEND = const(16)  # pending (0: a free entry)
_S_TH = const(32)  # _th holds its topic's hash (not after a reboot, until compared)
# Error reasons (reasons.py has the words).
_E_NEVER_FITS = const(49)
_E_TOO_LARGE = const(69)
_E_FULL_LIMIT = const(70)
_E_FULL_INDEX = const(71)
_E_NO_REL = const(72)
_WRAP = const(1 << 28)  # bytes_written is counted in two small ints (no big int on 32-bit ports)

_FMT = "<BBHIHBBI"  # type flags blen seq pid released done crc
_UFMT = "<4sBBHIII"  # magic version kind reserved seq base crc
_MAGIC = b"hfOB"


def _aligned(blen):
    # Bytes a record with a body of blen bytes takes in its unit.
    return (_REC + blen + 3) & ~3


try:
    from binascii import crc32
except ImportError:  # a port without it: the table-free one
    from .softcrc import crc32_soft as crc32


class Log:
    """The MemoryStore interface over a log of records (docs/outbox.md).

    Pending messages sit in arrays sorted by key (puts append; a binary
    search finds a key): the unit and offset of the record, its body length,
    pid, deadline, topic hash, state. Up to `slots` messages may be pending,
    however far apart their keys. Held inbound ids: held_ids, a
    heldlog.Logged made by held.table() with the first id held (a store that
    never holds one never loads its code), with the unit and offset of each
    one's H record; an H record's seq is its hold number, so the oldest stays oldest across copies
    and reboots. _live[unit]: bytes of the live records in a unit (a dict
    or an array), 0 when it can go.

    __init__ makes the index and buffers; each store's __init__ makes its
    own state, then runs its opening scan (scan.py, blocks.py), which reads
    the units back through the methods here. Each store has _live, _wunit /
    _wpos (the unit being written, -1 for none, and where its next record
    goes); a subclass provides the store's tick(now) and sync() and
        _commit() makes the records appended so far durable
        _rd(unit, pos, mv) -> bytes read into mv
        _append(n, parts, t) -> offset in _wunit of a record of n bytes (4
            aligned) made of the buffers in parts (None: none); t its type,
            0 for a compaction copy (made durable by _commit()). OutboxFull
            when there is no room.
        _mark(t, unit, pos, key, pid) -> True once the record at pos is
            recorded released (_T_REL) or done (_T_DONE, _T_UNHOLD; its live
            bytes already taken off); False if there was no room.
    """

    # What a store sets only when it happens is a class default, so that a
    # store that publishes holds fewer instance attributes (its table stays
    # a size smaller, as MemoryStore's and Session's):
    held_ids = None  # made by held.table() with the first id held (or by the scan)
    held_evicted = 0
    _dl = None  # deadlines: made with the first one (a sensor's readings seldom have one)
    _th = None  # topic hashes: made with the first find_topic() (latest=True)
    corrupt = 0  # records (or unreadable headers) skipped by the scan
    foreign = 0  # segments / blocks of a newer format, left alone
    unsaved = 0  # acks / held ids kept in RAM only: no room to write them
    _bwh = 0  # bytes_written's high part (see _wrote)

    mark = False  # store.MemoryStore.mark
    # Set by a level-5 session: get() gives a marked record as it is. A
    # level-4 one (a level-5 program replaced, the same outbox) gets the
    # 3.1.1 PUBLISH without the properties. MemoryStore needs no such
    # check: its records do not outlive the program that marked them.
    five = False

    def __init__(self, slots, held, limit, size, units):
        """The index of `slots` pending messages, the buffers put() and the
        markers are built in, the counters. size: the size of a unit
        (segment, block): a record starts below it, so with units of at
        most 64 KiB an offset takes 2 bytes (the scan widens the table for a
        file written with larger segments). units: how many unit numbers
        there are (flash blocks; 0: no bound, segment files): at most
        65536, a unit number takes 2 bytes."""
        self.held_max = held
        if held < 1:
            from ..held import Held
            Held(self)  # raises ValueError with the words
        self.slots = slots
        self._key = array("i", [0] * slots)
        self._unit = array("H" if 0 < units <= 0x10000 else "i", [0] * slots)
        self._off = array("H" if size <= 0x10000 else "i", [0] * slots)
        self._size = array("H", [0] * slots)  # a body is at most 65535 bytes (put() checks)
        self._pid = array("H", [0] * slots)
        self._state = bytearray(slots)
        self._n = 0  # entries in use (some may be done)
        self._count = 0  # pending
        self._ci = 0  # the entry found last
        self.limit = limit  # most bytes of pending records; 0: no limit
        # The record limit (memstore.MemoryStore.most): the largest PUBLISH
        # whose record, with a deadline's 4 bytes, is within 64 KB, the
        # limit and a flash block (units: a FlashStore's).
        m = 65531
        if limit:
            m = min(m, (limit & ~3) - _REC - 4)
        if units:
            m = min(m, ((size - _UNIT) & ~3) - _REC - 4)
        self.most = m
        self.bytes = 0  # bytes of pending records
        self.tail = 0  # key of the next put
        # What put() fills: the record header + PUBLISH fixed header + topic
        # length (by the length's bytes: 0-3), the packet id (4), the deadline (5).
        v = memoryview(bytearray(29))
        self._mbufs = (v[0:20], v[0:21], v[0:22], v[0:23], v[23:25], v[25:29])
        self._mparts = [None] * 5  # what put() appends: header, topic, packet id, payload, deadline
        self._rparts = (bytearray(_REC),)  # a hold or marker record
        v = self.buf = memoryview(bytearray(64))  # scan / copy scratch
        self._unithead = v[0:_UNIT]
        self._buf16 = v[0:_REC]
        self._bw = 0  # bytes_written = _bwh * _WRAP + _bw (_bwh: a class default until the first wrap)

    # -- MemoryStore interface, RAM side ---------------------------------------

    def __len__(self):
        return self._count

    def _at(self, key):
        # First entry with a key >= key.
        keys = self._key
        lo = 0
        hi = self._n
        while lo < hi:
            mid = (lo + hi) >> 1
            if keys[mid] < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _find(self, key):
        """Entry of a pending key, or -1. The entry found last (_ci) is
        tried first: get() reads the one size() found."""
        i = self._ci
        if self._key[i] != key or not self._state[i]:
            i = self._at(key)
            if i >= self._n or self._key[i] != key or not self._state[i]:
                return -1
            self._ci = i
        return i

    def next(self, after):
        i = self._at(after + 1)
        st = self._state
        while i < self._n:
            if st[i]:
                return self._key[i]
            i += 1
        return -1

    def pid(self, key):
        i = self._find(key)
        return self._pid[i] if i >= 0 else 0

    def qos(self, key):
        i = self._find(key)
        if i < 0:
            return 0
        return 3 if self._state[i] & _F_REL else self._state[i] & 3  # 3: released

    def size(self, key):
        # The packet: the record body without its deadline. Found, the
        # entry is left in _ci (get() reads it there).
        i = self._find(key)
        if i < 0:
            return 0
        return self._size[i] - 4 if self._state[i] & _F_EXP else self._size[i]

    def deadline(self, key):
        i = self._find(key)
        return self._dl[i] if i >= 0 and self._dl else 0

    def find_topic(self, topic, after):
        """First pending key > after whose message has this topic, or -1."""
        import holdfast.durable.latest as m  # what latest=True runs: loaded on first use (the import allocates nothing after)
        topic = codec.to_bytes(topic)
        h = crc32(topic) & 0xFFFF
        if not self._th:
            self._th = array("H", [0] * self.slots)
        i = m.entry(self, topic, h, after)
        if i < 0:
            return -1
        self._hashed(i, h)
        return self._key[i]

    def _hashed(self, i, h):
        # Entry i's topic has hash h (find_topic() is in use).
        self._th[i] = h
        self._state[i] |= _S_TH

    def uses(self, pid):
        st = self._state
        p = self._pid
        for i in range(self._n):
            if st[i] and p[i] == pid:
                return True
        return False

    def held_table(self):
        # held.table() asks for it with the first id held: a table that also
        # records each hold and its end in the log.
        from .heldlog import Logged
        return Logged(self)

    def get(self, key, buf, off):
        n = self.size(key)
        if not n:
            return off  # lost after a failed write
        i = self._ci
        self._rd(self._unit[i], self._off[i] + _REC, memoryview(buf)[off:off + n])
        if buf[off] & 8 and not self.five:
            from ..mqtt5.outbox import plain
            return plain(buf, off, off + n)
        return off + n

    @property
    def bytes_written(self):
        return self._bwh * _WRAP + self._bw

    def _wrote(self, n):
        n += self._bw
        if n >= _WRAP:
            n -= _WRAP
            self._bwh += 1
        self._bw = n

    # -- what the calls write ------------------------------------------------------

    def put(self, topic, payload, qos, retain, pid, deadline=0):
        topic = codec.to_bytes(topic)
        payload = codec.to_bytes(payload)
        codec._check_qos(qos)
        codec.check_topic(topic)
        if qos:
            codec._check_pid(pid)
        m = self._mbufs
        h = m[3]
        rl = 2 + len(topic) + len(payload) + (2 if qos else 0)
        j = codec.put_length(h, 17, rl)
        p = j - 16 + rl  # the PUBLISH packet's bytes
        blen = p + (4 if deadline else 0)
        if blen > 65535:
            raise errors.OutboxFull(codec.why(_E_TOO_LARGE, blen))
        if p > self.most:  # the record limit: one number, deadline or not (__init__)
            raise errors.OutboxFull(codec.why(_E_NEVER_FITS, p, self.most))
        n = _aligned(blen)
        # Room in the index, made by closing the gaps done() left when it is full.
        if self.limit and self.bytes + n > self.limit:
            raise errors.OutboxFull(codec.why(_E_FULL_LIMIT, self.bytes, self.limit, n))
        if self._n == self.slots and self._close_gaps() == self.slots:
            raise errors.OutboxFull(codec.why(_E_FULL_INDEX, self.slots, self.slots))
        h[16] = 0x30 | qos << 1 | (1 if retain else 0) | (8 if self.mark else 0)
        h[j] = len(topic) >> 8
        h[j + 1] = len(topic) & 0xFF
        flags = qos | (_F_EXP if deadline else 0)
        struct.pack_into(_FMT, h, 0, _T_MSG, flags, blen, self.tail, pid, 255, 255, 0)
        parts = self._mparts
        parts[0] = m[j - 18]
        parts[1] = topic
        parts[2] = None
        parts[3] = payload
        parts[4] = None
        if qos:
            b = parts[2] = m[4]
            b[0] = pid >> 8
            b[1] = pid & 0xFF
        if deadline:
            parts[4] = m[5]
            struct.pack_into("<I", m[5], 0, deadline)
        c = 0
        for x in parts:
            if x:
                c = crc32(x, c)
        struct.pack_into("<I", h, 12, c)
        try:
            p = self._append(n, parts, _T_MSG)
        finally:
            parts[1] = parts[3] = None  # the caller's objects
        k = self.tail
        self.tail = k + 1
        i = self._n
        self._n = i + 1
        self._index(i, k, self._wunit, p, blen, pid, flags | _S_PEND, deadline)
        if self._th:  # find_topic() is in use: its hashes from now on
            self._hashed(i, crc32(topic) & 0xFFFF)
        return k

    def release(self, key):
        i = self._find(key)
        if i >= 0:
            if not self._mark(_T_REL, self._unit[i], self._off[i], key, self._pid[i]):
                raise errors.OutboxFull(codec.why(_E_NO_REL, self._pid[i]))
            self._released(i)

    def _released(self, i):
        self._state[i] |= _F_REL

    def done(self, key):
        i = self._find(key)
        if i >= 0:
            self._forget(i)
            if not self._mark(_T_DONE, self._unit[i], self._off[i], key, self._pid[i]):
                self.unsaved += 1  # may come back after a reboot: at least once

    def _head(self, h, t, flags, key, pid, body):
        """The header of a record in h (16 bytes) with its CRC; body: its
        body, or None."""
        struct.pack_into(_FMT, h, 0, t, flags, len(body) if body else 0, key, pid, 255, 255, 0)
        c = crc32(h)
        if body:
            c = crc32(body, c)
        struct.pack_into("<I", h, 12, c)

    def _unit_head(self, kind, n, tail):
        """The header of unit number n in self._unithead (self.buf[0:20]);
        tail: the key of the next put."""
        struct.pack_into(_UFMT, self.buf, 0, _MAGIC, _VERSION, kind, 0, n, tail, 0)
        struct.pack_into("<I", self.buf, 16, crc32(self._buf16))

    # -- the index -----------------------------------------------------------------

    def _index(self, i, key, unit, pos, size, pid, state, deadline):
        """Makes entry i (in key order: a put's is the last, the scan makes
        room for one that comes before newer keys) pending message key."""
        self._key[i] = key
        self._unit[i] = unit
        self._off[i] = pos
        self._size[i] = size
        self._pid[i] = pid
        if deadline and not self._dl:
            self._dl = array("I", [0] * self.slots)
        if self._dl:
            self._dl[i] = deadline
        self._state[i] = state
        self._tally(i, 1)

    def _tally(self, i, sign):
        # Entry i's record comes (sign 1) or goes (-1): counts, bytes, its unit's live bytes.
        n = sign * _aligned(self._size[i])
        self._count += sign
        self.bytes += n
        self._use(self._unit[i], n)

    def _use(self, unit, n):
        # n bytes more (or fewer) of the records in unit are live.
        self._live[unit] += n

    def _forget(self, i):
        self._tally(i, -1)
        self._state[i] = 0
        while self._n and not self._state[self._n - 1]:
            self._n -= 1

    def _close_gaps(self):
        """Closes the gaps done() left in the index; returns the entries left."""
        st = self._state
        j = 0
        for i in range(self._n):
            if st[i]:
                if i != j:
                    self._copy_entry(i, j)
                j += 1
        for i in range(j, self._n):
            st[i] = 0
        self._n = j
        return j

    def _room(self, i):
        """Entry i made free for a key older than those from i on (the scan
        finds a compaction's copy after newer keys): the later ones move up."""
        for j in range(self._n, i, -1):
            self._copy_entry(j - 1, j)
        self._n += 1

    def _grow(self, k):
        """k entries more in the index, and 4-byte units and offsets: the
        scan found more messages pending than slots (the store was written
        with more), or a segment larger than 64 KiB."""
        self.slots += k
        self._unit = array("i", self._unit)  # 4-byte entries, as the extension below
        self._off = array("i", self._off)
        for a in (self._key, self._unit, self._off):
            a.extend(array("i", [0] * k))
        for a in (self._size, self._pid, self._th):
            if a:
                a.extend(array("H", [0] * k))
        if self._dl:
            self._dl.extend(array("I", [0] * k))
        self._state.extend(bytearray(k))

    def _rehome(self, i, unit, pos):
        # Entry i's record has a durable copy at pos in unit (a compaction).
        self._tally(i, -1)
        self._unit[i] = unit
        self._off[i] = pos
        self._tally(i, 1)

    def _copy_entry(self, i, k):
        self._key[k] = self._key[i]
        self._unit[k] = self._unit[i]
        self._off[k] = self._off[i]
        self._size[k] = self._size[i]
        self._pid[k] = self._pid[i]
        if self._dl:
            self._dl[k] = self._dl[i]
        if self._th:
            self._th[k] = self._th[i]
        self._state[k] = self._state[i]

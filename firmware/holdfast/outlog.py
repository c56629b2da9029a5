# What the persistent outboxes (fileoutbox.FileStore, flashoutbox.FlashStore)
# share: the record format and its CRC; the in-RAM index of pending messages
# and held inbound ids, with the bytes of live records in each unit (segment
# file, flash block); what put(), release(), done() and the held ids write.
# The scan that rebuilds all of it after a reboot is outscan.py, loaded only
# while a store opens; copying a unit's live records forward is outmove.py,
# loaded only while a store compacts. A backend only reads (_rd), appends a record to the unit it
# writes (_append) and marks a record released or done (_mark).
# Format and recovery rules: docs/outbox.md.
import struct
import sys
from array import array
from . import codec
from . import errors  # errors.X where raised or caught: the class loads with the first failure


def crc32_soft(data, crc=0):
    """CRC-32 (the zlib one) without a table, for runtimes lacking binascii.crc32."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


try:
    from binascii import crc32
except ImportError:
    crc32 = crc32_soft


def unload(name):
    """Unloads module name (outscan, outmove: what a store runs only at
    times): the last reference to its code goes with the caller's."""
    sys.modules.pop(name, None)
    pkg, _, name = name.rpartition(".")
    try:
        delattr(sys.modules[pkg], name)
    except (KeyError, AttributeError):
        pass  # imported on its own, not as the package's attribute


VERSION = const(2)  # 2 added _F_EXP; version 1 units are read as they are
UNIT = const(20)  # segment file / flash block header
REC = const(16)  # record header
# Record types (a record's first byte)
T_MSG = const(0x4D)  # 'M' a stored PUBLISH: seq = key, body = the packet
T_DONE = const(0x44)  # 'D' file log: message seq is done
T_REL = const(0x52)  # 'R' file log: message seq reached PUBREC
T_HOLD = const(0x48)  # 'H' inbound QoS 2 id held (pid); seq = hold number
T_UNHOLD = const(0x58)  # 'X' file log: the hold of pid ended
# Flags of a T_MSG record: bits 0-1 QoS, and
_F_REL = const(4)  # written already released (a compaction copy)
_F_EXP = const(8)  # the body ends with a 4-byte deadline (wall-clock seconds)
# An index entry's state: its record's flags (with _F_REL once released), and
_S_PEND = const(16)  # pending (0: a free entry)
_S_TH = const(32)  # _th holds its topic's hash (not after a reboot, until compared)
_WRAP = const(1 << 28)  # bytes_written is counted in two small ints (no big int on 32-bit ports)

_FMT = "<BBHIHBBI"  # type flags blen seq pid released done crc
_UFMT = "<4sBBHIII"  # magic version kind reserved seq base crc
_MAGIC = b"hfOB"


def _aligned(blen):
    # Bytes a record with a body of blen bytes takes in its unit.
    return (REC + blen + 3) & ~3


class Log:
    """The MemoryStore interface over a log of records (docs/outbox.md).

    Pending messages sit in arrays sorted by key (puts append; a binary
    search finds a key): the unit and offset of the record, its body length,
    pid, deadline, topic hash, state. Up to `slots` messages may be pending,
    however far apart their keys. Held inbound ids: held_ids, an
    outheld.Logged made by held.table() with the first id held (a store that
    never holds one never loads its code), with the unit and offset of each one's H record; an H
    record's seq is its hold number, so the oldest stays oldest across copies
    and reboots. _live[unit]: bytes of the live records in a unit (the
    subclass makes it, a dict or an array), 0 when it can go.

    A subclass provides _live, _wunit / _wpos (the unit being written, -1
    for none, and where its next record goes), the store's tick(now) and
    sync() and
        _commit() makes the records appended so far durable
        _rd(unit, pos, mv) -> bytes read into mv
        _append(n, parts, t) -> offset in _wunit of a record of n bytes (4
            aligned) made of the buffers in parts (None: none); t its type,
            0 for a compaction copy (made durable by _commit()). OutboxFull
            when there is no room.
        _mark(t, unit, pos, seq, pid) -> True once the record at pos is
            recorded released (T_REL) or done (T_DONE, T_UNHOLD; its live
            bytes already taken off); False if there was no room.
    """

    mark = False  # store.MemoryStore.mark
    # Set by a level-5 session: get() gives a marked record as it is. A
    # level-4 one (a level-5 program replaced, the same outbox) gets the
    # 3.1.1 PUBLISH without the properties. MemoryStore needs no such
    # check: its records do not outlive the program that marked them.
    five = False

    def __init__(self, slots, held, limit):
        self.held_max = held
        if held < 1:
            from .held import Held
            Held(self)  # raises ValueError with the words
        self.held_evicted = 0
        self.held_ids = None  # made by held.table() with the first id held (or by the scan)
        self.slots = slots
        self._key = array("i", [0] * slots)
        self._unit = array("i", [0] * slots)
        self._off = array("i", [0] * slots)
        self._size = array("H", [0] * slots)  # a body is at most 65535 bytes (put() checks)
        self._pid = array("H", [0] * slots)
        self._dl = None  # deadlines: made with the first one (a sensor's readings seldom have one)
        self._th = None  # topic hashes: made by the first find_topic() (drop_oldest, retained)
        self._st = bytearray(slots)
        self._n = 0  # entries in use (some may be done)
        self._count = 0  # pending
        self._ck = -1  # last key found, and where
        self._ci = 0
        self.limit = limit  # most bytes of pending records; 0: no limit
        self.bytes = 0  # bytes of pending records
        self.tail = 0  # key of the next put
        v = memoryview(bytearray(23))  # record header + PUBLISH fixed header + topic length
        self._mheads = (v[0:20], v[0:21], v[0:22], v[0:23])  # by the length's bytes
        self._pidb = bytearray(2)
        self._dlb = bytearray(4)  # a deadline
        self._mparts = [None] * 5  # what put() appends: heads, topic, _pidb, payload, _dlb
        self._rhead = bytearray(REC)  # a hold or marker record
        self._rparts = (self._rhead,)
        self.buf = bytearray(64)  # scan / copy scratch
        v = self._bufv = memoryview(self.buf)
        self._unithead = v[0:UNIT]
        self._buf16 = v[0:REC]
        self.corrupt = 0  # records (or unreadable headers) skipped by the scan
        self.foreign = 0  # segments / blocks of a newer format, left alone
        self.unsaved = 0  # acks / held ids kept in RAM only: no room to write them
        self._bw = 0  # bytes_written = _bwh * _WRAP + _bw
        self._bwh = 0

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
        """Entry of a pending key, or -1."""
        if key == self._ck and self._st[self._ci]:
            return self._ci
        i = self._at(key)
        if i < self._n and self._key[i] == key and self._st[i]:
            self._ck = key
            self._ci = i
            return i
        return -1

    def next(self, after):
        i = self._at(after + 1)
        st = self._st
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
        return 3 if self._st[i] & _F_REL else self._st[i] & 3  # 3: released

    def size(self, key):
        # The packet: the record body without its deadline. Found, the
        # entry is left in _ci (get() reads it there).
        i = self._find(key)
        if i < 0:
            return 0
        return self._size[i] - 4 if self._st[i] & _F_EXP else self._size[i]

    def deadline(self, key):
        i = self._find(key)
        return self._dl[i] if i >= 0 and self._dl else 0

    def find_topic(self, topic, after):
        """First pending key > after whose message has this topic, or -1."""
        topic = codec.to_bytes(topic)
        h = crc32(topic) & 0xFFFF
        if not self._th:
            self._th = array("H", [0] * self.slots)
        b = self.buf
        v = self._bufv
        n = len(topic)
        i = self._at(after + 1)
        st = self._st
        while i < self._n:
            s = st[i]
            if s and not (s & _S_TH and self._th[i] != h):
                # The topic out of the stored PUBLISH: fixed header,
                # remaining length (1-4 bytes), topic length, topic.
                u = self._unit[i]
                p = self._off[i] + REC
                self._rd(u, p, v[0:7])
                j = 1
                while b[j] & 0x80:
                    j += 1
                same = (b[j + 1] << 8 | b[j + 2]) == n
                p += j + 3
                k = 0
                while same and k < n:
                    m = min(len(b), n - k)
                    self._rd(u, p + k, v[0:m])
                    for x in range(m):
                        if b[x] != topic[k + x]:
                            same = False
                            break
                    k += m
                if same:
                    self._th[i] = h
                    st[i] = s | _S_TH
                    return self._key[i]
            i += 1
        return -1

    def uses(self, pid):
        st = self._st
        p = self._pid
        for i in range(self._n):
            if st[i] and p[i] == pid:
                return True
        return False

    def held_table(self):
        # held.table() asks for it with the first id held: a table that also
        # records each hold and its end in the log.
        from .outheld import Logged
        return Logged(self)

    def get(self, key, buf, off):
        n = self.size(key)
        if not n:
            return off  # lost after a failed write
        i = self._ci
        self._rd(self._unit[i], self._off[i] + REC, memoryview(buf)[off:off + n])
        if buf[off] & 8 and not self.five:
            from .v5more import plain
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
        h = self._mheads[3]
        rl = 2 + len(topic) + len(payload) + (2 if qos else 0)
        j = codec.put_length(h, 17, rl)
        blen = j - 16 + rl + (4 if deadline else 0)
        if blen > 65535:
            raise errors.OutboxFull("a %d-byte message is too large for the outbox (most 65535)" % blen)
        n = _aligned(blen)
        # Room in the index, made by closing the gaps done() left when it is full.
        if self.limit and self.bytes + n > self.limit:
            raise errors.OutboxFull("outbox full: %d bytes pending, limit %d, the next record needs %d"
                                    % (self.bytes, self.limit, n))
        if self._n == self.slots and self._close_gaps() == self.slots:
            raise errors.OutboxFull("outbox full: %d messages pending (slots=%d)" % (self.slots, self.slots))
        h[16] = 0x30 | qos << 1 | (1 if retain else 0) | (8 if self.mark else 0)
        h[j] = len(topic) >> 8
        h[j + 1] = len(topic) & 0xFF
        flags = qos | (_F_EXP if deadline else 0)
        struct.pack_into(_FMT, h, 0, T_MSG, flags, blen, self.tail, pid, 255, 255, 0)
        parts = self._mparts
        parts[0] = self._mheads[j - 18]
        parts[1] = topic
        parts[2] = None
        parts[3] = payload
        parts[4] = None
        if qos:
            parts[2] = self._pidb
            self._pidb[0] = pid >> 8
            self._pidb[1] = pid & 0xFF
        if deadline:
            parts[4] = self._dlb
            struct.pack_into("<I", self._dlb, 0, deadline)
        c = 0
        for x in parts:
            if x:
                c = crc32(x, c)
        struct.pack_into("<I", h, 12, c)
        try:
            p = self._append(n, parts, T_MSG)
        finally:
            parts[1] = parts[3] = None  # the caller's objects
        k = self.tail
        self.tail = k + 1
        i = self._n
        self._n = i + 1
        self._index(i, k, self._wunit, p, blen, pid, flags | _S_PEND, deadline)
        if self._th:  # find_topic() is in use: its hashes from now on
            self._th[i] = crc32(topic) & 0xFFFF
            self._st[i] |= _S_TH
        return k

    def release(self, key):
        i = self._find(key)
        if i >= 0:
            if not self._mark(T_REL, self._unit[i], self._off[i], key, self._pid[i]):
                raise errors.OutboxFull("outbox full: no room to record that message %d reached PUBREC"
                                        % self._pid[i])
            self._st[i] |= _F_REL

    def done(self, key):
        i = self._find(key)
        if i >= 0:
            self._forget(i)
            if not self._mark(T_DONE, self._unit[i], self._off[i], key, self._pid[i]):
                self.unsaved += 1  # may come back after a reboot: at least once

    def _head(self, b, t, flags, seq, pid, body):
        """The header of a record in b (16 bytes) with its CRC; body: its
        body, or None."""
        struct.pack_into(_FMT, b, 0, t, flags, len(body) if body else 0, seq, pid, 255, 255, 0)
        c = crc32(b)
        if body:
            c = crc32(body, c)
        struct.pack_into("<I", b, 12, c)

    def _unit_head(self, kind, seq, base):
        """A segment / block header in self._unithead (self.buf[0:20])."""
        struct.pack_into(_UFMT, self.buf, 0, _MAGIC, VERSION, kind, 0, seq, base, 0)
        struct.pack_into("<I", self.buf, 16, crc32(self._buf16))

    # -- the index -----------------------------------------------------------------

    def _index(self, i, key, unit, pos, blen, pid, state, deadline):
        """Makes entry i (in key order: a put's is the last, the scan makes
        room for one that comes before newer keys) pending message key."""
        self._key[i] = key
        self._unit[i] = unit
        self._off[i] = pos
        self._size[i] = blen
        self._pid[i] = pid
        if deadline and not self._dl:
            self._dl = array("I", [0] * self.slots)
        if self._dl:
            self._dl[i] = deadline
        self._st[i] = state
        self._tally(i, 1)
        self._ck = -1

    def _tally(self, i, sign):
        # Entry i's record comes (sign 1) or goes (-1): counts, bytes, its unit's live bytes.
        n = sign * _aligned(self._size[i])
        self._count += sign
        self.bytes += n
        self._live[self._unit[i]] += n

    def _forget(self, i):
        self._tally(i, -1)
        self._st[i] = 0
        while self._n and not self._st[self._n - 1]:
            self._n -= 1

    def _close_gaps(self):
        """Closes the gaps done() left in the index; returns the entries left."""
        st = self._st
        j = 0
        for i in range(self._n):
            if st[i]:
                if i != j:
                    self._copy_entry(i, j)
                j += 1
        for i in range(j, self._n):
            st[i] = 0
        self._n = j
        self._ck = -1
        return j

    def _copy_entry(self, i, j):
        self._key[j] = self._key[i]
        self._unit[j] = self._unit[i]
        self._off[j] = self._off[i]
        self._size[j] = self._size[i]
        self._pid[j] = self._pid[i]
        if self._dl:
            self._dl[j] = self._dl[i]
        if self._th:
            self._th[j] = self._th[i]
        self._st[j] = self._st[i]

# What the persistent outboxes (fileoutbox.FileStore, flashoutbox.FlashStore)
# share: the record format, the CRC, the scan that rebuilds state after a
# reboot, and the in-RAM index of pending messages and held inbound ids.
# Format and recovery rules: docs/outbox.md.
import struct
from array import array
from .compat import const
from .errors import OutboxFull
from .store import Held


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


def to_bytes(s):
    if isinstance(s, str):
        return s.encode()
    return bytes(s) if isinstance(s, memoryview) else s


VERSION = const(2)  # 2 added F_EXP; version 1 units are read as they are
MAGIC = b"hfOB"
UNIT = const(20)  # segment file / flash block header
REC = const(16)  # record header
# Record types
M = const(0x4D)  # a stored PUBLISH: seq = key, body = the packet
D = const(0x44)  # file log: message seq is done
R = const(0x52)  # file log: message seq reached PUBREC
H = const(0x48)  # inbound QoS 2 id held (pid)
X = const(0x58)  # file log: held id dropped (pid)
F_REL = const(4)  # M flags bit: written already released (a compacted copy)
F_EXP = const(8)  # M flags bit: the body ends with a 4-byte deadline (wall-clock seconds)
# Index state byte: bit 0 pending, bit 1 released, bits 2-3 QoS
S_PEND = const(1)
S_REL = const(2)
S_EXP = const(16)  # has a deadline
S_TH = const(32)  # _th holds its topic's hash (not after a reboot, until compared)
_WRAP = const(1 << 28)  # bytes_written is counted in two small ints (no big int on 32-bit ports)

_FMT = "<BBHIHBBI"  # type flags blen seq pid rel done crc
_UFMT = "<4sBBHIII"  # magic version kind reserved seq base crc
FF = (b"", b"\xff", b"\xff\xff", b"\xff\xff\xff")


def unit_check(buf, kind):
    """(version, seq, base) of a header in buf[0:20], or None if it is not one."""
    if buf[0:4] != MAGIC or buf[5] != kind:
        return None
    if crc32(memoryview(buf)[0:16]) != struct.unpack_from("<I", buf, 16)[0]:
        return None
    _, ver, _, _, seq, base, _ = struct.unpack_from(_UFMT, buf, 0)
    return ver, seq, base


def u32(b, i):
    """The little-endian 32-bit number at b[i] (no tuple, as unpack_from makes)."""
    return b[i] | b[i + 1] << 8 | b[i + 2] << 16 | b[i + 3] << 24


def vote(b):
    """A state byte is set when most of its bits are programmed (0): one
    flipped bit cannot set or clear it."""
    n = 0
    while b:
        n += b & 1
        b >>= 1
    return n < 4


class Log(Held):
    """The part of the MemoryStore interface that lives in RAM, for the
    persistent stores; subclasses write the log. Pending messages sit in
    arrays sorted by key (puts append; a binary search finds a key): unit
    (segment number or block), offset of the record, packet size, pid, state.
    Up to `slots` messages may be pending, however far apart their keys.
    Held inbound ids: the table of Held, plus where each one's H record is
    (_hat: the subclass's position, -1 if in RAM only); an H record's seq is
    its hold number, so the oldest stays oldest across copies and reboots."""

    def __init__(self, slots, held, limit):
        Held.__init__(self, held)
        self._hat = array("i", [0] * held)
        self._alloc(slots)
        self.limit = limit  # most bytes of pending records; 0: no limit
        self.bytes = 0  # bytes of pending records
        self.tail = 0  # key of the next put
        self.hb = bytearray(24)  # record header + PUBLISH fixed header + topic length
        self._hv = [memoryview(self.hb)[0:n] for n in (20, 21, 22, 23)]
        self.mb = bytearray(REC)  # marker / hold records
        self.pb = bytearray(2)  # packet id
        self.db = bytearray(4)  # deadline
        self._v = self._t = self._p = None  # what put() writes
        self._d = 0  # deadline of what put() writes
        self.buf = bytearray(64)  # scan / copy scratch
        self.bv = memoryview(self.buf)
        self._uv = self.bv[0:UNIT]  # a segment / block header in buf
        self._v16 = self.bv[0:16]
        self._vb = self.bv[REC:]
        self.corrupt = 0  # records (or unreadable headers) skipped by the scan
        self.foreign = 0  # segments / blocks of a newer format, left alone
        self.unsaved = 0  # acks / held ids kept in RAM only: no room to write them
        self._bw = 0  # bytes_written = _bwh * _WRAP + _bw
        self._bwh = 0

    def _alloc(self, n):
        self.slots = n
        self._key = array("i", [0] * n)
        self._unit = array("i", [0] * n)
        self._off = array("i", [0] * n)
        self._size = array("i", [0] * n)
        self._pid = array("H", [0] * n)
        self._dl = array("I", [0] * n)
        self._th = array("H", [0] * n)
        self._st = bytearray(n)
        self._n = 0  # entries in use (some may be done)
        self._count = 0  # pending
        self._ck = -1  # last key found, and where
        self._ci = 0

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

    def last(self):
        return self.tail - 1

    def pid(self, key):
        i = self._find(key)
        return self._pid[i] if i >= 0 else 0

    def qos(self, key):
        i = self._find(key)
        return (self._st[i] >> 2) & 3 if i >= 0 else 0

    def released(self, key):
        i = self._find(key)
        return i >= 0 and bool(self._st[i] & S_REL)

    def size(self, key):
        i = self._find(key)
        return self._psize(i) if i >= 0 else 0

    def _psize(self, i):
        # The packet: the record body without its deadline.
        return self._size[i] - 4 if self._st[i] & S_EXP else self._size[i]

    def deadline(self, key):
        i = self._find(key)
        return self._dl[i] if i >= 0 else 0

    def find_topic(self, topic, after):
        """First pending key > after whose message has this topic, or -1."""
        topic = to_bytes(topic)
        h = crc32(topic) & 0xFFFF
        i = self._at(after + 1)
        st = self._st
        while i < self._n:
            s = st[i]
            if s and not (s & S_TH and self._th[i] != h) and self._topic_is(i, topic):
                self._th[i] = h
                st[i] = s | S_TH
                return self._key[i]
            i += 1
        return -1

    def _topic_is(self, i, topic):
        # Reads the topic out of the stored PUBLISH: fixed header, remaining
        # length (1-4 bytes), topic length, topic.
        b = self.buf
        v = self.bv
        u = self._unit[i]
        p = self._off[i] + REC
        self._rd(u, p, v[0:7])
        j = 1
        while b[j] & 0x80:
            j += 1
        n = len(topic)
        if (b[j + 1] << 8 | b[j + 2]) != n:
            return False
        p += j + 3
        k = 0
        while k < n:
            m = min(len(b), n - k)
            self._rd(u, p + k, v[0:m])
            for x in range(m):
                if b[x] != topic[k + x]:
                    return False
            k += m
        return True

    def uses(self, pid):
        st = self._st
        p = self._pid
        for i in range(self._n):
            if st[i] and p[i] == pid:
                return True
        return False

    def tick(self, now):
        """Time passes (ms): a store that groups its commits may commit now."""

    def sync(self):
        """Makes what was written durable; True if it is."""
        return True

    @property
    def bytes_written(self):
        return self._bwh * _WRAP + self._bw

    # -- helpers for the subclasses --------------------------------------------

    def _wrote(self, n):
        n += self._bw
        if n >= _WRAP:
            n -= _WRAP
            self._bwh += 1
        self._bw = n

    def _room(self, n):
        """Checks there is room to index one more message of n record bytes."""
        if self.limit and self.bytes + n > self.limit:
            self._t = self._p = None
            raise OutboxFull("outbox full: %d bytes pending, limit %d, the next record needs %d"
                             % (self.bytes, self.limit, n))
        if self._n == self.slots and self._squeeze() == self.slots:
            self._t = self._p = None
            raise OutboxFull("outbox full: %d messages pending (slots=%d)" % (self.slots, self.slots))

    def _squeeze(self):
        """Closes the gaps done() left in the index; returns the entries left."""
        st = self._st
        j = 0
        for i in range(self._n):
            if st[i]:
                if i != j:
                    self._copy_slot(i, j)
                j += 1
        for i in range(j, self._n):
            st[i] = 0
        self._n = j
        self._ck = -1
        return j

    def _copy_slot(self, i, j):
        self._key[j] = self._key[i]
        self._unit[j] = self._unit[i]
        self._off[j] = self._off[i]
        self._size[j] = self._size[i]
        self._pid[j] = self._pid[i]
        self._dl[j] = self._dl[i]
        self._th[j] = self._th[i]
        self._st[j] = self._st[i]

    def _message(self, topic, payload, qos, retain, pid, deadline):
        """Header of an M record for the next key in self.hb; returns the
        aligned record length. What to write: self._v (the part of hb),
        self._t (topic), self.pb if QoS > 0, self._p (payload), self.db if
        self._d (a deadline)."""
        topic = self._t = to_bytes(topic)
        payload = self._p = to_bytes(payload)
        if not topic or b"+" in topic or b"#" in topic:
            raise ValueError("topic %r is empty or has a wildcard" % topic)
        if not 0 <= qos <= 2:
            raise ValueError("QoS %d is not 0, 1 or 2" % qos)
        if qos and not 0 < pid < 65536:
            raise ValueError("message id %d is outside 1..65535" % pid)
        hb = self.hb
        tlen = len(topic)
        rl = 2 + tlen + len(payload) + (2 if qos else 0)
        hb[16] = 0x30 | qos << 1 | (1 if retain else 0)
        i = 17
        x = rl
        while True:
            d = x & 0x7F
            x >>= 7
            if x:
                hb[i] = d | 0x80
                i += 1
            else:
                hb[i] = d
                break
        blen = i - 16 + 1 + rl + (4 if deadline else 0)
        if blen > 65535 or i > 20:
            raise OutboxFull("a %d-byte message is too large for the outbox (most 65535)" % blen)
        hb[i + 1] = tlen >> 8
        hb[i + 2] = tlen & 0xFF
        struct.pack_into(_FMT, hb, 0, M, qos | (F_EXP if deadline else 0), blen, self.tail, pid, 255, 255, 0)
        v = self._v = self._hv[i - 17]
        c = crc32(v)
        c = crc32(topic, c)
        if qos:
            pb = self.pb
            pb[0] = pid >> 8
            pb[1] = pid & 0xFF
            c = crc32(pb, c)
        c = crc32(payload, c)
        self._d = deadline
        if deadline:
            struct.pack_into("<I", self.db, 0, deadline)
            c = crc32(self.db, c)
        struct.pack_into("<I", hb, 12, c)
        return (REC + blen + 3) & ~3

    def _marker(self, t, seq, pid, flags=0, body=None):
        """A record in self.mb: no body, or the given one (written after it)."""
        mb = self.mb
        struct.pack_into(_FMT, mb, 0, t, flags, len(body) if body else 0, seq, pid, 255, 255, 0)
        c = crc32(mb)
        if body:
            c = crc32(body, c)
        struct.pack_into("<I", mb, 12, c)

    def _add(self, unit, off, pid, qos):
        """Index the message put() just stored under key self.tail (room checked)."""
        i = self._n
        blen = self.hb[2] | self.hb[3] << 8
        self._key[i] = self.tail
        self._unit[i] = unit
        self._off[i] = off
        self._size[i] = blen
        self._pid[i] = pid
        self._dl[i] = self._d
        self._th[i] = crc32(self._t) & 0xFFFF
        self._st[i] = S_PEND | qos << 2 | S_TH | (S_EXP if self._d else 0)
        self._n = i + 1
        self._count += 1
        self.bytes += (REC + blen + 3) & ~3
        self.tail += 1

    def _mflags(self, i):
        """Flags of a copy of pending message i's M record."""
        st = self._st[i]
        return (st >> 2) & 3 | (F_REL if st & S_REL else 0) | (F_EXP if st & S_EXP else 0)

    def _forget(self, i):
        self._st[i] = 0
        self._count -= 1
        self.bytes -= (REC + self._size[i] + 3) & ~3
        while self._n and not self._st[self._n - 1]:
            self._n -= 1

    def _unit_head(self, kind, seq, base):
        """A segment / block header in self._uv (self.buf[0:20])."""
        struct.pack_into(_UFMT, self.buf, 0, MAGIC, VERSION, kind, 0, seq, base, 0)
        struct.pack_into("<I", self.buf, 16, crc32(self._v16))

    # -- recovery ----------------------------------------------------------------

    def _rec_at(self, unit, p, end, blank):
        """Checks the record at p: its aligned length, 0 for an erased header
        (only when blank, i.e. on flash), -1 if it is not a whole valid record.
        The header is left in self.buf[0:16] with its state bytes in
        self._rel / self._done."""
        b = self.buf
        v = self.bv
        h = self._v16  # the record header: REC bytes
        if self._rd(unit, p, h) < REC:
            return -1
        t = b[0]
        if t == 255 and blank:
            for i in range(1, REC):
                if b[i] != 255:
                    return -1
            return 0
        blen = b[2] | b[3] << 8
        if t == M:
            if blen < 4:
                return -1
        elif t == D or t == R or t == H or t == X:
            if blen:
                return -1
        else:
            return -1
        if p + REC + blen > end:
            return -1
        self._rel = b[10]
        self._done = b[11]
        crc = u32(b, 12)
        b[10] = b[11] = 255
        b[12] = b[13] = b[14] = b[15] = 0
        c = crc32(h)
        q = p + REC
        left = blen
        body = self._vb  # the rest of buf: no slice made per full chunk
        room = len(body)
        while left:
            n = left if left < room else room
            w = body if n == room else v[REC:REC + n]
            if self._rd(unit, q, w) < n:
                return -1
            c = crc32(w, c)
            q += n
            left -= n
        if c != crc:
            return -1
        return (REC + blen + 3) & ~3

    def _nonff(self, unit, p, end):
        """Offset of the first byte in [p, end) that is not 0xFF, or end."""
        v = self.bv
        b = self.buf
        while p < end:
            n = min(len(b), end - p)
            self._rd(unit, p, v if n == len(b) else v[0:n])
            for i in range(n):
                if b[i] != 255:
                    return p + i
            p += n
        return end

    def _scan(self, unit, start, end, blank, on):
        """Calls on(unit, pos, type, flags, blen, seq, pid, rel, done) for each
        valid record in [start, end), in order. A torn or damaged record is
        skipped and counted once per damaged stretch: the scan resynchronises
        on the next valid record at a 4-byte boundary. blank: the medium is
        flash, where an erased (0xFF) stretch running to end means no more
        data. Returns, on flash, where the next record may be programmed: end
        if the unit holds any damage, because a torn record's header may claim
        bytes that are still erased, and a record programmed there could
        complete it; on files, the end of the last valid record."""
        p = start
        good = start
        bad = False
        damaged = False
        while p + REC <= end:
            n = self._rec_at(unit, p, end, blank)
            if n > 0:
                b = self.buf
                on(unit, p, b[0], b[1], b[2] | b[3] << 8, u32(b, 4),
                   b[8] | b[9] << 8, vote(self._rel), vote(self._done))
                p += n
                good = p
                bad = False
                continue
            if n == 0:
                q = self._nonff(unit, p, end)
                if q >= end:
                    return end if damaged else p
                p = q & ~3
            else:
                p += 4
            if not bad:
                self.corrupt += 1
                bad = damaged = True
        if p < end and not bad and (not blank or self._nonff(unit, p, end) < end):
            self.corrupt += 1  # a torn tail too short for a record header
            damaged = True
        if not blank:
            return good
        return end if damaged or p > end else p

    def _scanned(self, key, unit, pos, flags, blen, pid, rel):
        """The scan found the M record of pending message key: enters it in
        the index, in key order (a compacted copy comes after newer keys in
        the log), replacing an earlier copy. Nothing else is kept per
        message, so booting takes no more heap with a long backlog."""
        st = S_PEND | (flags & 3) << 2 | (S_REL if rel or flags & F_REL else 0)
        d = 0
        if flags & F_EXP:
            st |= S_EXP
            self._rd(unit, pos + REC + blen - 4, self.db)
            d = u32(self.db, 0)
        i = self._at(key)
        if i < self._n and self._key[i] == key:
            if self._st[i]:
                self._count -= 1
                self.bytes -= (REC + self._size[i] + 3) & ~3
        else:
            if self._n == self.slots and self._squeeze() == self.slots:
                self._grow(self.slots + 8)
            i = self._at(key)
            for j in range(self._n, i, -1):
                self._copy_slot(j - 1, j)
            self._n += 1
        self._key[i] = key
        self._unit[i] = unit
        self._off[i] = pos
        self._size[i] = blen
        self._pid[i] = pid
        self._dl[i] = d
        self._th[i] = 0
        self._st[i] = st
        self._count += 1
        self.bytes += (REC + blen + 3) & ~3
        self._ck = -1

    def _grow(self, n):
        # More messages pending than slots: the store was written with more.
        old = (self._key, self._unit, self._off, self._size, self._pid, self._dl, self._th, self._st)
        k = self._n
        c = self._count
        self._alloc(n)
        new = (self._key, self._unit, self._off, self._size, self._pid, self._dl, self._th, self._st)
        for a in range(len(old)):
            for i in range(k):
                new[a][i] = old[a][i]
        self._n = k
        self._count = c

    def _held(self, holds, last):
        """After the scan: the held inbound ids it found, [[hold number, pid,
        position], ...] in log order, and the last key. A table smaller than
        what the log holds (reopened with a smaller held) keeps the newest,
        and counts the others in held_evicted."""
        self.tail = last + 1
        while len(holds) > len(self._hpid):
            j = 0
            for k in range(1, len(holds)):
                if holds[k][0] < holds[j][0]:
                    j = k
            holds.pop(j)
            self.held_evicted += 1
        for i in range(len(holds)):
            n, pid, at = holds[i]
            self._hpid[i] = pid
            self._hord[i] = n
            self._hat[i] = at
            if n >= self._hnext:
                self._hnext = n + 1

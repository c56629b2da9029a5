# Reading a persistent outbox back after a reboot: the scan of a unit's
# records and what the log rebuilds from them (docs/outbox.md, recovery).
# A store needs this once, when it opens: FileStore and FlashStore load it
# then and unload it again (outlog.unload()), so its code does not stay on
# the heap.
import struct
from array import array
from .outlog import crc32, _aligned, VERSION, UNIT, REC, T_MSG, T_DONE, T_REL, T_HOLD, T_UNHOLD, _UFMT, _MAGIC

# outlog's and flashoutbox's private constants (const() names with _ are not importable):
_F_REL = const(4)
_F_EXP = const(8)
_S_PEND = const(16)
_USED = const(2)
_FOREIGN = const(3)

_holds = None  # during the scan: [hold number, pid, unit, pos] of each held id


def u32(b, i):
    """The little-endian 32-bit number at b[i] (no tuple, as unpack_from makes)."""
    return b[i] | b[i + 1] << 8 | b[i + 2] << 16 | b[i + 3] << 24


def unit_check(buf, kind):
    """(version, seq, base) of a header in buf[0:20], or None if it is not one."""
    if buf[0:4] != _MAGIC or buf[5] != kind:
        return None
    if crc32(memoryview(buf)[0:16]) != u32(buf, 16):
        return None
    _, ver, _, _, seq, base, _ = struct.unpack_from(_UFMT, buf, 0)
    return ver, seq, base


def _vote(b):
    # A state byte is set when most of its bits are programmed (0): one
    # flipped bit cannot set or clear it.
    n = 0
    while b:
        n += b & 1
        b >>= 1
    return n < 4


def _rec_at(log, unit, p, end, blank, body):
    # The record at p: its aligned length, 0 for an erased header (only
    # when blank, i.e. on flash), -1 if it is not a whole valid record. The
    # header is left in log.buf[0:16], state bytes included. body: the rest
    # of log.buf, so no slice is made per full chunk.
    b = log.buf
    v = log._bufv
    h = log._buf16
    if log._rd(unit, p, h) < REC:
        return -1
    t = b[0]
    if t == 255 and blank:
        for i in range(1, REC):
            if b[i] != 255:
                return -1
        return 0
    blen = b[2] | b[3] << 8
    if t == T_MSG:
        if blen < 4:
            return -1
    elif t == T_DONE or t == T_REL or t == T_HOLD or t == T_UNHOLD:
        if blen:
            return -1
    else:
        return -1
    if p + REC + blen > end:
        return -1
    rel = b[10]
    done = b[11]
    crc = u32(b, 12)
    b[10] = b[11] = 255
    b[12] = b[13] = b[14] = b[15] = 0
    c = crc32(h)
    q = p + REC
    left = blen
    room = len(body)
    while left:
        n = left if left < room else room
        w = body if n == room else v[REC:REC + n]
        if log._rd(unit, q, w) < n:
            return -1
        c = crc32(w, c)
        q += n
        left -= n
    if c != crc:
        return -1
    b[10] = rel
    b[11] = done
    return _aligned(blen)


def scan(log, unit, start, end, blank, on):
    """Calls on(log, unit, pos, type, flags, blen, seq, pid, rel, done) for
    each valid record in [start, end), in order. A torn or damaged record is
    skipped and counted (log.corrupt) once per damaged stretch: the scan
    resynchronises on the next valid record at a 4-byte boundary. blank: the
    medium is flash, where an erased (0xFF) stretch running to end means no
    more data. Returns, on flash, where the next record may be programmed:
    end if the unit holds any damage, because a torn record's header may
    claim bytes that are still erased, and a record programmed there could
    complete it; on files, the end of the last valid record."""
    p = start
    good = start
    bad = False
    damaged = False
    rest = log._bufv[REC:]
    while p + REC <= end:
        n = _rec_at(log, unit, p, end, blank, rest)
        if n > 0:
            b = log.buf
            on(log, unit, p, b[0], b[1], b[2] | b[3] << 8, u32(b, 4),
               b[8] | b[9] << 8, _vote(b[10]), _vote(b[11]))
            p += n
            good = p
            bad = False
            continue
        if n == 0:
            q = log._nonff(unit, p, end)
            if q >= end:
                return end if damaged else p
            p = q & ~3
        else:
            p += 4
        if not bad:
            log.corrupt += 1
            bad = damaged = True
    if p < end and not bad and (not blank or log._nonff(unit, p, end) < end):
        log.corrupt += 1  # a torn tail too short for a record header
        damaged = True
    if not blank:
        return good
    return end if damaged or p > end else p


def found(log, unit, pos, t, flags, blen, seq, pid, rel, done):
    """scan's on() that rebuilds the log: a record, in log order. Later
    records of a key or a held id supersede earlier ones. Each pending
    message goes straight into the index; nothing else is kept per message,
    so booting takes no more heap with a long backlog. The held ids are
    collected in _holds (a list the caller makes, opened() empties)."""
    if t == T_MSG:
        if seq >= log.tail:
            log.tail = seq + 1
        i = log._find(seq)
        if i >= 0:
            _superseded(log, log._unit[i], log._off[i])
            if done:
                log._forget(i)
        if not done:
            d = 0
            if flags & _F_EXP:
                log._rd(unit, pos + REC + blen - 4, log._dlb)
                d = u32(log._dlb, 0)
            # Its entry, in key order: a copy may come after newer keys.
            i = log._at(seq)
            if i < log._n and log._key[i] == seq:
                if log._st[i]:
                    log._tally(i, -1)
            else:
                if log._n == log.slots and log._close_gaps() == log.slots:
                    grow(log, log.slots + 8)
                i = log._at(seq)
                for j in range(log._n, i, -1):
                    log._copy_entry(j - 1, j)
                log._n += 1
            log._index(i, seq, unit, pos, blen, pid, flags & 15 | _S_PEND | (_F_REL if rel else 0), d)
    elif t == T_HOLD or t == T_UNHOLD:
        holds = _holds
        for i in range(len(holds)):
            if holds[i][1] == pid:
                h = holds.pop(i)
                _superseded(log, h[2], h[3])
                break
        if t == T_HOLD and not done:
            holds.append([seq, pid, unit, pos])
    else:
        i = log._find(seq)
        if i >= 0:
            if t == T_DONE:
                log._forget(i)
            else:
                log._st[i] |= _F_REL


def _superseded(log, unit, pos):
    # A later copy of the record at pos was found: a compaction was cut
    # short before the old copy went. Flash marks the old one done
    # (FlashStore._superseded); a file's old segment goes once nothing in
    # it is live. Marked done, it cannot come back once its newer copy is
    # gone.
    z = getattr(log, "_zero", None)  # FlashStore's
    if z:
        log._prog(unit, pos + 11, z)


def opened(log):
    """After the scan: the held ids it found go into the table. One smaller
    than what the log holds (reopened with a smaller held) keeps the newest,
    and counts the others in held_evicted."""
    global _holds
    holds = _holds
    _holds = None
    if not holds:
        return  # the table is made with the first hold
    from .held import table
    h = table(log)
    while len(holds) > len(h._hpid):
        j = 0
        for k in range(1, len(holds)):
            if holds[k][0] < holds[j][0]:
                j = k
        holds.pop(j)
        log.held_evicted += 1
    for i in range(len(holds)):
        n, pid, u, p = holds[i]
        h._hpid[i] = pid
        h._hord[i] = n
        h._hunit[i] = u
        h._hpos[i] = p
        log._live[u] += REC
        if n >= h._hnext:
            h._hnext = n + 1


def grow(log, n):
    """n entries in the index: the scan found more messages pending than
    slots (the store was written with more)."""
    k = n - log.slots
    log.slots = n
    for a in (log._key, log._unit, log._off):
        a.extend(array("i", [0] * k))
    for a in (log._size, log._pid, log._th):
        if a:
            a.extend(array("H", [0] * k))
    if log._dl:
        log._dl.extend(array("I", [0] * k))
    log._st.extend(bytearray(k))


def files(log, kind):
    """FileStore's opening: scans the segment files of log.dir, oldest
    first, and goes on appending to the newest if it ended cleanly."""
    nums = []
    try:
        names = log.fs.listdir(log.dir)
    except OSError as err:
        raise OSError(err.args[0] if err.args else 0, "outbox directory %r cannot be made or read (does its parent exist?)"
                      % log.dir)
    for name in names:
        if len(name) == 12 and name.endswith(".hfo"):
            try:
                nums.append(int(name[:8], 16))
            except ValueError:
                pass
    nums.sort()
    global _holds
    _holds = []
    end = 0
    clean = False
    for n in nums:
        if n >= log._nseg:
            log._nseg = n + 1
        f = log._fopen(log._path(n), "rb")
        log._rf = f
        log._rseg = n
        size = f.seek(0, 2)
        f.seek(0)
        got = f.readinto(log._unithead) or 0
        if got < UNIT:
            # Created, header not (all) written: a power cut at creation.
            # It can hold no record.
            log._close_reader()
            log.fs.remove(log._path(n))
            continue
        u = unit_check(log.buf, kind)
        if u is None:
            log.corrupt += 1  # unreadable header: left alone
            log._close_reader()
            continue
        if u[0] > VERSION:
            log.foreign += 1  # a newer format: left alone for it
            log._close_reader()
            continue
        if u[2] > log.tail:
            log.tail = u[2]
        log._segs.append(n)
        log._live[n] = 0
        end = scan(log, n, UNIT, size, False, found)
        clean = end == size
        log._close_reader()
    opened(log)
    if log._segs and clean and end < log.segment_bytes and log._segs[-1] == nums[-1]:
        n = log._segs[-1]
        log._f = log._fopen(log._path(n), "a+b")
        log._wunit = n
        log._wpos = log._csize = end


def blocks(log, kind):
    """FlashStore's opening: reads the block headers, then scans the log's
    blocks in the order they were written."""
    bs = log.bs
    used = []
    salvage = []
    for b in range(log.n):
        log._rd(b, 0, log._unithead)
        u = unit_check(log.buf, kind)
        if u is None:
            if log._nonff(b, 0, UNIT) < UNIT:
                salvage.append(b)  # torn header or erase, or damage
            continue
        if u[0] > VERSION:
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
        scan(log, b, UNIT, bs, True, lambda *r: r[-1] or live.append(b))
        log.corrupt = c
        if live:
            log.corrupt += 1
            log._bst[b] = _USED
            used.append((-1, b, 0))
    used.sort()
    global _holds
    _holds = []
    for seq, b, base in used:
        if base > log.tail:
            log.tail = base
        if seq >= log._nseq:
            log._nseq = seq + 1
        wp = scan(log, b, UNIT, bs, True, found)
        if seq >= 0:
            log._wunit = b
            log._wpos = wp
    opened(log)

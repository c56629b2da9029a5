# Reading a durable outbox back after a reboot: the scan of a unit's
# records and what the log rebuilds from them (docs/outbox.md, recovery),
# and FileStore's segment files. A store needs this once, when it opens:
# FileStore and FlashStore (with blocks.py, its own opening) load it then
# and unload it again (unload.py), so its code does not stay on the heap.
# It changes the store only through the store's methods.
import struct
from .log import crc32, _aligned, _UFMT, _MAGIC
# log's and flash's constants (const() names with _ are not importable;
# host_tests/test_outbox_consts.py checks that the copies agree):
_VERSION = const(2)  # 2 added _F_EXP; version 1 units are read as they are
_UNIT = const(20)  # segment file / flash block header
_REC = const(16)  # record header
_T_MSG = const(0x4D)  # 'M' a stored PUBLISH: seq = key, body = the packet
_T_DONE = const(0x44)  # 'D' file log: message seq is done
_T_REL = const(0x52)  # 'R' file log: message seq reached PUBREC
_T_HOLD = const(0x48)  # 'H' inbound QoS 2 id held (pid); seq = hold number
_T_UNHOLD = const(0x58)  # 'X' file log: the hold of pid ended
_F_REL = const(4)
_F_EXP = const(8)
_S_PEND = const(16)

_holds = None  # during the scan: [hold number, pid, unit, pos] of each held id (made with the first)


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


def _claim(b, pos, end):
    # The bytes a record with the header in b[0:16] at pos takes: 0 if no
    # record of ours has that type and length, or it would pass end.
    t = b[0]
    blen = b[2] | b[3] << 8
    if t == _T_MSG:
        if blen < 4:
            return 0
    elif t != _T_DONE and t != _T_REL and t != _T_HOLD and t != _T_UNHOLD or blen:
        return 0
    if pos + _REC + blen > end:
        return 0
    return _aligned(blen)


def _crc(log, unit, pos, body):
    # The CRC of the record at pos as its header in log.buf[0:16] (state
    # bytes and CRC as written for it) describes it; -1 if it cannot be read.
    # body: the rest of log.buf, so no slice is made per full chunk.
    v = log.buf
    c = crc32(log._buf16)
    q = pos + _REC
    left = v[2] | v[3] << 8
    room = len(body)
    while left:
        n = left if left < room else room
        w = body if n == room else v[_REC:_REC + n]
        if log._rd(unit, q, w) < n:
            return -1
        c = crc32(w, c)
        q += n
        left -= n
    return c


def _rec_at(log, unit, pos, end, blank, body):
    # The record at pos: its aligned length; 0 for an erased header (only
    # when blank, i.e. on flash); if it is not a whole valid record, minus
    # the length its header claims (where the next record can start), or -1
    # when the header claims none a record could have. A record whose one
    # damage is a flipped bit of its type or length is mended (its CRC,
    # taken over the length the mended header gives, says so): the rest of
    # the unit is not lost with it. The header is left in log.buf[0:16],
    # state bytes included.
    b = log.buf
    if log._rd(unit, pos, log._buf16) < _REC:
        return -1
    if b[0] == 255 and blank:
        for i in range(1, _REC):
            if b[i] != 255:
                return -1
        return 0
    rel = b[10]
    done = b[11]
    crc = u32(b, 12)
    b[10] = b[11] = 255
    b[12] = b[13] = b[14] = b[15] = 0
    n = _claim(b, pos, end)
    if not n or _crc(log, unit, pos, body) != crc:
        claimed = -n or -1
        n = 0
        for i in range(32):  # one bit of bytes 0..3: type, flags (no use: not in the length), length
            if i >> 3 == 1:
                continue
            b[i >> 3] ^= 1 << (i & 7)
            m = _claim(b, pos, end)
            if m and _crc(log, unit, pos, body) == crc:
                n = m
                log.corrupt += 1  # mended: counted as damage found
                break
            b[i >> 3] ^= 1 << (i & 7)
        if not n:
            return claimed
    b[10] = rel
    b[11] = done
    return n


def scan(log, unit, start, end, blank, on):
    """Calls on(log, unit, pos, type, flags, blen, seq, pid, rel, done) for
    each valid record in [start, end), in order. A torn or damaged record is
    skipped and counted (log.corrupt) once per damaged stretch, by the
    length its own header claims: the next record can start only there, so
    record-shaped bytes inside its body (a payload that embeds a record) are
    never taken for one. A header whose type or length no record can have,
    or whose length runs past end (a torn put: on files the last thing in
    its segment, as writing goes on in a new one after a failed write or a
    reboot), ends the unit's scan. blank: the medium is flash, where an
    erased (0xFF) stretch running to end means no more data. Returns, on
    flash, where the next record may be programmed: end if the unit holds
    any damage, because a torn record's header may claim bytes that are
    still erased, and a record programmed there could complete it; on
    files, the end of the last valid record."""
    p = start
    good = start
    bad = False
    damaged = False
    rest = log.buf[_REC:]
    while p + _REC <= end:
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
        if not bad:
            log.corrupt += 1
            bad = damaged = True
        if n < -1:
            p -= n
        elif n:
            return end if blank else good
    if p < end and not bad and (not blank or log._nonff(unit, p, end) < end):
        log.corrupt += 1  # a torn tail too short for a record header
        damaged = True
    if not blank:
        return good
    return end if damaged or p > end else p


def found(log, unit, pos, t, flags, size, key, pid, rel, done):
    """scan's on() that rebuilds the log: a record, in log order. Later
    records of a key or a held id supersede earlier ones. Each pending
    message goes straight into the index; nothing else is kept per message,
    so booting takes no more heap with a long backlog. The held ids are
    collected in _holds (made with the first, opened() empties it)."""
    global _holds
    if t == _T_MSG:
        if key >= log.tail:
            log.tail = key + 1
        i = log._find(key)
        if i >= 0:
            _superseded(log, log._unit[i], log._off[i])
            if done:
                log._forget(i)
        if not done:
            d = 0
            if flags & _F_EXP:
                b = log._mbufs[5]
                log._rd(unit, pos + _REC + size - 4, b)
                d = u32(b, 0)
            # Its entry, in key order: a copy may come after newer keys.
            i = log._at(key)
            if i < log._n and log._key[i] == key:
                if log._state[i]:
                    log._tally(i, -1)
            else:
                if log._n == log.slots and log._close_gaps() == log.slots:
                    log._grow(8)  # written with more slots
                i = log._at(key)
                log._room(i)
            log._index(i, key, unit, pos, size, pid, flags & 15 | _S_PEND | (_F_REL if rel else 0), d)
    elif t == _T_HOLD or t == _T_UNHOLD:
        if _holds is None:
            _holds = []
        holds = _holds
        for i in range(len(holds)):
            if holds[i][1] == pid:
                h = holds.pop(i)
                _superseded(log, h[2], h[3])
                break
        if t == _T_HOLD and not done:
            holds.append([key, pid, unit, pos])
    else:
        if key >= log.tail:  # its message was put, in a segment gone since
            log.tail = key + 1
        i = log._find(key)
        if i >= 0:
            if t == _T_DONE:
                log._forget(i)
            else:
                log._released(i)


def _superseded(log, unit, pos):
    # A later copy of the record at pos was found: a compaction was cut
    # short before the old copy went. Flash marks the old one done
    # (FlashStore._mark, where its done byte is); a file's old segment goes
    # once nothing in it is live. Marked done, it cannot come back once its
    # newer copy is gone.
    if getattr(log, "_zero", None):  # FlashStore's
        log._mark(_T_DONE, unit, pos, 0, 0)


def opened(log):
    """After the scan: the held ids it found go into the table. One smaller
    than what the log holds (reopened with a smaller held) keeps the newest,
    and counts the others in held_evicted."""
    global _holds
    holds = _holds
    _holds = None
    if not holds:
        return  # the table is made with the first hold
    from ..held import table
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
        h._restore(i, n, pid, u, p)


def files(log, kind):
    """FileStore log's opening: scans the segment files of log.dir, oldest
    first. Returns the number of the next new segment and, if the newest
    ended cleanly with room left, its size (writing goes on there), else 0."""
    try:
        log.fs.mkdir(log.dir)
    except OSError:
        pass  # there already, or its parent is missing: listdir says which
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
    end = 0
    clean = False
    for n in nums:
        f = log._reader(n)
        size = f.seek(0, 2)
        if size > 0x10000:  # written with larger segments: its offsets need 4 bytes
            log._grow(0)
        f.seek(0)
        got = f.readinto(log._unithead) or 0
        if got < _UNIT:
            # Created, header not (all) written: a power cut at creation.
            # It can hold no record.
            log._close_reader()
            log.fs.remove(log._path(n))
            continue
        u = unit_check(log.buf, kind)
        whole = u is not None
        if not whole:
            # A damaged header (a flipped bit): its records carry their own
            # CRCs, its name its number, and the keys give tail. Salvaged as
            # FlashStore salvages a block; a file with no valid record is
            # left alone. Never written to again: writing goes on in a new one.
            log.corrupt += 1
            u = (_VERSION, n, 0)
        if u[0] > _VERSION:
            log.foreign += 1  # a newer format: left alone for it
            log._close_reader()
            continue
        if u[2] > log.tail:
            log.tail = u[2]
        log._add(n)
        end = scan(log, n, _UNIT, size, False, found)
        clean = end == size and whole
        if end == _UNIT and not whole:
            log._drop(n)
        log._close_reader()
    opened(log)
    n = nums[-1] if nums else 0
    if log._segs and clean and end < log.segment_bytes and log._segs[-1] == n:
        return n + 1, end
    return n + 1, 0

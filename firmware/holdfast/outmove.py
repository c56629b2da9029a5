# What a persistent outbox seldom runs: copying a unit's live records forward
# (a compaction), which FileStore and FlashStore load it for and unload it
# after (unload.py), apart from the boot scan so that opening a store does not
# load it too; what FileStore does after a failed write (fail()); and the CRC
# where the port has no binascii.crc32 (outlog imports it then).
from .outlog import _aligned
# outlog's format constants (const() names with _ are not importable; test_outbox_consts.py
# checks that the copies agree):
_REC = const(16)  # record header
_T_MSG = const(0x4D)  # 'M' a stored PUBLISH: seq = key, body = the packet
_T_HOLD = const(0x48)  # 'H' inbound QoS 2 id held (pid); seq = hold number


def crc32_soft(data, crc=0):
    """CRC-32 (the zlib one) without a table, for runtimes lacking binascii.crc32."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def move(log, old):
    """Copies the live records of unit old to log._wunit (the caller made
    room), a released message with the released flag; once the copies are
    durable the index points at them, and old holds nothing live."""
    new = log._wunit
    head = log._buf16
    parts = [head, None]
    start = log._wpos
    for write in (True, False):
        if not write:
            log._commit()
        p = start
        for i in range(log._n):
            if log._state[i] and log._unit[i] == old:
                n = log._size[i]
                if write:
                    body = bytearray(n)
                    log._rd(old, log._off[i] + _REC, body)
                    log._head(head, _T_MSG, log._state[i] & 15, log._key[i], log._pid[i], body)
                    parts[1] = body
                    log._append(_aligned(n), parts, 0)
                    parts[1] = None
                else:
                    log._unit[i] = new
                    log._off[i] = p
                p += _aligned(n)
        h = log.held_ids
        for i in range(len(h._hpid) if h else 0):
            if h._hpid[i] and h._hunit[i] == old:
                if write:
                    log._head(head, _T_HOLD, 0, h._hord[i], h._hpid[i], None)
                    log._append(_REC, parts, 0)
                else:
                    h._hunit[i] = new
                    h._hpos[i] = p
                p += _REC
    log._live[new] += log._live[old]
    log._live[old] = 0


def fail(st, full):
    """FileStore st's write failed (full: the filesystem is). The filesystem
    keeps what was committed before it; if the segment file now holds a
    partial record, writing goes on in a new segment."""
    f = st._f
    st._f = None
    if f is None:
        return
    if st.uncommitted:
        # The uncommitted tail of the active segment may be gone: forget
        # the messages stored there (a reboot may still find some of them).
        for i in range(st._n):
            if st._state[i] and st._unit[i] == st._wunit and st._off[i] >= st._csize:
                st._forget(i)
                st.lost += 1
        st._wpos = st._csize
        st.uncommitted = 0
    try:
        f.close()
    except OSError:
        pass
    if not full:
        return
    try:
        f = st._fopen(st._path(st._wunit), "a+b")
        if f.seek(0, 2) == st._wpos:
            st._f = f
            return
        f.close()
    except OSError:
        pass

# What a durable outbox seldom runs: copying a unit's live records forward
# (a compaction), which FileStore and FlashStore load it for and unload it
# after (unload.py), apart from the boot scan so that opening a store does
# not load it too.
from .log import _aligned
# log's format constants (const() names with _ are not importable; test_outbox_consts.py
# checks that the copies agree):
_REC = const(16)  # record header
_T_MSG = const(0x4D)  # 'M' a stored PUBLISH: seq = key, body = the packet
_T_HOLD = const(0x48)  # 'H' inbound QoS 2 id held (pid); seq = hold number


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
                    log._rehome(i, new, p)
                p += _aligned(n)
        h = log.held_ids
        for i in range(len(h._hpid) if h else 0):
            if h._hpid[i] and h._hunit[i] == old:
                if write:
                    log._head(head, _T_HOLD, 0, h._hord[i], h._hpid[i], None)
                    log._append(_REC, parts, 0)
                else:
                    h._rehome(i, new, p)
                p += _REC

# The inbound QoS 2 ids of a persistent outbox (outlog.Log): the table of
# held.Held, each hold and its end a record in the log. Loaded by
# held.table() with the first id a store holds, or when the scan finds one:
# a store that only publishes never carries this code nor the table.
from array import array
from . import codec
from . import errors  # errors.X where raised or caught: the class loads with the first failure
from .held import Held
# outlog's format constants (const() names with _ are not importable; test_outbox_consts.py
# checks that the copies agree):
_REC = const(16)  # record header
_T_HOLD = const(0x48)  # 'H' inbound QoS 2 id held (pid); seq = hold number
_T_UNHOLD = const(0x58)  # 'X' file log: the hold of pid ended
_E_NO_UNHOLD = const(77)  # an error reason (reasons.py has the words)


class Logged(Held):
    """Held ids of log (self.store); _hunit / _hpos: the unit and offset of
    each one's H record (unit -1: in RAM only, there was no room to write it)."""

    def __init__(self, log):
        Held.__init__(self, log)
        n = log.held_max
        self._hunit = array("i", [0] * n)
        self._hpos = array("i", [0] * n)

    def _log_hold(self, i, pid, order):
        log = self.store
        log._head(log._rparts[0], _T_HOLD, 0, order, pid, None)
        try:
            p = log._append(_REC, log._rparts, _T_HOLD)
        except errors.OutboxFull:
            self._hunit[i] = -1  # in RAM only: no room
            log.unsaved += 1
            return
        u = self._hunit[i] = log._wunit
        self._hpos[i] = p
        log._live[u] += _REC

    def _end_hold(self, i, strict):
        log = self.store
        pid = self._hpid[i]
        self._hpid[i] = 0
        u = self._hunit[i]
        if u < 0:
            return
        log._live[u] -= _REC
        if log._mark(_T_UNHOLD, u, self._hpos[i], 0, pid):
            return
        if strict:
            self._hpid[i] = pid
            log._live[u] += _REC
            raise errors.OutboxFull(codec.why(_E_NO_UNHOLD, pid))
        log.unsaved += 1  # in RAM only: its H record lives until its unit goes

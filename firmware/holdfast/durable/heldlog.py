# The inbound QoS 2 ids of a durable outbox (log.Log): the table of
# held.Held, each hold and its end a record in the log. Loaded by
# held.table() with the first id a store holds, or when the scan finds one:
# a store that only publishes never carries this code nor the table.
from array import array
from .. import codec
from .. import errors  # errors.X where raised or caught: the class loads with the first failure
from ..held import Held
# log's format constants (const() names with _ are not importable; test_outbox_consts.py
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
        self._place(i, log._wunit, p)

    def _end_hold(self, i, strict):
        log = self.store
        pid = self._hpid[i]
        self._hpid[i] = 0
        u = self._hunit[i]
        if u < 0:
            return
        log._use(u, -_REC)
        if log._mark(_T_UNHOLD, u, self._hpos[i], 0, pid):
            return
        if strict:
            self._hpid[i] = pid
            log._use(u, _REC)
            raise errors.OutboxFull(codec.why(_E_NO_UNHOLD, pid))
        log.unsaved += 1  # in RAM only: its H record lives until its unit goes

    def _place(self, i, unit, pos):
        # Entry i's H record is at pos in unit.
        self._hunit[i] = unit
        self._hpos[i] = pos
        self.store._use(unit, _REC)

    def _rehome(self, i, unit, pos):
        # Entry i's H record has a durable copy at pos in unit (a compaction).
        self.store._use(self._hunit[i], -_REC)
        self._place(i, unit, pos)

    def _restore(self, i, order, pid, unit, pos):
        """Entry i: id pid, held as number order, its H record at pos in
        unit (the scan found it)."""
        self._hpid[i] = pid
        self._hord[i] = order
        self._place(i, unit, pos)
        if order >= self._hnext:
            self._hnext = order + 1

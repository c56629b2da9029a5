# When to try the broker again: exponential backoff with jitter on every
# delay, capped, reset by a link that stayed up; shared by both clients.
from .compat import ticks_add, ticks_diff

try:
    from random import getrandbits
except ImportError:  # pragma: no cover - every port has it
    from .compat import ticks_ms

    def getrandbits(n):
        return ticks_ms() & ((1 << n) - 1)


class Backoff:
    def __init__(self, lo_ms, hi_ms, stable_ms):
        self.lo = lo_ms
        self.hi = hi_ms
        self.stable = stable_ms  # a link up this long was a good one
        self.delay = 0
        self.at = 0

    def failed(self, now):
        """A connection attempt or a link failed: schedule the next attempt."""
        self.delay = min(self.hi, self.delay * 2) if self.delay else self.lo
        self._schedule(now)

    def refused(self, now):
        # The broker refused us (credentials, authorization, TLS): it will
        # again, so wait the longest delay instead of retrying in a tight loop.
        self.delay = self.hi
        self._schedule(now)

    def _schedule(self, now):
        # Wait between half and all of the delay, so a fleet that lost its
        # broker together does not come back in lockstep.
        half = self.delay // 2
        self.at = ticks_add(now, half + getrandbits(16) % (half + 1))

    def up(self, now, since):
        """The link has been up since `since`: after stable ms, the next
        failure starts again from the shortest delay."""
        if self.delay and ticks_diff(now, since) >= self.stable:
            self.delay = 0

    def reset(self):
        self.delay = 0

    def due(self, now):
        return not self.delay or ticks_diff(now, self.at) >= 0

    def wait_ms(self, now):
        return max(0, ticks_diff(self.at, now)) if self.delay else 0

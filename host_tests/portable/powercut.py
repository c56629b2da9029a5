# When a simulated power cut strikes, shared by the simulated flash chip
# (flashsim.py) and the faulty filesystem (cutfs.py): operations are counted,
# and the k-th one after cut(k, keep) is torn and kills the device.


class PowerCut:
    def __init__(self):
        self.ops = 0
        self.dead = False
        self._cut = 0
        self._keep = 0

    def cut(self, k, keep=0):
        """The k-th operation from now is cut (0: disarm). keep: bytes of it
        that happen (None: half, negative: all but that many)."""
        self._cut = self.ops + k if k else 0
        self._keep = keep

    def _torn(self, n):
        # Bytes of this n-byte operation that happen: n, or fewer when it is
        # the cut one (which also kills the device).
        self.ops += 1
        if self._cut and self.ops >= self._cut:
            self.dead = True
            k = self._keep
            if k is None:
                return n // 2
            return max(0, n + k) if k < 0 else min(k, n)
        return n

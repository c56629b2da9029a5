"""Running the MicroPython side of the client bench (mp/bench_mp.py and
mp/minheap.py), one process a figure, and the parallel search for the
smallest heap."""

import concurrent.futures
import itertools
import json
import os
import subprocess

from bench.fmt import short


class RunError(Exception):
    pass


_SEQ = itertools.count(1)


class MP:
    """Runs bench_mp / minheap for one row, each call its own process."""

    def __init__(self, exe, build, row, libdir, shim):
        self.exe = exe
        self.row = row
        path = [os.path.join(build, "mpy", "harness"), libdir]
        if shim:
            path.append(os.path.join(build, "mpy", "shim"))
        path.append(".frozen")
        self.env = dict(os.environ, MICROPYPATH=":".join(path))
        self.cwd = os.path.join(build, "cwd")
        os.makedirs(self.cwd, exist_ok=True)

    def _cid(self, test):
        # unique across rows and parallel runs: the broker drops a client
        # whose id connects again
        return "b%d-%s-%s" % (next(_SEQ), self.row["id"], test)

    def _opts(self, extra):
        o = dict(self.row.get("opts", {}))
        o.update(extra or {})
        return ["%s=%s" % kv for kv in sorted(o.items())]

    def run(self, test, port, extra=None, timeout=60, heap=None):
        cmd = [self.exe] + (["-X", "heapsize=%s" % heap] if heap else []) + \
              ["-m", "bench_mp", self.row["lib"], test, "127.0.0.1", str(port),
               "cid=" + self._cid(test)] + self._opts(extra)
        try:
            p = subprocess.run(cmd, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunError("timed out after %d s" % timeout)
        for line in p.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        err = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["exit %d" % p.returncode])
        raise RunError(short(err[-1]))

    def minheap_ok(self, kb, port, n, timeout):
        cmd = [self.exe, "-X", "heapsize=%dk" % kb, "-m", "minheap", self.row["lib"], "127.0.0.1",
               str(port), str(n), "cid=" + self._cid("mh")] + self._opts(None)
        try:
            p = subprocess.run(cmd, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, "timeout"
        ok = p.returncode == 0 and "MINHEAP OK" in p.stdout
        return ok, "" if ok else short((p.stdout.strip().splitlines() or ["exit %d" % p.returncode])[-1])


def min_heap(mp, port, n, timeout, lo=4, cap=512, par=7):
    """Smallest -X heapsize (KB, 1 KB steps) in which n QoS 1 publishes
    complete, by a parallel k-ary search (assumes more heap never hurts).
    Returns (kb, last failure reason) or (None, reason) if cap KB fails."""
    hi = 64
    why = ""
    pool = concurrent.futures.ThreadPoolExecutor(par)
    try:
        while True:
            ok, why = mp.minheap_ok(hi, port, n, timeout)
            if ok:
                break
            if hi >= cap:
                return None, "fails even at %d KB: %s" % (cap, why)
            lo, hi = hi, min(cap, hi * 2)
        # invariant: lo fails (or is the floor), hi passes
        while hi - lo > 1:
            k = min(par, hi - lo - 1)
            cands = sorted({lo + (hi - lo) * (i + 1) // (k + 1) for i in range(k)} - {lo, hi})
            res = list(pool.map(lambda kb: (kb,) + mp.minheap_ok(kb, port, n, timeout), cands))
            passing = [kb for kb, ok, _ in res if ok]
            failing = [(kb, w) for kb, ok, w in res if not ok]
            new_hi = min(passing) if passing else hi
            below = [(kb, w) for kb, w in failing if kb < new_hi]
            if below:
                lo, why = max(below)
            hi = new_hi
            if not below and not passing:
                break
        return hi, why
    finally:
        pool.shutdown()

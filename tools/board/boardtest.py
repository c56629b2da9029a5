"""Run the portable tests on a board, through mpremote: `make board-test PORT=...`.

    PYTHONPATH=tools python -m board.boardtest --port PORT [--broker HOST:PORT | --no-broker]
        [--broker-host ADDR] [-k SUBSTRING] [--timeout S] [--extra test_mine.py ...]

PORT is any mpremote connection string (/dev/ttyACM0, socket://127.0.0.1:N
for the emulated boards). What it does (docs/boards.md, "Tests on a board"):

1. compiles holdfast, host_tests/portable and the runner (tools/runtimes/
   mptest.py) to .mpy (tools/runtimes/mpyc.py; bytecode only, so any
   architecture whose .mpy version matches) and copies what the board does
   not have yet under /hft, laid out as in the checkout, with a stub of each
   test module's `def test_...` lines (the runner's definition order and
   signatures, without the sources). What does not fit in the board's free
   flash is left out, a test module at a time, and reported as skipped.
2. runs the test modules in one fresh interpreter (mpremote's soft reset;
   mptest unloads each module after its tests), the board's output read as
   it comes; a hook (mptest.before_test, compiled on the board) names each
   test as it starts. Each test has a time limit (--timeout): one that
   exceeds it is interrupted (mpremote's ctrl-C), reported as failed, and
   the run starts again after it. A board that resets or drops the link
   during a test gets the same treatment; one that then does not answer is
   reported as such and the run ends.
3. measures the board's heap: free before and after `from holdfast import
   MQTTClient`, after a client connected to the broker and after a QoS 1
   publish; the smallest
   free heap seen is the lowest gc.mem_free() after the collection before
   any test (mptest's "lowest free"): what the loaded modules and the tests
   held at once, not the peak within a test, which MicroPython does not
   record.

Tests that need a real broker (host_tests/portable/hostbroker.py) get
mosquitto started on the host: on loopback for a socket:// board on this
machine, else on the address the host reaches its network from (or
--broker-host), which the board must be able to reach (it must be on the
network: its boot.py connects Wi-Fi). --broker uses a broker of yours;
--no-broker skips those tests, with that reason.

Prints a pytest-like report (a traceback for each failure, the reason for
each skip, the heap figures) and ends with one line
"board-test: N passed, M failed, K skipped"; exits 1 if any test failed or
the board stopped answering, 2 on a usage or setup error.
"""

import argparse
import binascii
import hashlib
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from board import deploy
from runtimes import mpyc, mptest

ROOT = deploy.ROOT
BASE = "/hft"  # on the board
PORTABLE = mpyc.PORTABLE
HOST_ONLY = ("conftest.py",)  # pytest's, never imported by mptest
DEFAULT_TIMEOUT = 60.0
PING_TIMEOUT = 30.0
# Before the first test of a run: mpremote's start, the soft reset and the imports.
START_TIMEOUT = 30.0
HEAP_CLIENT = b"hf-board-test-heap"

_RESULT = re.compile(r"^(PASS|FAIL|SKIP) (\S+)(?: \((.*)\))?$")
_SUMMARY = re.compile(r"^mptest: (\d+) passed, (\d+) failed$")
_NESTED = re.compile(r"^\s+def (test_\w+)\(\s*\)")  # a test defined under a condition
# Bytes of file content per mpremote exec when copying (base64 in the code,
# which the board compiles whole): mpremote's own `fs cp` writes 256 bytes a
# round trip, a minute for the suite on the emulated board.
COPY_CHUNK = 4096
EXEC_BYTES = 8192


class BoardTestError(Exception):
    pass


class Result:
    def __init__(self, name, outcome, detail=""):
        self.name, self.outcome, self.detail = name, outcome, detail


# -- what goes to the board ----------------------------------------------------

def _stub(path):
    """The test module's `def test_...` lines, as mptest reads them (--src):
    definition order, and which tests take arguments (pytest only)."""
    return "".join("def %s(%s):\n pass\n" % (name, "" if no_args else "request")
                   for name, no_args in mptest._scan_defs(path))


def tests_of(path, keyword=None):
    """Names (module.test) of the tests mptest may run from the source at
    path: its top-level tests in order, then those defined under a condition
    (which a board may not have)."""
    mod = os.path.basename(path)[:-3]
    names = [name for name, no_args in mptest._scan_defs(path) if no_args]
    with open(path) as f:
        names += sorted(m.group(1) for m in map(_NESTED.match, f) if m)
    out = []
    for name in names:
        full = mod + "." + name
        if full not in out and (keyword is None or keyword in full):
            out.append(full)
    return out


def payload(extra=()):
    """({board path: bytes}, [(module, source path)] of the test modules)."""
    outdir = mpyc.build()
    files = {}
    modules = []
    for rel in mpyc._sources():
        name = os.path.basename(rel)
        if rel.startswith(PORTABLE + "/") and name in HOST_ONLY:
            continue
        with open(os.path.join(outdir, rel[:-3] + ".mpy"), "rb") as f:
            files[BASE + "/" + rel[:-3] + ".mpy"] = f.read()
        if rel.startswith(PORTABLE + "/") and name.startswith("test_"):
            modules.append((name[:-3], os.path.join(ROOT, rel)))
    if extra:
        work = tempfile.mkdtemp(prefix="hf-boardtest-")
        try:
            for path in extra:
                name = os.path.basename(path)
                if not (name.startswith("test_") and name.endswith(".py")):
                    raise BoardTestError("--extra %s: a test module is named test_*.py" % path)
                out = os.path.join(work, name[:-3] + ".mpy")
                proc = subprocess.run(mpyc._mpy_cross() + ["-s", name[:-3], "-o", out, path],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
                if proc.returncode:
                    raise BoardTestError("mpy-cross failed on %s:\n%s" % (path, proc.stdout))
                with open(out, "rb") as f:
                    files["%s/%s/%s.mpy" % (BASE, PORTABLE, name[:-3])] = f.read()
                modules = [m for m in modules if m[0] != name[:-3]] + \
                    [(name[:-3], os.path.abspath(path))]
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for mod, src in modules:
        files["%s/src/%s.py" % (BASE, mod)] = _stub(src).encode()
    modules.sort()
    return files, modules


def fit(files, modules, free, have):
    """What to copy, given the board's free flash (bytes) and the sizes of
    the files it has already ({path: size}): the library, the helpers and the
    runner must fit; test modules go in, in name order, while they fit.
    Returns (files kept, modules kept, [(module, why)] left out)."""
    def cost(paths):
        return sum(len(files[p]) - have.get(p, 0) for p in paths)

    def own(mod):
        return ["%s/%s/%s.mpy" % (BASE, PORTABLE, mod), "%s/src/%s.py" % (BASE, mod)]

    tests = set(p for mod, _ in modules for p in own(mod))
    base = [p for p in files if p not in tests]
    room = free - cost(base)
    if room < 0:
        raise BoardTestError("the library, the test helpers and the runner need %d bytes more "
                             "than the board's %d free bytes of flash" % (-room, free))
    kept, left = [], []
    for mod, src in modules:
        need = cost(own(mod))
        if need <= room:
            room -= need
            kept.append((mod, src))
        else:
            left.append((mod, "does not fit in the board's flash (%d bytes, %d free)"
                         % (need, room)))
    keep = set(base) | set(p for mod, _ in kept for p in own(mod))
    return {p: b for p, b in files.items() if p in keep}, kept, left


# The free flash, and /tmp: where the tests make their directories (support.tmpdir).
_FLASH = """\
import os
s=os.statvfs('/')
print('HF free',s[0]*s[4])
try:
 os.mkdir('/tmp')
except OSError:
 pass
"""


def copy(dev, files):
    """Write {board path: bytes} in a few mpremote execs (base64 pieces),
    then check every file's sha256 on the board."""
    dirs = sorted(set(p.rsplit("/", 1)[0] for p in files))
    execs, code, size = [deploy._PREPARE % (dirs, [], [])], "", 0
    for path in sorted(files):
        data = files[path]
        for at in range(0, max(len(data), 1), COPY_CHUNK):
            piece = data[at:at + COPY_CHUNK]
            code += "f=open(%r,%r)\nf.write(d(%r))\nf.close()\n" % (
                path, "ab" if at else "wb", binascii.b2a_base64(piece, newline=False).decode())
            size += len(piece)
            if size >= EXEC_BYTES:
                execs.append("from binascii import a2b_base64 as d\n" + code)
                code, size = "", 0
    if code:
        execs.append("from binascii import a2b_base64 as d\n" + code)
    args = []
    for c in execs:
        args += ["+", "exec", c] if args else ["exec", c]
    dev.run(args, resume=False, timeout=600)
    _, hashes, _, _ = dev.query(sorted(files))
    bad = [p for p in files if hashes.get(p) not in (_sha(files[p]), "?")]  # "?": no sha256
    if bad:
        raise BoardTestError("%d files did not arrive intact on the board (sha256 differs), "
                             "the first: %s" % (len(bad), bad[0]))


def _sha(data):
    return hashlib.sha256(data).hexdigest()


# -- running ---------------------------------------------------------------------

# mptest.before_test (compiled on the board, so the runner's own heap figures
# do not pay for it): says which test starts and the free heap after a
# collection, and skips up to and including the one a restart goes on after.
_RUN = """\
import sys,gc
sys.path[:0]=[%(runtimes)r]
%(broker)simport mptest
a=[%(after)r]
def h(n):
 if a[0]:
  if n==a[0]:
   a[0]=None
  return 1
 gc.collect()
 print('RUN',n,gc.mem_free())
mptest.before_test=h
mptest.main(%(argv)r)
"""
_BROKER = "sys.path[:0]=[%r]\nimport hostbroker\nhostbroker.BROKER=%r\n"


def _suite_code(modules, broker, keyword, after):
    argv = ["--src", BASE + "/src"]
    if keyword:
        argv += ["-k", keyword]
    argv += ["%s/%s/%s.mpy" % (BASE, PORTABLE, mod) for mod, _ in modules]
    needs = False
    for _, src in modules:
        with open(src) as f:
            needs = needs or "hostbroker" in f.read()
    return _RUN % {"runtimes": BASE + "/tools/runtimes", "argv": argv, "after": after,
                   "broker": _BROKER % (BASE + "/" + PORTABLE, broker)
                   if needs and broker else ""}


class Stream:
    """One `mpremote connect PORT exec CODE`, its output read as it comes."""

    def __init__(self, port, code):
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "mpremote", "connect", port,
                                      "exec", code], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self.err,
                                     start_new_session=True)
        self.buf = b""

    def lines(self, deadline_fn):
        """Yield output lines; None when deadline_fn() (seconds left) runs out."""
        fd = self.proc.stdout.fileno()
        while True:
            left = deadline_fn()
            if left <= 0:
                yield None
                return
            if not select.select([fd], [], [], min(left, 0.5))[0]:
                continue
            data = os.read(fd, 4096)
            if not data:
                if self.buf:
                    yield self.buf.decode(errors="replace").rstrip("\r")
                return
            self.buf += data
            *done, self.buf = self.buf.split(b"\n")
            for line in done:
                yield line.decode(errors="replace").rstrip("\r")

    def close(self):
        """Stop mpremote (if still running); returns (status, its stderr)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.proc.stdout.close()
        self.err.seek(0)
        text = self.err.read().decode(errors="replace")
        self.err.close()
        return self.proc.returncode, text


def run_suite(port, modules, broker, keyword, limit, progress):
    """Run the test modules on the board, in one interpreter (mptest unloads
    each module after its tests); returns ([Result], lowest free heap or
    None, None or why the board stopped answering)."""
    results = []
    lowest = None
    todo, after = modules, None
    while True:
        stream = Stream(port, _suite_code(todo, broker, keyword, after))
        last = [time.monotonic() + START_TIMEOUT]
        running = None  # the test the board said it started, until its result
        current = None  # the FAIL whose traceback is being read
        summary = timed_out = False
        for line in stream.lines(lambda: limit - (time.monotonic() - last[0])):
            if line is None:
                timed_out = True
                break
            m = _RESULT.match(line)
            if line.startswith("RUN "):
                _, running, free = line.split(" ")
                lowest = int(free) if lowest is None else min(lowest, int(free))
                last[0], current = time.monotonic(), None
            elif m and m.group(2).split(".")[0] in dict(modules):
                last[0], running = time.monotonic(), None
                kind, name, detail = m.groups()
                if kind == "SKIP" and any(r.name == name for r in results):
                    continue  # a pytest-only test, named again as a restart loads its module
                outcome = {"PASS": "passed", "FAIL": "failed", "SKIP": "skipped"}[kind]
                current = Result(name, outcome, "" if kind == "FAIL" else detail or "")
                results.append(current)
                progress(current)
                if kind != "FAIL":
                    current = None
            elif _SUMMARY.match(line):
                summary, current = True, None
            elif current is not None:
                current.detail += line + "\n"
        status, err = stream.close()
        if summary and not timed_out:
            progress()
            return results, lowest, None
        if running is None:  # between tests: importing, or after the last one
            why = ("no word from the board within %.0f s (not in a test)" % limit
                   if timed_out else "mpremote ended without the runner's summary (status %s): %s"
                   % (status, err.strip()[-1500:]))
            results.append(Result(todo[0][0] if not results else results[-1].name.split(".")[0],
                                  "failed", why + "\n"))
            progress(results[-1])
            progress()
            return results, lowest, _ping(port)
        if timed_out:
            results.append(Result(running, "failed", "did not finish within %.0f s: interrupted "
                                  "(--timeout)\n" % limit))
        else:
            results.append(Result(running, "failed", "the board reset or the link dropped during "
                                  "this test (mpremote status %s):\n%s\n"
                                  % (status, err.strip()[-1500:])))
        progress(results[-1], "board-test: %s %s" % (
            running, "over the time limit: interrupted" if timed_out else "lost the board"))
        down = _ping(port)
        if down:
            progress()
            return results, lowest, down
        mod = running.split(".")[0]
        todo, after = [m for m in modules if m[0] >= mod], running


class Progress:
    """A line of marks per test module (. passed, F failed, s skipped), each
    printed once the next module starts; messages go out as they come."""

    MARK = {"passed": ".", "failed": "F", "skipped": "s"}

    def __init__(self, out):
        self.out, self.mod, self.marks = out, None, ""

    def __call__(self, result=None, message=None):
        mod = result.name.split(".")[0] if result else None
        if self.mod is not None and (mod != self.mod or message):
            self.out("%-40s %s" % (self.mod, self.marks))
            self.mod, self.marks = None, ""
        if message:
            self.out(message)
        if result:
            self.mod = mod
            self.marks += self.MARK[result.outcome]


def _ping(port):
    """None if the board answers, else why not."""
    try:
        proc = subprocess.run([sys.executable, "-m", "mpremote", "connect", port, "exec",
                               "print('HF up')"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=PING_TIMEOUT)
    except subprocess.TimeoutExpired:
        return "no answer within %.0f s" % PING_TIMEOUT
    text = proc.stdout.decode(errors="replace")
    if proc.returncode == 0 and "HF up" in text:
        return None
    return "mpremote status %d: %s" % (proc.returncode, text.strip()[-600:])


_HEAP = """\
import gc,sys
sys.path[:0]=[%(firmware)r]
gc.collect()
a=gc.mem_free()
from holdfast import MQTTClient
gc.collect()
b=gc.mem_free()
print('HF heap import',a,b)
c=MQTTClient(%(client)r,%(host)r,port=%(port)d,keepalive=30)
c.connect()
gc.collect()
print('HF heap connect',gc.mem_free())
c.publish(b'hf-board-test/heap',b'21.5',qos=1)
c.flush(10000)
gc.collect()
print('HF heap publish',gc.mem_free())
c.disconnect()
"""


def heap(dev, broker):
    """{what: free bytes} on a fresh interpreter: before, after import,
    after connect, after a QoS 1 publish (the last two need the broker)."""
    code = _HEAP % {"firmware": BASE + "/firmware", "client": HEAP_CLIENT,
                    "host": broker[0] if broker else "", "port": broker[1] if broker else 0}
    if not broker:
        code = code.split("c=MQTTClient")[0]
    rc, text = dev.run(["exec", code], resume=False, timeout=120, check=False)
    got = {}
    for line in text.splitlines():
        parts = line.split()
        if parts[:2] == ["HF", "heap"] and parts[2] == "import":
            got["before import"], got["after import"] = int(parts[3]), int(parts[4])
        elif parts[:2] == ["HF", "heap"]:
            got["after " + parts[2]] = int(parts[3])
    if rc and "Traceback" in text:
        got["error"] = text.strip().splitlines()[-1]
    return got


# -- the broker ---------------------------------------------------------------------

def _local(port):
    m = re.match(r"socket://(127\.\d+\.\d+\.\d+|localhost)(:|$)", port)
    return m is not None


def outward_address():
    """The host's address on the network it reaches others through."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent
        return s.getsockname()[0]
    finally:
        s.close()


# -- the report ---------------------------------------------------------------------

def report(results, left, heap_figures, lowest, down, seconds, out):
    failed = [r for r in results if r.outcome == "failed"]
    skipped = [r for r in results if r.outcome == "skipped"] + \
        [Result(mod, "skipped", why) for mod, why in left]
    passed = [r for r in results if r.outcome == "passed"]
    if failed:
        out("=" * 30 + " FAILURES " + "=" * 30)
        for r in failed:
            out("_" * 10 + " " + r.name + " " + "_" * 10)
            out(r.detail.rstrip("\n"))
    out("=" * 25 + " short test summary info " + "=" * 25)
    for r in failed:
        last = [line for line in r.detail.strip().splitlines() if line.strip()]
        out("FAILED %s - %s" % (r.name, last[-1].strip() if last else ""))
    for r in skipped:
        out("SKIPPED %s: %s" % (r.name, r.detail))
    if heap_figures:
        out("heap (free bytes, holdfast from %s as .mpy): %s" % (BASE, ", ".join(
            "%s %s" % (k, v) for k, v in heap_figures.items())))
    if lowest is not None:
        out("smallest free heap seen: %d bytes (between tests, after a collection: what "
            "the loaded code and the tests held at once)" % lowest)
    if down:
        out("board-test: the board stopped answering: %s" % down)
    out("board-test: %d passed, %d failed, %d skipped in %.1fs"
        % (len(passed), len(failed), len(skipped), seconds))
    return 1 if failed or down else 0


def board_test(port, broker=None, broker_host=None, no_broker=False, keyword=None,
               limit=DEFAULT_TIMEOUT, extra=(), out=print):
    t0 = time.monotonic()
    dev = deploy.Board(port)
    files, modules = payload(extra)
    mpy, hashes, _, _ = dev.query(sorted(files))
    ver, want = deploy.decode_mpy(mpy)[0], deploy.mpy_cross_version()[0]
    if ver != want:
        raise BoardTestError("the board reads .mpy v%d, this mpy-cross writes v%d: flash a "
                             "MicroPython whose .mpy version is %d" % (ver, want, want))
    _, text = dev.run(["exec", _FLASH], resume=False)
    free = int(re.search(r"HF free (\d+)", text).group(1))
    same = {p for p, b in files.items() if hashes.get(p) == _sha(b)}
    have = {p: len(files[p]) for p in same}
    files, modules, left = fit(files, modules, free, have)
    if keyword:  # only the modules with a test to run are loaded
        modules = [m for m in modules if tests_of(m[1], keyword)]
    copy_paths = sorted(p for p in files if p not in same)
    if copy_paths:
        copy(dev, {p: files[p] for p in copy_paths})
    out("board-test: %s, .mpy v%d; %d files copied to %s (%d bytes), %d unchanged; %d test "
        "modules%s" % (port, ver, len(copy_paths), BASE, sum(len(files[p]) for p in copy_paths),
                       len(files) - len(copy_paths), len(modules),
                       ", %d left out (flash)" % len(left) if left else ""))

    own_broker = None
    if no_broker:
        address = None
    elif broker:
        host, _, p = broker.rpartition(":")
        address = (host, int(p))
    else:
        from fleet.mosquitto import Mosquitto
        own_broker = Mosquitto()
        if not _local(port):
            own_broker.host = broker_host or outward_address()
        own_broker.start()
        address = (own_broker.host, own_broker.port)
        out("board-test: mosquitto on %s:%d for the tests that need a broker" % address)
    try:
        results, low, down = run_suite(port, modules, address, keyword, limit, Progress(out))
        if down:
            ran = set(r.name.split(".")[0] for r in results)
            left += [(m, "not run: the board stopped answering") for m, _ in modules
                     if m not in ran]
        heap_figures = heap(dev, address) if not down else {}
    finally:
        if own_broker is not None:
            own_broker.close()
    return report(results, left, heap_figures, low, down, time.monotonic() - t0, out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run the portable tests on a board over mpremote.")
    ap.add_argument("--port", required=True,
                    help="mpremote connection string: /dev/ttyACM0, socket://127.0.0.1:N")
    ap.add_argument("--broker", help="HOST:PORT of a broker of yours for the tests that need one")
    ap.add_argument("--broker-host", help="the host address the board reaches (for the "
                                          "mosquitto started here; default: found)")
    ap.add_argument("--no-broker", action="store_true",
                    help="skip the tests that need a broker")
    ap.add_argument("-k", dest="keyword", help="only tests whose module.name contains this")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help="seconds one test may take (default %.0f)" % DEFAULT_TIMEOUT)
    ap.add_argument("--extra", action="append", default=[],
                    help="another portable test module (test_*.py) to run on the board")
    a = ap.parse_args(argv)
    try:
        return board_test(a.port, a.broker, a.broker_host, a.no_broker, a.keyword, a.timeout,
                          a.extra)
    except (BoardTestError, deploy.DeployError) as e:
        sys.stderr.write("board-test: error: %s\n" % e)
        return 2


if __name__ == "__main__":
    sys.exit(main())

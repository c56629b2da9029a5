"""Bench section "client": holdfast against other MicroPython MQTT clients.

Everything runs under the MicroPython unix port (.venv/bin/micropython), each
figure from its own process (mp/bench_mp.py and mp/minheap.py here, with one
adapter per library, mp/lib_*.py), against one mosquitto on loopback started
here, directly and through tools/fleet/proxy.py adding 20 ms of round trip.
The peers are fetched from PyPI at bench time (peers.py) and every library is loaded as .mpy (mpy-cross), as on a board. The "floor"
row is no library at all: pre-encoded packets, one write each, TCP_NODELAY,
QoS 1 stop-and-wait.

A row whose runs fail shows "failed: reason" in its cells; the run goes on.
"""

import concurrent.futures
import os
import socket
import statistics
import time

from bench.client_report import report
from bench.client_rows import ROWS
from bench.fmt import fmt_rate, short
from bench.mprun import MP, RunError, min_heap
from bench.mpy import FIRMWARE, compile_tree, micropython_exe
from bench.peers import PEERS, fetch
from bench.sub import Counter
from board.deploy import library
from fleet.mosquitto import Mosquitto
from fleet.proxy import Proxy

TITLE = "MQTT clients on the MicroPython unix port"

MP_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mp")


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


QUICK_ROWS = ("floor", "holdfast", "umqtt_simple", "mqtt_async")


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
    if not wanted and ctx.quick:
        # A smoke run: holdfast, the floor and the two peers the footprint
        # section compares with (each row is some ten processes).
        wanted = list(QUICK_ROWS)
        log("--quick: rows %s only (--peers chooses others)" % ", ".join(wanted))
    rows = [dict(r) for r in ROWS if not wanted or r["id"] in wanted]

    # 1. build: harness, shim, holdfast, peers (fetched now) -> .mpy
    log("compiling the harness and holdfast with mpy-cross")
    compile_tree(MP_SRC, os.path.join(build, "mpy", "harness"),
                 [f for f in os.listdir(MP_SRC) if f.endswith(".py")])
    compile_tree(os.path.join(MP_SRC, "shim"), os.path.join(build, "mpy", "shim"))
    hf_dir = compile_tree(os.path.dirname(FIRMWARE), os.path.join(build, "mpy", "holdfast"),
                          ["holdfast/" + f for f in library()])
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
            r["label"] = PEERS[name]["label"]
            try:
                p = fetch(name, log=log)
                peers[name] = p
                r["version"] = p.version
                r["libdir"] = compile_tree(p.lib, os.path.join(build, "mpy", "peers", name),
                                           p.modules())
                log("peer %s ready (%s)" % (r["label"], p.version))
            except Exception as e:  # the row shows it; the bench goes on
                r["error"] = "fetch: %s" % short(str(e), 120)
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
            for f in library():
                k = "holdfast/" + f[:-3] + ".mpy"
                allf[k] = os.path.getsize(os.path.join(hf_dir, k))
            core = {k: v for k, v in allf.items() if k in files}
            backends = {k: v for k, v in allf.items() if k.startswith("holdfast/durable/")}
            aio = {k: v for k, v in allf.items() if k == "holdfast/aclient.mpy"}
            other = {k: v for k, v in allf.items() if k not in core and k not in backends
                     and k not in aio}
            r["res"]["code_split"] = {"core client": core, "outbox backends": backends,
                                      "asyncio front end": aio, "not loaded by a client": other}



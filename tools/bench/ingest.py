"""Ingest ceiling: readings landed per second by the collector (written,
fsync'ed, then acknowledged), its reader on holdfast's codec against the paho
reader it replaced, with one collector and with two sharing a subscription.

    PYTHONPATH=tools .venv/bin/python -m bench.ingest [--quick]
    PYTHONPATH=tools .venv/bin/python -m bench.ingest --profile [--quick]

--profile drains one case (the codec collector, QoS 1, one collector) with
the collector's thread under cProfile and prints where its CPU goes.

Each case first lets the collectors subscribe (persistent sessions) and stop,
then a fleet of paho devices in 4 processes publishes the readings, which
mosquitto queues for the sessions; then the collectors, each a process of its
own, start and drain the queue. The time is from their start to the last
acknowledgement, so the figure is the collector's and the broker's, not the
publishers' (on 2 cores, paho publishers cannot outrun either). Afterwards the
landing is read back: every (device, s) must be there (duplicates counted).

The paho reader is tools/pipeline/collector.py as it was at PAHO_COMMIT,
loaded from git, with its own defaults (a batch of up to 100, 5 ms idle).
"""
import glob
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types


TITLE = "Ingest: collector ceiling, holdfast codec against paho, 1 and 2 collectors"
PROCS = 4
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAHO_COMMIT = "b689b0c"   # the last collector on paho
# The broker's window to each collector (mosquitto's max_inflight_messages,
# 20 by default), by QoS: how many messages one fsync can cover. mosquitto
# 2.0's CPU per QoS 2 message grows with it (74 us at 100, 215 us at 1000,
# draining 20,000), so QoS 2 gets the smaller one.
INFLIGHT = {1: 1000, 2: 100}


def _publish(host, port, devices, n, qos, tag, start):
    import paho.mqtt.client as mqtt
    clients = []
    for d in devices:
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="%s-%s" % (tag, d))
        c.max_inflight_messages_set(100)
        c.max_queued_messages_set(0)
        c.connect(host, port)
        c.loop_start()
        clients.append((d, c))
    start.wait()
    infos = []
    for s in range(n):
        for d, c in clients:
            payload = '{"d":"%s","b":1,"s":%d,"q":%d,"t":21.5,"u":%d,"w":%d}' % (
                d, s, qos, s, int(time.time() * 1000))
            infos.append(c.publish("holdfast/%s/telemetry" % d, payload, qos=qos))
    for i in infos:
        i.wait_for_publish(300)
    for _, c in clients:
        c.disconnect()
        c.loop_stop()


def _fill(broker, devices, n, qos, tag):
    """Publishes devices x n readings and returns once the broker has them all."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    names = ["%s-%03d" % (tag, i) for i in range(devices)]
    procs = [ctx.Process(target=_publish, args=(broker.host, broker.port, names[k::PROCS], n,
                                                qos, tag, start)) for k in range(PROCS)]
    for p in procs:
        p.start()
    time.sleep(1.0 + devices * 0.01)  # every device connected
    start.set()
    for p in procs:
        p.join(600)


def paho_source():
    """The paho collector's source (PAHO_COMMIT), or None without git history."""
    try:
        return subprocess.run(["git", "-C", ROOT, "show", PAHO_COMMIT + ":tools/pipeline/collector.py"],
                              capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def _collector_class(source):
    if source is None:
        from pipeline.collector import Collector
        return Collector
    mod = types.ModuleType("paho_collector")
    exec(compile(source, "collector.py@" + PAHO_COMMIT, "exec"), mod.__dict__)
    return mod.Collector


def _collect(source, kwargs, acked, cpu, go, done, stop, profile=None):
    """One collector process: starts at go, publishes its acked count, and
    its CPU seconds once done (every collector's count reached), stops at
    stop. With profile (a path), the collector's thread runs under cProfile
    until done, and its stats are written there."""
    Collector = _collector_class(source)
    go.wait()
    c0 = time.process_time()
    col = Collector(**kwargs)
    if profile:
        import cProfile
        prof = cProfile.Profile()
        run = col._run

        def profiled():
            prof.enable()
            try:
                run()
            finally:
                prof.disable()
                prof.dump_stats(profile)
        col._run = profiled
    col.start()
    while not done.wait(0.005):
        acked.value = col.stats()["acked"]
    cpu.value = time.process_time() - c0
    stop.wait()
    col.stop()


def _cpu_s(pid):
    """CPU seconds (user + system) process pid has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run_collectors(source, kwargs_list, total=0, timeout=180, broker_pid=None, profile=None):
    """Starts one process a collector; with total, returns (seconds from their
    start to total acknowledgements, the collectors' CPU seconds, the
    broker's), else returns once all are subscribed. profile: see _collect
    (the first collector's)."""
    ctx = multiprocessing.get_context("fork")
    go, done, stop = ctx.Event(), ctx.Event(), ctx.Event()
    counts = [ctx.Value("q", 0, lock=False) for _ in kwargs_list]
    cpus = [ctx.Value("d", 0.0, lock=False) for _ in kwargs_list]
    procs = [ctx.Process(target=_collect, args=(source, kw, v, c, go, done, stop,
                                                profile if k == 0 else None))
             for k, (kw, v, c) in enumerate(zip(kwargs_list, counts, cpus))]
    for p in procs:
        p.start()
    time.sleep(0.5)    # forked and imported: the time is the collectors' own
    b0 = _cpu_s(broker_pid) if broker_pid else 0.0
    t0 = time.monotonic()
    go.set()
    try:
        while sum(v.value for v in counts) < total:
            if time.monotonic() - t0 > timeout:
                raise RuntimeError("collectors acknowledged %d of %d in %d s"
                                   % (sum(v.value for v in counts), total, timeout))
            if not all(p.is_alive() for p in procs):
                raise RuntimeError("a collector process died")
            time.sleep(0.002)
        t1 = time.monotonic()
        b1 = _cpu_s(broker_pid) if broker_pid else 0.0
        done.set()
        while any(c.value == 0.0 for c in cpus) and all(p.is_alive() for p in procs):
            time.sleep(0.002)
    finally:
        done.set()
        stop.set()
        for p in procs:
            p.join(60)
    return t1 - t0, sum(c.value for c in cpus), b1 - b0


def landed_count(landing):
    seen = {}
    for path in glob.glob(os.path.join(landing, "date=*", "hour=*", "*.jsonl")):
        with open(path) as f:
            for line in f:
                p = json.loads(json.loads(line)["payload"])
                seen[(p["d"], p["s"])] = seen.get((p["d"], p["s"]), 0) + 1
    return seen


def case(broker, path, source, qos, ncol, devices, n, workdir, log, profile=None):
    tag = "%s-q%d-c%d" % (path, qos, ncol)
    landing = os.path.join(workdir, "landing-" + tag)
    kwargs = [dict(host=broker.host, port=broker.port, landing=landing,
                   client_id="ingest-%s-%d" % (tag, k), sub_qos=2, progress_s=0,
                   log=lambda line: None, group="ingest-" + tag if ncol > 1 else None)
              for k in range(ncol)]
    _run_collectors(source, kwargs)               # the sessions, subscribed
    log("%s: %d devices x %d readings queued at QoS %d" % (tag, devices, n, qos))
    _fill(broker, devices, n, qos, tag)
    want = devices * n
    secs, cpu, broker_cpu = _run_collectors(source, kwargs, want, broker_pid=broker.pid,
                                            profile=profile)
    seen = landed_count(landing)
    rate = want / secs
    log("%s: %.0f landed/s (%.2f s; CPU: collectors %.2f s, mosquitto %.2f s)"
        % (tag, rate, secs, cpu, broker_cpu))
    return {"path": path, "qos": qos, "collectors": ncol, "readings": want,
            "landed_per_s": round(rate), "seconds": round(secs, 2),
            "collector_cpu_us": round(cpu / want * 1e6, 1),
            "mosquitto_cpu_us": round(broker_cpu / want * 1e6, 1),
            "missing": want - len(seen), "duplicates": sum(seen.values()) - len(seen)}


def measure(quick, log, profile=None):
    """The table's rows; with profile (a path), only the codec collector's
    QoS 1 case with one collector, profiled (see _collect)."""
    from fleet.mosquitto import Mosquitto
    devices, n = (20, 500) if quick else (100, 500)
    work = tempfile.mkdtemp(prefix="hf-ingest-")
    paho = paho_source()
    paths = [("codec", None)] + ([("paho", paho)] if paho and not profile else [])
    rows = []
    try:
        for qos in (1,) if profile else (1, 2):
            # The queued backlog must all stay (mosquitto drops QoS 1/2
            # messages past 1000 queued per client by default); no log line
            # a packet (the fixture's log_type all costs mosquitto half its
            # CPU at QoS 1).
            broker = Mosquitto(workdir=os.path.join(work, "broker-q%d" % qos),
                               extra_conf="max_queued_messages 0\nmax_inflight_messages %d\n"
                                          "log_type none\n" % INFLIGHT[qos])
            broker.start()
            try:
                for ncol in (1,) if profile else (1, 2):
                    for path, source in paths:
                        rows.append(case(broker, path, source, qos, ncol, devices, n, work, log,
                                         profile))
            finally:
                broker.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _rate(rows, path, qos, ncol):
    for r in rows:
        if (r["path"], r["qos"], r["collectors"]) == (path, qos, ncol):
            return r["landed_per_s"]
    return None


def markdown(rows):
    lines = ["| reader | QoS | collectors | readings | landed/s | codec / paho | 2 collectors / 1 "
             "| collector CPU, µs/reading | mosquitto CPU, µs/reading | missing | duplicates |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        paho = _rate(rows, "paho", r["qos"], r["collectors"])
        one = _rate(rows, r["path"], r["qos"], 1)
        lines.append("| %s | %d | %d | %d | %d | %s | %s | %.1f | %.1f | %d | %d |" % (
            "holdfast codec" if r["path"] == "codec" else "paho (%s)" % PAHO_COMMIT,
            r["qos"], r["collectors"], r["readings"], r["landed_per_s"],
            "%.2f" % (r["landed_per_s"] / paho) if r["path"] == "codec" and paho else "",
            "%.2f" % (r["landed_per_s"] / one) if r["collectors"] > 1 else "",
            r["collector_cpu_us"], r["mosquitto_cpu_us"], r["missing"], r["duplicates"]))
    lines += ["", "Landed: written, fsync'ed, then acknowledged, from a backlog mosquitto "
              "queued for the collectors' sessions (broker window max_inflight_messages %d at "
              "QoS 1, %d at QoS 2). "
              "holdfast codec: the collector now (a batch is what the socket has, up to 1000; "
              "its acks in one write). paho: the collector at %s (batches of up to 100, 5 ms "
              "idle). 2 collectors: one process each, in one shared subscription. Targets: "
              "QoS 1 >= 30,000/s and QoS 2 >= 10,000/s with 1 collector, nothing missing."
              % (INFLIGHT[1], INFLIGHT[2], PAHO_COMMIT)]
    if not any(r["path"] == "paho" for r in rows):
        lines.append("No paho rows: %s is not in this clone's history (a shallow clone?)."
                     % PAHO_COMMIT)
    return "\n".join(lines)


GOALS = {1: 30000, 2: 10000}


def run(ctx):
    rows = measure(ctx.quick, ctx.log)
    targets = [{"name": "collector QoS %d landed/s, 1 collector" % r["qos"],
                "value": "%d/s, %d missing" % (r["landed_per_s"], r["missing"]),
                "goal": ">= %d/s, 0 missing" % GOALS[r["qos"]],
                "pass": r["landed_per_s"] >= GOALS[r["qos"]] and not r["missing"]}
               for r in rows if r["path"] == "codec" and r["collectors"] == 1]
    return {"markdown": markdown(rows), "data": rows, "targets": targets}


def main(argv):
    def log(m):
        print(m, flush=True)
    if "--profile" not in argv:
        print(markdown(measure("--quick" in argv, log)))
        return
    import pstats
    path = os.path.join(tempfile.mkdtemp(prefix="hf-ingest-profile-"), "collector.prof")
    rows = measure("--quick" in argv, log, profile=path)
    print(markdown(rows))
    st = pstats.Stats(path)
    st.sort_stats("tottime").print_stats(25)
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])

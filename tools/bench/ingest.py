"""Ingest ceiling: readings landed per second by the collector (group fsync,
acknowledging only what is on disk), with many devices publishing at once,
beside mosquitto's delivery rate to a subscriber that does nothing.

    PYTHONPATH=tools .venv/bin/python -m bench.ingest [--quick]

Devices are paho clients in 4 processes, each device publishing its readings
as fast as the broker takes them (QoS 1 or 2, up to 100 in flight). The
collector runs in this process; a reading counts as landed once written,
fsync'ed and acknowledged. Afterwards the landing is read back: every
(device, s) must be there (duplicates allowed, counted).
"""
import glob
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time


TITLE = "Ingest: collector ceiling vs mosquitto"
PROCS = 4


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
        i.wait_for_publish(120)
    for _, c in clients:
        c.disconnect()
        c.loop_stop()


def _fleet(broker, devices, n, qos, tag):
    """Starts the publishing processes, waiting on a barrier; returns (go, join)."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    names = ["%s-%03d" % (tag, i) for i in range(devices)]
    procs = [ctx.Process(target=_publish, args=(broker.host, broker.port, names[k::PROCS], n,
                                                qos, tag, start)) for k in range(PROCS)]
    for p in procs:
        p.start()
    time.sleep(1.0 + devices * 0.01)  # every device connected

    def join():
        for p in procs:
            p.join(300)
    return start.set, join


def _wait(count, total, what, log, timeout=120):
    t0 = time.monotonic()
    last = 0
    while count() < total:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError("%s: %d of %d after %d s" % (what, count(), total, timeout))
        if time.monotonic() - last > 5:
            log("  %s: %d of %d" % (what, count(), total))
            last = time.monotonic()
        time.sleep(0.02)
    return time.monotonic()


def mosquitto_rate(broker, devices, n, qos, log):
    import paho.mqtt.client as mqtt
    got = [0]
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="ingest-null-sub")
    sub.on_message = lambda c, u, m: got.__setitem__(0, got[0] + 1)
    ready = threading.Event()
    sub.on_subscribe = lambda *a: ready.set()
    sub.connect(broker.host, broker.port)
    sub.subscribe("holdfast/+/telemetry", qos)
    sub.loop_start()
    ready.wait(10)
    go, join = _fleet(broker, devices, n, qos, "null%d" % qos)
    t0 = time.monotonic()
    go()
    t1 = _wait(lambda: got[0], devices * n, "mosquitto -> null subscriber", log)
    join()
    sub.disconnect()
    sub.loop_stop()
    return devices * n / (t1 - t0)


def collector_rate(broker, devices, n, qos, log, workdir):
    from pipeline.collector import Collector
    landing = os.path.join(workdir, "landing-q%d" % qos)
    col = Collector(broker.host, broker.port, landing, client_id="ingest-collector-%d" % qos,
                    sub_qos=2, progress_s=0, log=lambda line: None).start()
    go, join = _fleet(broker, devices, n, qos, "col%d" % qos)
    t0 = time.monotonic()
    go()
    t1 = _wait(lambda: col.stats()["acked"], devices * n, "collector landed+acked", log)
    join()
    col.stop()
    seen = {}
    for path in glob.glob(os.path.join(landing, "date=*", "hour=*", "*.jsonl")):
        with open(path) as f:
            for line in f:
                p = json.loads(json.loads(line)["payload"])
                seen[(p["d"], p["s"])] = seen.get((p["d"], p["s"]), 0) + 1
    want = devices * n
    missing = want - len(seen)
    dups = sum(seen.values()) - len(seen)
    return want / (t1 - t0), missing, dups


def measure(quick, log):
    from fleet.mosquitto import Mosquitto
    devices, n = (20, 250) if quick else (100, 500)
    work = tempfile.mkdtemp(prefix="hf-ingest-")
    # A burst from many devices: let the broker queue it all (its default
    # drops QoS 1/2 messages past 1000 queued per subscriber).
    broker = Mosquitto(workdir=os.path.join(work, "broker"),
                       extra_conf="max_queued_messages 0\nmax_inflight_messages 100\n")
    broker.start()
    rows = []
    try:
        for qos in (1, 2):
            log("QoS %d: %d devices x %d readings, mosquitto to a null subscriber" % (qos, devices, n))
            ref = mosquitto_rate(broker, devices, n, qos, log)
            log("QoS %d: the same through the collector" % qos)
            rate, missing, dups = collector_rate(broker, devices, n, qos, log, work)
            rows.append({"qos": qos, "devices": devices, "readings": devices * n,
                         "collector_per_s": round(rate), "mosquitto_per_s": round(ref),
                         "ratio": round(rate / ref, 2), "missing": missing, "duplicates": dups})
            log("QoS %d: collector %.0f/s, mosquitto %.0f/s, missing %d" % (qos, rate, ref, missing))
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def markdown(rows):
    lines = ["| QoS | devices | readings | collector, landed/s | mosquitto to a null subscriber, /s "
             "| ratio | missing | duplicates |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %(qos)d | %(devices)d | %(readings)d | %(collector_per_s)d | "
                     "%(mosquitto_per_s)d | %(ratio).2f | %(missing)d | %(duplicates)d |" % r)
    lines += ["", "Landed: written, fsync'ed (one fsync per batch of up to 100 readings or "
              "200 ms) and acknowledged. Target: >= 10,000 readings/s, nothing missing."]
    return "\n".join(lines)


def run(ctx):
    rows = measure(ctx.quick, ctx.log)
    return {"markdown": markdown(rows), "data": rows,
            "targets": [{"name": "collector QoS %d landed/s" % r["qos"],
                         "value": "%d/s (%.2f x mosquitto), %d missing" % (
                             r["collector_per_s"], r["ratio"], r["missing"]),
                         "goal": ">= 10000/s, 0 missing",
                         "pass": r["collector_per_s"] >= 10000 and not r["missing"]} for r in rows]}


if __name__ == "__main__":
    print(markdown(measure("--quick" in sys.argv, lambda m: print(m, flush=True))))

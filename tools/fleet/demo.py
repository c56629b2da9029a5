"""The main job in one command (`make demo`): a private mosquitto, the
collector, an emulated fleet with faults for about a minute, then the PySpark
pipeline and its delivery report.

    PYTHONPATH=tools python -m fleet.demo [--boards 5] [--duration 60] [--seed 7] [--out build/demo]

Exit status 0 only if nothing published at QoS 1 or 2 was lost: no gap in any
device's sequence numbers, and every device's last reading (as the board
itself reports after draining its outbox) arrived.
"""

import argparse
import json
import os
import shutil
import sys
import threading
import time

from fleet.fleet import Fleet, FAULTS
from fleet.mosquitto import Mosquitto
from pipeline.collector import Collector


class Counts:
    """Per-device counts for the progress line (a QoS 0 watcher; the
    collector is what lands the data)."""

    def __init__(self, broker, prefix):
        import paho.mqtt.client as paho
        self.n = {}
        self.lock = threading.Lock()
        c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="demo-progress")
        c.on_connect = lambda cl, u, f, rc, p: cl.subscribe(prefix + "/+/telemetry", 0)
        c.on_message = self._msg
        c.reconnect_delay_set(0.2, 1)
        c.connect(broker.host, broker.port)
        c.loop_start()
        self.c = c

    def _msg(self, c, u, m):
        dev = m.topic.split("/")[1]
        with self.lock:
            self.n[dev] = self.n.get(dev, 0) + 1

    def line(self):
        with self.lock:
            return " ".join("%s:%d" % (d[-2:], n) for d, n in sorted(self.n.items()))

    def stop(self):
        self.c.loop_stop()
        self.c.disconnect()


def run(boards=5, duration=60, seed=7, out="build/demo", interval_ms=200, master="local[*]",
        faults=FAULTS, cluster=False):
    out = os.path.abspath(out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    landing = os.path.join(out, "landing")
    t0 = time.monotonic()
    broker = Mosquitto(workdir=os.path.join(out, "broker"))
    broker.start()
    print("demo: mosquitto on 127.0.0.1:%d" % broker.port, flush=True)
    collector = Collector(broker.host, broker.port, landing, log=lambda line: print(line, flush=True))
    collector.start()
    counts = Counts(broker, "holdfast")
    try:
        with Fleet(os.path.join(out, "fleet"), broker, boards, seed, interval_ms, faults) as fleet:
            fleet.run(duration, progress=lambda: "received " + counts.line())
            last = fleet.drain()
            summary = fleet.summary()
        # The boards are done; let the collector put the tail on disk.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            s = collector.stats()
            if s["pending"] == 0 and s["written"] == s["received"]:
                break
            time.sleep(0.2)
        time.sleep(1)
    finally:
        counts.stop()
        collector.stop()
        broker.close()
    print("demo: fleet done in %.0f s, faults %s; collector %s" % (
        time.monotonic() - t0, summary["faults"], json.dumps(collector.stats())), flush=True)

    from pipeline.batch import run_batch
    from pipeline.cluster import LocalCluster
    from pipeline.session import spark_session
    local = None
    if cluster:
        # CLUSTER=1: a standalone master and two workers on this machine,
        # the same code with --master spark://... (docs/pipeline.md).
        local = LocalCluster(workers=2, cores=1, memory="1g",
                             workdir=os.path.join(out, "spark")).start()
        master = local.url
    try:
        spark = spark_session(master, shuffle_partitions=4 if cluster else None)
        try:
            events = [(int((summary["t0_wall"] + t) * 1000), what) for t, what in summary["events"]]
            res = run_batch(spark, landing, os.path.join(out, "tables"),
                            report=os.path.join(out, "report.md"), events=events,
                            origin_ms=int(summary["t0_wall"] * 1000))
        finally:
            spark.stop()
    finally:
        if local is not None:
            local.stop()
    return check(res, last, summary, out)


def check(res, last, fleet_summary, out):
    """The verdict: per device, no gap, and the tail (the board's own last s)
    arrived."""
    health = {r["device"]: r for r in res["health"]}
    problems = []
    for dev, s in sorted(last.items()):
        h = health.get(dev)
        if h is None:
            problems.append("%s: nothing arrived (board says last s=%d)" % (dev, s))
            continue
        if h["missing"]:
            problems.append("%s: %d lost (%s)" % (dev, h["missing"], h["gaps"]))
        if h["last_seq"] < s:
            problems.append("%s: last s=%d never arrived (last received %d)" % (dev, s, h["last_seq"]))
    verdict = {
        "devices": len(last), "readings": res["readings"], "duplicates_removed": res["duplicates"],
        "lost": sum(h["missing"] for h in res["health"]) + sum(
            max(0, s - health[d]["last_seq"]) for d, s in last.items() if d in health),
        "faults": fleet_summary["faults"], "report": res["report"], "problems": problems,
    }
    with open(os.path.join(out, "verdict.json"), "w") as f:
        json.dump(dict(verdict, events=fleet_summary["events"], last_seq=last), f, indent=1)
    print()
    with open(res["report"]) as f:
        print(f.read())
    print("demo: %d devices, %d readings, %d duplicates removed, lost %d at QoS 1 and 2"
          % (verdict["devices"], verdict["readings"], verdict["duplicates_removed"], verdict["lost"]))
    for p in problems:
        print("demo: LOST " + p)
    print("demo: report %s, tables %s" % (res["report"], os.path.join(out, "tables")))
    return verdict


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boards", type=int, default=5)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--interval-ms", type=int, default=200)
    ap.add_argument("--out", default="build/demo")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--cluster", action="store_true",
                    help="run the pipeline on a Spark standalone master and two workers "
                         "started on 127.0.0.1 (make demo CLUSTER=1)")
    a = ap.parse_args(argv)
    v = run(a.boards, a.duration, a.seed, a.out, a.interval_ms, a.master,
            () if a.no_faults else FAULTS, cluster=a.cluster)
    return 1 if v["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())

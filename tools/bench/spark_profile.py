"""Where a batch run spends its time: Spark's event log, read back per step.

    PYTHONPATH=tools python -m bench.spark_profile --landing DIR [--master local[2]]
        [--runs cold,warm] [--workdir DIR]

Runs the batch pipeline (pipeline.batch.run_batch) on a landing with Spark's
event log on: a small warm-up first (not profiled), then each of `--runs`:
cold (every line parsed from JSON, no compaction), compacting (the first
run with compaction) and warm (over the compacted Parquet only). Every Spark
job carries the name of the pipeline step that started it (session.Step), so
the log says per step: its wall time, how many jobs and tasks it ran, the
tasks' run and CPU time, and what they read, shuffled and wrote. What a
step's wall time holds beyond its jobs is the driver's (planning, listing,
Python). Prints one Markdown table per run.

The peak resident memory of the JVM (the driver, and in local mode the
executors too) and the peak disk under the work directory (outputs,
compacted landing, Spark's scratch) are sampled every second.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from bench.pipeline_timing import Peaks, du, jvm_pid
from pipeline import gen_landing
from pipeline.batch import run_batch
from pipeline.session import Step, spark_session


def _err(msg):
    print("profile: " + msg, file=sys.stderr, flush=True)


def read_event_log(path):
    """[{description, submitted, completed (s), tasks, run_s, cpu_s, gc_s,
    read_mb, shuffle_mb, spill_mb, written_mb}] per job of an event log."""
    jobs, stage_job = {}, {}
    for e in _events(path):
        ev = e.get("Event")
        if ev == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            jobs[e["Job ID"]] = {
                "description": props.get("spark.job.description") or "(no step)",
                "submitted": e["Submission Time"] / 1000.0, "completed": None,
                "tasks": 0, "run_s": 0.0, "cpu_s": 0.0, "gc_s": 0.0, "read_mb": 0.0,
                "shuffle_mb": 0.0, "spill_mb": 0.0, "written_mb": 0.0}
            for sid in e.get("Stage IDs", ()):
                stage_job[sid] = e["Job ID"]
        elif ev == "SparkListenerJobEnd":
            if e["Job ID"] in jobs:
                jobs[e["Job ID"]]["completed"] = e["Completion Time"] / 1000.0
        elif ev == "SparkListenerTaskEnd":
            j = jobs.get(stage_job.get(e["Stage ID"]))
            m = e.get("Task Metrics")
            if j is None or not m:
                continue
            j["tasks"] += 1
            j["run_s"] += m.get("Executor Run Time", 0) / 1000.0
            j["cpu_s"] += m.get("Executor CPU Time", 0) / 1e9
            j["gc_s"] += m.get("JVM GC Time", 0) / 1000.0
            j["read_mb"] += m.get("Input Metrics", {}).get("Bytes Read", 0) / 1e6
            j["shuffle_mb"] += m.get("Shuffle Write Metrics", {}).get(
                "Shuffle Bytes Written", 0) / 1e6
            j["spill_mb"] += m.get("Disk Bytes Spilled", 0) / 1e6
            j["written_mb"] += m.get("Output Metrics", {}).get("Bytes Written", 0) / 1e6
    return [jobs[k] for k in sorted(jobs)]


def _events(path):
    """The events of a log: a file, or Spark 4's directory of rolled files
    (eventlog_v2_<app>/events_<n>_<app>), in order."""
    def index(name):
        parts = name.split("_")
        return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0
    files = ([os.path.join(path, n) for n in sorted(os.listdir(path), key=index)
              if n.startswith("events_")] if os.path.isdir(path) else [path])
    for name in files:
        with open(name) as f:
            for line in f:
                yield json.loads(line)


def _union_s(intervals):
    """Seconds covered by [(start, end)] (jobs of one step overlap)."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _row(rows, step):
    if step not in rows:
        rows[step] = {"step": step, "wall_s": 0.0, "jobs": 0, "job_s": 0.0, "tasks": 0,
                      "run_s": 0.0, "cpu_s": 0.0, "gc_s": 0.0, "read_mb": 0.0, "shuffle_mb": 0.0,
                      "spill_mb": 0.0, "written_mb": 0.0, "_iv": []}
    return rows[step]


def per_step(jobs, steps, t0, t1):
    """One row per step of the run between t0 and t1: the step's wall time
    (steps: [(what, start, end)]) and its jobs' figures."""
    rows = {}
    for what, a, b in steps:
        if a >= t0 and b <= t1:
            _row(rows, what)["wall_s"] += b - a
    for j in jobs:
        if j["completed"] is None or not t0 <= j["submitted"] <= t1:
            continue
        r = _row(rows, j["description"])
        r["jobs"] += 1
        r["_iv"].append((j["submitted"], j["completed"]))
        for k in ("tasks", "run_s", "cpu_s", "gc_s", "read_mb", "shuffle_mb", "spill_mb",
                  "written_mb"):
            r[k] += j[k]
    out = []
    for r in rows.values():
        r["job_s"] = _union_s(r.pop("_iv"))
        out.append(r)
    return out


def markdown(rows, total_s):
    md = ["| step | wall s | jobs | in jobs s | tasks | task run s | task CPU s | GC s "
          "| read MB | shuffle MB | spill MB | written MB |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append("| %s | %.1f | %d | %.1f | %d | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f |"
                  % (r["step"], r["wall_s"], r["jobs"], r["job_s"], r["tasks"], r["run_s"],
                     r["cpu_s"], r["gc_s"], r["read_mb"], r["shuffle_mb"], r["spill_mb"],
                     r["written_mb"]))
    md.append("| **the run** | %.1f | %d | | %d | %.1f | %.1f | %.1f | | | | |" % (
        total_s, sum(r["jobs"] for r in rows), sum(r["tasks"] for r in rows),
        sum(r["run_s"] for r in rows), sum(r["cpu_s"] for r in rows),
        sum(r["gc_s"] for r in rows)))
    return "\n".join(md)


def profile(landing, workdir, master="local[2]", runs=("cold", "warm"), driver_memory="3g"):
    """{run: (rows, seconds)}, and the peaks (MB): JVM resident, disk."""
    logdir = os.path.join(workdir, "eventlog")
    os.makedirs(logdir, exist_ok=True)
    spark = spark_session(master, app="holdfast-pipeline-profile", driver_memory=driver_memory,
                          conf={"spark.eventLog.enabled": "true",
                                "spark.eventLog.dir": "file://" + logdir,
                                "spark.eventLog.compress": "false",
                                "spark.local.dir": os.path.join(workdir, "scratch")})
    peaks = Peaks(jvm_pid(), workdir)
    Step.record = steps = []
    spans = {}
    try:
        warm = os.path.join(workdir, "warmup")
        gen_landing.generate(os.path.join(warm, "landing"), 20000, devices=100, seed=99)
        for _ in range(2):
            run_batch(spark, os.path.join(warm, "landing"), os.path.join(warm, "out"))
        shutil.rmtree(warm, ignore_errors=True)
        out = os.path.join(workdir, "out")
        for name in runs:
            _err("run %s" % name)
            t0 = time.time()
            s = run_batch(spark, landing, out, compaction=name != "cold")
            spans[name] = (t0, time.time(), s["sources"])
        app = spark.sparkContext.applicationId
    finally:
        Step.record = None
        peaks.stop()
        rss = peaks.rss_peak_mb()
        spark.stop()
    with open(os.path.join(workdir, "steps.json"), "w") as f:
        json.dump({"steps": steps, "spans": spans}, f)
    log = [os.path.join(logdir, f) for f in os.listdir(logdir) if app in f][0]
    jobs = read_event_log(log)
    result = {name: (per_step(jobs, steps, a, b), b - a, src) for name, (a, b, src) in spans.items()}
    return result, {"jvm_rss_mb": rss, "disk_mb": peaks.disk / 1e6}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--landing", required=True, help="a landing (pipeline.gen_landing)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", default="cold,warm",
                    help="comma-separated: cold, compacting, warm (in that order)")
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--workdir", default=None, help="default: a temporary directory, removed")
    a = ap.parse_args(argv)
    workdir = a.workdir or tempfile.mkdtemp(prefix="hf-profile-")
    compacted = os.path.join(a.landing, "_compacted")
    had_compacted = os.path.isdir(compacted)
    load = os.getloadavg()[0]
    landing_mb = du(a.landing) / 1e6
    try:
        result, peaks = profile(a.landing, workdir, a.master,
                                [r for r in a.runs.split(",") if r], a.driver_memory)
        compacted_mb = du(compacted) / 1e6 if os.path.isdir(compacted) else 0.0
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        if not had_compacted:
            shutil.rmtree(compacted, ignore_errors=True)
    for name, (rows, secs, src) in result.items():
        print("#### %s run: %.1f s (%s)" % (name, secs, ", ".join(
            "%s %s" % (k, v) for k, v in sorted(src.items()) if k != "hours_compacted_now")))
        print()
        print(markdown(rows, secs))
        print()
    print("Peak JVM resident memory %.0f MB; peak disk of the work directory (output, "
          "event log, Spark scratch) %.0f MB; landing %.0f MB of JSON%s. Load average %.1f "
          "at start, %.1f at the end."
          % (peaks["jvm_rss_mb"] or 0, peaks["disk_mb"], landing_mb,
             " and %.0f MB compacted" % compacted_mb if compacted_mb else "", load,
             os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

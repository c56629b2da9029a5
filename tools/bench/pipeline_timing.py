"""Benchmark of the batch pipeline: records/s at 1M and 4M landing records.

    PYTHONPATH=tools python -m bench.pipeline_timing [--sizes 1000000,4000000] [--master local[2]]

For each size: generate a landing with pipeline.gen_landing (duplicates,
gaps, late data; not timed), run the batch pipeline (pipeline.batch
run_batch: parse, reject, de-duplicate, write readings, health, report and
plots) on one SparkSession, and time it.  A small warm-up run first keeps
JVM start and JIT out of the first measurement.  Prints a Markdown table
(stdout) and the ratio of the times; progress goes to stderr.

The pipeline's JVM CPU seconds are shown too (Linux): on a shared machine
the wall time depends on the load, the CPU time much less.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

from pipeline import gen_landing
from pipeline.batch import run_batch
from pipeline.session import spark_session


def _err(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def _ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def jvm_pid():
    """pid of the JVM this Python process started (Linux), or None."""
    if not os.path.isdir("/proc"):
        return None
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                exe = f.read().split(b"\0")[0]
        except OSError:
            continue
        if not exe.endswith(b"java"):
            continue
        p = pid
        for _ in range(6):
            p = _ppid(p)
            if p == me:
                return pid
            if not p:
                break
    return None


def cpu_seconds(pid):
    if pid is None:
        return None
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def du(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except FileNotFoundError:
                pass   # a table's temporary file, gone between the listing and here
    return total


def spark_readings_per_device(spark, landing):
    """Spark doing only DuckDB's work (duckdb_ref): distinct readings per
    device of the valid landing lines; ({device: n}, seconds)."""
    from pyspark.sql import functions as F
    from pipeline.batch import size_splits
    from pipeline.landing import landing_glob, parse_landing, read_landing
    t = time.monotonic()
    size_splits(spark)
    rows = (parse_landing(read_landing(spark, [landing_glob(landing)])).where("ok")
            .groupBy("device").agg(F.count_distinct("boot", "seq").alias("n")).collect())
    return {r["device"]: r["n"] for r in rows}, time.monotonic() - t


def check_truth(summary, truth):
    if summary["missing"] != truth["missing"] or \
            summary["duplicates"] != truth["duplicates"]:
        raise SystemExit("bench: pipeline disagrees with the generator's truth (missing %d "
                         "vs %d, duplicates %d vs %d)"
                         % (summary["missing"], truth["missing"], summary["duplicates"],
                            truth["duplicates"]))


def same_results(summary):
    """What two runs over one landing must agree on."""
    keys = ("lines", "valid", "rejected", "duplicates", "readings", "missing",
            "qos2_duplicates", "health", "qos", "qos2_breaks")
    return {k: summary[k] for k in keys}


class Peaks:
    """Samples the disk under a directory every second; the JVM's resident
    memory peak is its own (VmHWM)."""

    def __init__(self, pid, root):
        import threading
        self.pid, self.root = pid, root
        self.disk = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(1.0):
            self.disk = max(self.disk, du(self.root))

    def rss_peak_mb(self):
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024.0
        except (OSError, TypeError, ValueError):
            pass
        return None

    def stop(self):
        self._stop.set()
        self._t.join()
        self.disk = max(self.disk, du(self.root))


def parse_size(spec, devices):
    """"N" (`devices` boards, a reading every 10 s) or "N:BOARDS:PERIOD_S"
    (10000000:1000:9 is a day of a 1,000-board fleet at a reading every
    9 s) -> (records, boards, period ms)."""
    parts = [p for p in str(spec).split(":")]
    n = int(parts[0])
    boards = int(parts[1]) if len(parts) > 1 else devices
    period_ms = int(float(parts[2]) * 1000) if len(parts) > 2 else 10000
    return n, boards, period_ms


def run(sizes, master, devices, workdir, keep, driver_memory):
    """Per size (see parse_size): the cold, first compacting and warm runs,
    DuckDB and Spark on DuckDB's work, the JVM's resident peak so far and
    the size's peak disk (landing, compacted copy, output, Spark scratch)."""
    _err("starting Spark (%s)" % master)
    scratch = os.path.join(workdir, "scratch")
    spark = spark_session(master, app="holdfast-pipeline-bench",
                          driver_memory=driver_memory,
                          conf={"spark.local.dir": scratch})
    jvm = jvm_pid()
    results = []
    try:
        warm_dir = os.path.join(workdir, "warmup")
        gen_landing.generate(os.path.join(warm_dir, "landing"), 20000,
                             devices=devices, seed=99)
        _err("warm-up runs (20000 records, compacting, then from Parquet; not timed)")
        for _ in range(2):
            run_batch(spark, os.path.join(warm_dir, "landing"), os.path.join(warm_dir, "out"))
        shutil.rmtree(warm_dir, ignore_errors=True)
        for spec in sizes:
            n, boards, period_ms = parse_size(spec, devices)
            d = os.path.join(workdir, "n%d" % n)
            landing = os.path.join(d, "landing")
            t = time.monotonic()
            _err("generating %d records (%d boards, a reading every %g s)"
                 % (n, boards, period_ms / 1000.0))
            truth = gen_landing.generate(landing, n, devices=boards, seed=1, period_ms=period_ms,
                                         malformed=10, progress=_err)
            _err("generated %d lines in %.1fs" % (truth["lines"],
                                                  time.monotonic() - t))
            size = du(landing)
            peaks = Peaks(jvm, workdir)
            out = os.path.join(d, "out")
            # Cold: every line parsed from JSON, nothing written under the
            # landing (the batch without compaction).
            c0 = cpu_seconds(jvm)
            t = time.monotonic()
            summary = run_batch(spark, landing, out, compaction=False)
            secs = time.monotonic() - t
            c1 = cpu_seconds(jvm)
            check_truth(summary, truth)
            # The first run with compaction parses the closed hours (all of
            # a generated landing's) into Parquet, then reads that; the
            # warm rerun reads only the Parquet.
            t = time.monotonic()
            first = run_batch(spark, landing, out)
            first_secs = time.monotonic() - t
            c2 = cpu_seconds(jvm)
            t = time.monotonic()
            warm = run_batch(spark, landing, out)
            warm_secs = time.monotonic() - t
            c3 = cpu_seconds(jvm)
            if warm["sources"]["json_files_read"] or not warm["sources"]["hours_from_parquet"]:
                raise SystemExit("bench: the warm run parsed JSON (%r)" % warm["sources"])
            for other in (first, warm):
                if same_results(other) != same_results(summary):
                    raise SystemExit("bench: the batch over compacted Parquet disagrees with "
                                     "the batch over JSON")
            # The reference without Spark: the same distinct readings per
            # device from DuckDB, checked equal.
            from pipeline import duckdb_ref
            ref, ref_secs = duckdb_ref.readings_per_device(landing)
            spark_counts = {r["device"]: r["received"] for r in summary["health"]}
            if ref != spark_counts:
                raise SystemExit("bench: DuckDB and Spark disagree on the readings per device "
                                 "(%d vs %d devices, %d vs %d readings)"
                                 % (len(ref), len(spark_counts), sum(ref.values()),
                                    sum(spark_counts.values())))
            same, spark_ref_secs = spark_readings_per_device(spark, landing)
            if same != ref:
                raise SystemExit("bench: Spark's distinct readings per device disagree with "
                                 "DuckDB's")
            peaks.stop()
            results.append({"records": truth["lines"], "mb": size / 1e6, "boards": boards,
                            "period_s": period_ms / 1000.0,
                            "jvm_rss_peak_mb": peaks.rss_peak_mb(),
                            "disk_peak_mb": peaks.disk / 1e6,
                            "seconds": secs, "first_compacted_seconds": first_secs,
                            "warm_seconds": warm_secs, "duckdb_seconds": ref_secs,
                            "spark_ref_seconds": spark_ref_secs,
                            "cpu": None if c0 is None or c1 is None else c1 - c0,
                            "warm_cpu": None if c2 is None or c3 is None else c3 - c2})
            _err("%d records: %.1fs from JSON, %.1fs compacting, %.1fs warm; DuckDB %.2fs, "
                 "Spark on its work %.2fs; warm / DuckDB %.2fx (load average %.1f)"
                 % (truth["lines"], secs, first_secs, warm_secs, ref_secs, spark_ref_secs,
                    warm_secs / ref_secs, os.getloadavg()[0]))
            if not keep:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        spark.stop()
    return results


def stream_lag(spark, workdir, seconds=40, rate=200, roll_s=1.0, trigger="0.5 seconds",
               warmup_s=10, devices=20, source="files"):
    """Streaming lag, reading -> readings/: a writer lands `rate` readings/s
    as the collector does (lines with rx_ms = now into a hidden file, renamed
    every roll_s), the stream follows with `trigger` and `source` (the bytes
    source takes a line once written, the files source once its file is
    renamed); per reading, the time
    from its rx_ms to the end of the micro-batch that wrote it. A stream
    over a small landing first, and the first warmup_s of this one, are left
    out (JVM start and JIT, as the batch benchmark's warm-up run). Returns
    p50/p95/max in s and the count."""
    import bisect
    import json
    import threading
    from pyspark.sql import functions as F
    from pipeline.session import local_path
    from pipeline.stream import run_stream
    warm = os.path.join(workdir, "warmup")
    for i in range(3):
        gen_landing.generate(os.path.join(warm, "landing"), 2000, devices=devices, seed=i,
                             gen_id=i + 1)
        run_stream(spark, os.path.join(warm, "landing"), os.path.join(warm, "out"),
                   source=source)
    landing = os.path.join(workdir, "landing")
    out = os.path.join(workdir, "out")
    d = os.path.join(landing, "date=2026-01-01", "hour=00")   # the partition is not read
    os.makedirs(d, exist_ok=True)
    stop, lags, err = threading.Event(), [], []
    t_start = time.time()

    def stream():
        try:
            run_stream(spark, landing, out, follow=True, interval=trigger, stop_event=stop,
                       source=source)
        except Exception as e:
            err.append(e)

    th = threading.Thread(target=stream)
    th.start()
    seq, k = 0, 0
    end = time.monotonic() + warmup_s + seconds
    try:
        while time.monotonic() < end and not err:
            tmp = os.path.join(d, ".part-9-%d.jsonl.inprogress" % k)
            roll_at = time.monotonic() + roll_s
            with open(tmp, "w") as f:
                while time.monotonic() < roll_at:
                    now = int(time.time() * 1000)
                    for _ in range(max(1, int(rate / 20))):
                        dev = "dev-%02d" % (seq % devices)
                        p = json.dumps({"d": dev, "b": 1, "s": seq, "q": 1, "w": now},
                                       separators=(",", ":"))
                        f.write(json.dumps({"topic": "holdfast/%s/telemetry" % dev, "qos": 1,
                                            "retain": False, "dup": False, "rx_ms": now,
                                            "payload": p}, separators=(",", ":")) + "\n")
                        seq += 1
                    f.flush()
                    time.sleep(0.05)
            os.rename(tmp, os.path.join(d, "part-9-%d.jsonl" % k))
            k += 1
        # Let the stream take the last file in before stopping it.
        want = seq
        for _ in range(600):
            if err or os.path.isdir(os.path.join(out, "readings")) and \
                    spark.read.parquet(os.path.join(out, "readings")).count() >= want:
                break
            time.sleep(0.5)
    finally:
        stop.set()
        th.join(120)
    if err:
        raise err[0]
    # A reading is in readings/ at the end of the micro-batch that wrote
    # it: the first batch marker (touched after the batch's write) not
    # older than the reading's Parquet file. Read after the run, so the
    # measuring adds no job to the micro-batches.
    marks = os.path.join(out, "_batches")
    ends = sorted(os.stat(os.path.join(marks, f)).st_mtime for f in os.listdir(marks)
                  if not f.startswith("."))
    mtime = {}
    for r in (spark.read.parquet(os.path.join(out, "readings"))
              .select("rx_ms", F.col("_metadata.file_path").alias("f")).collect()):
        if r["rx_ms"] < (t_start + warmup_s) * 1000:
            continue
        if r["f"] not in mtime:
            mtime[r["f"]] = os.stat(local_path(r["f"])).st_mtime
        end = ends[bisect.bisect_left(ends, mtime[r["f"]])]
        lags.append(end - r["rx_ms"] / 1000.0)
    lags.sort()

    def q(p):
        return lags[min(len(lags) - 1, int(p * len(lags)))] if lags else None

    return {"p50": q(0.5), "p95": q(0.95), "max": lags[-1] if lags else None,
            "readings": len(lags), "rate": rate, "roll_s": roll_s, "trigger": trigger,
            "source": source}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000,10000000:1000:9",
                    help="comma-separated record counts, each N or N:BOARDS:PERIOD_S "
                         "(default: 1M from 100 boards, and a day of 1,000 boards at a "
                         "reading every 9 s)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--workdir", default=None,
                    help="where landings and outputs go (default: a "
                         "temporary directory, removed)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the generated landings and outputs")
    ap.add_argument("--stream-lag", action="store_true",
                    help="measure the streaming lag instead (stream_lag())")
    ap.add_argument("--roll-s", type=float, default=1.0,
                    help="--stream-lag: how often the landing file is rolled (the "
                         "collector's --roll-s)")
    ap.add_argument("--trigger", default="0.5 seconds",
                    help="--stream-lag: the stream's trigger (pipeline --interval)")
    ap.add_argument("--source", choices=("bytes", "files"), default="bytes",
                    help="--stream-lag: the stream's source (pipeline --stream-source)")
    ap.add_argument("--stream-partitions", type=int, default=2,
                    help="--stream-lag: shuffle partitions, so state store partitions")
    a = ap.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if a.stream_lag:
        workdir = tempfile.mkdtemp(prefix="hf-stream-lag-")
        spark = spark_session(a.master, app="holdfast-stream-lag", driver_memory="1g",
                              shuffle_partitions=a.stream_partitions)
        try:
            r = stream_lag(spark, workdir, roll_s=a.roll_s, trigger=a.trigger, source=a.source)
        finally:
            spark.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        print("Streaming lag (%s source, %s, %d readings/s, roll %.1f s, trigger %s, "
              "%d partitions), after a warm-up: p50 %.2f s, p95 %.2f s, max %.2f s over %d readings"
              % (r["source"], a.master, r["rate"], r["roll_s"], r["trigger"],
                 a.stream_partitions, r["p50"],
                 r["p95"], r["max"], r["readings"]))
        if load is not None:
            print("Machine: %d CPU(s), load average %.1f at start." % (os.cpu_count() or 0, load))
        return 0
    sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    own = a.workdir is None
    workdir = a.workdir or tempfile.mkdtemp(prefix="hf-pipeline-bench-")
    os.makedirs(workdir, exist_ok=True)
    try:
        results = run(sizes, a.master, a.devices, workdir, a.keep,
                      a.driver_memory)
    finally:
        if own and not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("### Pipeline batch benchmark (%s, %d devices)" % (a.master,
                                                             a.devices))
    print()
    print("| records | landing MB | cold s (JSON) | records/s | cold JVM CPU s | cold / DuckDB "
          "| first run compacting s | warm s (Parquet) | warm JVM CPU s | warm / DuckDB | DuckDB s "
          "| Spark on DuckDB's work s | that / DuckDB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        cpu, warm_cpu = ("-" if v is None else "%.0f" % v for v in (r["cpu"], r["warm_cpu"]))
        print("| %d | %.0f | %.1f | %.0f | %s | %.1fx | %.1f | %.1f | %s | %.1fx | %.2f | %.2f "
              "| %.1fx |"
              % (r["records"], r["mb"], r["seconds"], r["records"] / r["seconds"], cpu,
                 r["seconds"] / r["duckdb_seconds"], r["first_compacted_seconds"],
                 r["warm_seconds"], warm_cpu, r["warm_seconds"] / r["duckdb_seconds"],
                 r["duckdb_seconds"], r["spark_ref_seconds"],
                 r["spark_ref_seconds"] / r["duckdb_seconds"]))
    print()
    if len(results) >= 2:
        a0, a1 = results[0], results[-1]
        print("Time ratio %d/%d records: %.2f (linear scaling: %.2f)."
              % (a1["records"], a0["records"], a1["seconds"] / a0["seconds"],
                 a1["records"] / float(a0["records"])))
    if load is not None:
        print("Machine: %d CPU(s), load average %.1f at start (a shared "
              "machine slows the wall time)." % (os.cpu_count() or 0, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())

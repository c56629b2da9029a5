"""The batch pipeline: landing -> rejected, readings, health, report, in one
pass over what is there now."""

import os
import time
from concurrent.futures import ThreadPoolExecutor

from pipeline.dedup import BAD_COLS, READING_COLS, aggregate_landing
from pipeline.health import (HEALTH_SCHEMA, QOS_SCHEMA, Figures, device_health,
                             qos2_duplicate_flag, qos2_duplicates, qos_health)
from pipeline import compact
from pipeline import plots as plotting  # matplotlib only when a plot is drawn
from pipeline.landing import landing_glob, quarantine_reasons, rejected_rows
from pipeline.report import write_report
from pipeline.session import Step, join, local_path, log, write_atomically


def _default_report(output):
    local = local_path(output)
    if local is not None:
        return os.path.join(local, "report.md")
    return "pipeline-report.md"


class _Plots:
    """The report's plots, each drawn on a thread of its own as soon as its
    data is there: matplotlib is the driver's Python (about 3 s a run at
    1M records), which would otherwise start after the last Spark job and
    leave the cores idle; drawn beside the health's jobs and the table
    writes, it takes a core they leave. One thread, so pyplot is used from
    it alone; a drawing that fails raises from names()."""

    def __init__(self, rdir, stem):
        self.rdir, self.stem = rdir, stem
        self.pool = ThreadPoolExecutor(1)
        self.drawn = {}
        self.pool.submit(plotting.pyplot)       # matplotlib's import, a second

    def draw(self, kind, fn, data):
        """fn(data, path) on the thread; no plot when data is None."""
        if data is not None:
            name = "%s-%s.png" % (self.stem, kind)
            self.drawn[kind] = (name, self.pool.submit(
                fn, data, os.path.join(self.rdir, name)))

    def names(self):
        """(latency, delivery, timeline) file names, None where no data."""
        for _, done in self.drawn.values():
            done.result()
        return tuple(self.drawn[k][0] if k in self.drawn else None
                     for k in ("latency", "delivery", "timeline"))

    def close(self):
        self.pool.shutdown()


def size_splits(spark):
    """Input splits a few per core: with Spark's default (128 MB splits) a
    landing of a few hundred MB is 2-3 tasks, and a core idles for a third
    of the parse."""
    spark.conf.set("spark.sql.files.minPartitionNum",
                   str(3 * spark.sparkContext.defaultParallelism))


def run_batch(spark, input_uri, output_uri, report=None, mode="batch",
              write_readings=True, write_rejected=True, plots=True, events=None,
              compaction=True, now_ms=None, origin_ms=None):
    """The batch pipeline; returns a summary dict (counts, paths). events:
    [(wall-clock ms, what)] of injected faults, marked on the timeline and
    used to name the cause of a QoS 2 duplicate; origin_ms: the wall-clock
    ms the timeline counts from (the fleet's start, whose log times the
    faults), else its first reading.

    With `compaction`, the landing's closed hours are parsed once into
    Parquet (pipeline.compact) and read from there; without, every line is
    parsed from JSON and nothing is written under the landing. now_ms: the
    clock that says which hours are closed (tests).

    One scan of the landing: parse, de-duplicate and set the rejected lines
    apart in one aggregate (dedup.aggregate_landing), cached once (it is
    the size of the readings, not of the landing); every table, figure and
    plot is computed from that cache, each small table once.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    t0 = time.monotonic()
    size_splits(spark)
    with Step("listing the landing%s" % (" and compacting its closed hours"
                                         if compaction else "")):
        sources = compact.prepare(spark, input_uri, compaction, now_ms)
        parsed = sources.parsed(spark)
    log("reading %(hours_from_parquet)d hour(s) of the landing from Parquet and "
        "%(json_files_read)d JSON file(s)" % sources.summary())
    if parsed is None:
        raise SystemExit("pipeline: no landing files under %s (looked for %s)"
                         % (input_uri, landing_glob(input_uri)))
    with Step("parsing and de-duplicating landing %s" % input_uri):
        agg = aggregate_landing(parsed).persist(StorageLevel.MEMORY_AND_DISK)
        q2 = qos2_duplicate_flag()
        c = agg.agg(
            F.sum(F.when(F.col("ok"), F.col("copies"))).alias("valid"),
            F.count(F.when(F.col("ok"), 1)).alias("readings"),
            F.count(F.when(~F.col("ok"), 1)).alias("rejected"),
            F.sum(F.when(F.col("ok") & q2, F.col("copies") - 1)).alias("q2dup"),
            F.count(F.when(F.col("ok") & F.col("collision"), 1)).alias("collisions"),
            F.sum(F.when(F.col("ok") & F.col("collision"), F.col("copies") - 1)).alias("collided"),
        ).collect()[0]
        n_ok, n_read, n_bad = c["valid"] or 0, c["readings"], c["rejected"]
        log("%d landing lines: %d valid, %d rejected; %d readings after "
            "removing %d duplicates" % (n_ok + n_bad, n_ok, n_bad, n_read,
                                        n_ok - n_read))
    dedup = agg.where("ok").drop("ok", "bad_id", *BAD_COLS)
    rejected = rejected_rows(agg.where(~F.col("ok")))
    # Few rejected lines (the usual case): collected once (no job when there
    # are none), and both written and reported from that.
    rej = None
    if n_bad <= 10000:
        rej = [r.asDict() for r in rejected.collect()] if n_bad else []

    # Each table is written beside the last run's and then put in its place
    # (session.write_atomically): a run that fails leaves the last good one.
    def write_tables():
        if write_rejected:
            with Step("writing rejected"):
                df = rejected if rej is None else spark.createDataFrame(rej, rejected.schema)
                write_atomically(spark, join(output_uri, "rejected"),
                                 lambda uri: df.coalesce(1).write.parquet(uri))
        if write_readings:
            with Step("writing readings (Parquet by day, device)"):
                write_atomically(spark, join(output_uri, "readings"), lambda uri: (
                    dedup.select(*READING_COLS).write.partitionBy("day", "device")
                    .parquet(uri)))

    def write_small(health_rows, qos_rows):
        with Step("writing health and qos"):
            for name, rows, schema in (("health", health_rows, HEALTH_SCHEMA),
                                       ("qos", qos_rows, QOS_SCHEMA)):
                df = spark.createDataFrame(rows, schema).coalesce(1)
                write_atomically(spark, join(output_uri, name),
                                 lambda uri: df.write.parquet(uri))

    # The table writes run beside the health's and the report's jobs, from
    # another thread: those are chains of small jobs, each mostly the
    # driver's planning and scheduling, which leaves a core free for the
    # writes' tasks.
    report = report or _default_report(output_uri)
    rdir = os.path.dirname(os.path.abspath(report))
    os.makedirs(rdir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(report))[0]
    drawing = _Plots(rdir, stem) if plots else None
    pool = ThreadPoolExecutor(1)
    try:
        writes = pool.submit(write_tables)
        with Step("computing health"):
            fig = Figures(dedup)
            if drawing:
                drawing.draw("latency", plotting.plot_latency, plotting.latency_data(fig.plot))
            health_rows = device_health(dedup, fig)
            if drawing:
                drawing.draw("delivery", plotting.plot_delivery, health_rows or None)
            qos_rows = qos_health(fig, health_rows)
            small = pool.submit(write_small, health_rows, qos_rows)
            q2_rows = qos2_duplicates(dedup, c["q2dup"] or 0, events)
        if drawing:
            with Step("plots"):
                drawing.draw("timeline", lambda data, path: plotting.plot_timeline(
                    data, events, path, origin_ms), plotting.timeline_data(dedup, health_rows))
        with Step("report"):
            if rej is not None:       # small: counted in Python
                rej.sort(key=lambda r: (r["file"] or "", r["line"] or ""))
                by_reason = {}
                for r in rej:
                    by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + 1
                rej_reasons = sorted(([k, v] for k, v in by_reason.items()),
                                     key=lambda kv: (-kv[1], kv[0]))
                seen = set()
                rej_examples = []
                for r in rej:
                    if r["reason"] not in seen and len(rej_examples) < 10:
                        seen.add(r["reason"])
                        rej_examples.append(r)
            else:
                rej_reasons = [[r["reason"], r["count"]] for r in
                               rejected.groupBy("reason").count()
                               .orderBy(F.desc("count"), "reason").collect()]
                rej_examples = [r.asDict() for r in
                                rejected.orderBy("file", "line")
                                .dropDuplicates(["reason"]).limit(10).collect()]
            quarantine = quarantine_reasons(spark, input_uri)
            no_w_devices = [r["device"] for r in health_rows
                            if r["latency_samples"] < r["received"]]
            latency_png = delivery_png = timeline_png = None
            if drawing:
                latency_png, delivery_png, timeline_png = drawing.names()
            summary = {
                "mode": mode, "input": input_uri, "output": output_uri,
                "lines": n_ok + n_bad, "valid": n_ok, "rejected": n_bad,
                "duplicates": n_ok - n_read - (c["collided"] or 0), "readings": n_read,
                "key_collisions": c["collisions"], "collided_readings": c["collided"] or 0,
                "devices": len(health_rows),
                "quarantined": (sum(c for _, c in quarantine)
                                if quarantine is not None else None),
                "no_w_readings": sum(r["received"]
                                     - r["latency_samples"] for r in health_rows),
                "negative_latency": sum(r["negative_latency"]
                                        for r in health_rows),
                "missing": sum(r["missing"] for r in health_rows),
                "qos2_duplicates": c["q2dup"] or 0,
                "sources": sources.summary(),
            }
            write_report(report, summary, health_rows, qos_rows, rej_reasons,
                         rej_examples, quarantine, no_w_devices, latency_png,
                         delivery_png, timeline_png, q2_rows)
            log("report: %s" % report)
        writes.result()
        small.result()
    finally:
        pool.shutdown()
        if drawing:
            drawing.close()
    agg.unpersist()
    summary.update(report=report, seconds=time.monotonic() - t0,
                   health=health_rows, qos=qos_rows, qos2_breaks=q2_rows)
    log("%s pass done in %.1fs" % (mode if mode == "batch" else "final batch",
                                   summary["seconds"]))
    return summary

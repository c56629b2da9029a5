"""The batch pipeline: landing -> rejected, readings, health, report, in one
pass over what is there now."""

import os
import time

from pipeline.dedup import READING_COLS, deduplicate
from pipeline.health import device_health, qos_health
from pipeline.landing import (landing_glob, parse_landing, quarantine_reasons, read_landing,
                              rejected_rows)
from pipeline.report import write_report
from pipeline.session import Step, join, local_path, log


def _default_report(output):
    local = local_path(output)
    if local is not None:
        return os.path.join(local, "report.md")
    return "pipeline-report.md"


def run_batch(spark, input_uri, output_uri, report=None, mode="batch",
              write_readings=True, write_rejected=True, plots=True, events=None):
    """The batch pipeline; returns a summary dict (counts, paths). events:
    [(wall-clock ms, what)] of injected faults, marked on the timeline."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    t0 = time.monotonic()
    landing = read_landing(spark, input_uri)
    if landing is None:
        raise SystemExit("pipeline: no landing files under %s (looked for %s)"
                         % (input_uri, landing_glob(input_uri)))
    cached = []

    def keep(df):
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(df)
        return df

    with Step("parsing landing %s" % input_uri):
        parsed = keep(parse_landing(landing))
        counts = parsed.groupBy("ok").count().collect()
        n_ok = sum(r["count"] for r in counts if r["ok"])
        n_bad = sum(r["count"] for r in counts if not r["ok"])
        log("%d landing lines: %d valid, %d rejected" % (n_ok + n_bad, n_ok,
                                                         n_bad))
    rejected = keep(rejected_rows(parsed))
    if write_rejected:
        with Step("writing rejected"):
            rejected.coalesce(1).write.mode("overwrite").parquet(
                join(output_uri, "rejected"))
    with Step("de-duplicating"):
        # Partitioned by device: the aggregate, the Parquet writer
        # (partitioned by day, device) and the per-device health all use
        # this one shuffle.
        dedup = keep(deduplicate(parsed.where("ok").repartition("device")))
        n_read = dedup.count()
        log("%d readings after removing %d duplicates"
            % (n_read, n_ok - n_read))
    if write_readings:
        with Step("writing readings (Parquet by day, device)"):
            (dedup.select(*READING_COLS)
             .write.mode("overwrite").partitionBy("day", "device")
             .parquet(join(output_uri, "readings")))
    with Step("computing health"):
        health = keep(device_health(dedup))
        health_rows = [r.asDict(recursive=True) for r in
                       health.orderBy("device").collect()]
        qos = qos_health(dedup, health)
        qos_rows = [r.asDict() for r in qos.collect()]
        health.coalesce(1).write.mode("overwrite").parquet(
            join(output_uri, "health"))
        qos.coalesce(1).write.mode("overwrite").parquet(
            join(output_uri, "qos"))
    with Step("report"):
        if n_bad <= 10000:       # small: one collect, count in Python
            rej = sorted((r.asDict() for r in rejected.collect()),
                         key=lambda r: (r["file"] or "", r["line"] or ""))
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
                        if r["latency_samples"] < r["received"]
                        + r["reused_seq"]]
        report = report or _default_report(output_uri)
        rdir = os.path.dirname(os.path.abspath(report))
        os.makedirs(rdir, exist_ok=True)
        stem = os.path.splitext(os.path.basename(report))[0]
        latency_png = delivery_png = timeline_png = None
        if plots:
            from pipeline import plots as P
            data = P.latency_data(dedup)
            if data is not None:
                latency_png = stem + "-latency.png"
                P.plot_latency(data, os.path.join(rdir, latency_png))
            if health_rows:
                delivery_png = stem + "-delivery.png"
                P.plot_delivery(health_rows, os.path.join(rdir, delivery_png))
            data = P.timeline_data(dedup)
            if data is not None:
                timeline_png = stem + "-timeline.png"
                P.plot_timeline(data, events, os.path.join(rdir, timeline_png))
        summary = {
            "mode": mode, "input": input_uri, "output": output_uri,
            "lines": n_ok + n_bad, "valid": n_ok, "rejected": n_bad,
            "duplicates": n_ok - n_read, "readings": n_read,
            "devices": len(health_rows),
            "quarantined": (sum(c for _, c in quarantine)
                            if quarantine is not None else None),
            "no_w_readings": sum(r["received"] + r["reused_seq"]
                                 - r["latency_samples"] for r in health_rows),
            "negative_latency": sum(r["negative_latency"]
                                    for r in health_rows),
            "missing": sum(r["missing"] for r in health_rows),
        }
        write_report(report, summary, health_rows, qos_rows, rej_reasons,
                     rej_examples, quarantine, no_w_devices, latency_png,
                     delivery_png, timeline_png)
        log("report: %s" % report)
    for df in cached:
        df.unpersist()
    summary.update(report=report, seconds=time.monotonic() - t0,
                   health=health_rows, qos=qos_rows)
    log("%s pass done in %.1fs" % (mode if mode == "batch" else "final batch",
                                   summary["seconds"]))
    return summary

"""PySpark pipeline: landing files -> readings, delivery health, report.

    python tools/pipeline.py --input LANDING_URI --output OUT_URI \\
        [--master local[*]] [--mode batch|stream] [--checkpoint URI] \\
        [--report report.md]

Input: the collector's landing (docs/telemetry.md), any URI Spark reads; the
files read are `<input>/date=*/hour=*/*.jsonl` (hidden in-progress files are
skipped).  Output, under OUT_URI:

    readings/   Parquet, partitioned by day (UTC date of rx_ms) and device:
                one row per (device, boot, seq), the earliest received copy
    health/     Parquet, one row per device: expected/received/missing,
                gaps, duplicates, reboots, latency percentiles
    qos/        Parquet, the same per QoS
    rejected/   Parquet, landing lines that are not valid readings, with a
                reason in words (nothing is dropped silently)

and a Markdown report with PNG plots (default OUT/report.md when OUT is a
local path).  `--mode stream` runs Structured Streaming over the landing
(checkpointed; each micro-batch de-duplicates against the readings already
written and appends), then computes health and the report with a batch pass.
See docs/pipeline.md.
"""

import argparse
import os
import signal
import sys
import threading
import time
import urllib.parse

LANDING_SCHEMA = ("topic string, qos int, retain boolean, dup boolean, "
                  "rx_ms long, payload string")
PAYLOAD_SCHEMA = ("d string, b long, s long, q int, t double, u long, "
                  "w long")
KEY = ["device", "boot", "seq"]
READING_COLS = ["device", "boot", "seq", "qos", "temp_c", "uptime_ms",
                "wall_ms", "rx_ms", "latency_ms", "delivered_qos", "day"]
REPORT_DEVICE_ROWS = 50
REPORT_GAP_RANGES = 8


def log(msg):
    print("pipeline: " + msg, file=sys.stderr, flush=True)


class _Step:
    """Times a step and prints it: `with _Step("parsing"): ...`."""

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        self.t = time.monotonic()
        log(self.what + " ...")
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            log("%s done (%.1fs)" % (self.what, time.monotonic() - self.t))


# -- Spark ------------------------------------------------------------------

def spark_session(master="local[*]", app="holdfast-pipeline",
                  driver_memory="2g", shuffle_partitions=None,
                  log_level="ERROR"):
    """A SparkSession set up for the pipeline (UTC, quiet, no UI)."""
    from pyspark.sql import SparkSession
    if shuffle_partitions is None:
        shuffle_partitions = 8 if master.startswith("local") else 200
    b = SparkSession.builder.master(master).appName(app)
    if master.startswith("local"):
        # Local mode talks to itself only: bind loopback, not the machine's
        # network address (and no warning about which one it picked).
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    spark = (b.config("spark.driver.memory", driver_memory)
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel(log_level)
    return spark


def _join(uri, *parts):
    return "/".join([uri.rstrip("/")] + list(parts))


def landing_glob(landing):
    return _join(landing, "date=*", "hour=*", "*.jsonl")


def quarantine_glob(landing):
    return _join(landing, "quarantine", "*.jsonl")


def local_path(uri):
    """The local path of a file: URI or plain path, else None."""
    u = urllib.parse.urlparse(uri)
    if u.scheme in ("", "file"):
        return u.path if u.scheme else uri
    if len(u.scheme) == 1:        # a Windows drive letter
        return uri
    return None


def _path_exists(spark, uri):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(uri)
    found = path.getFileSystem(conf).globStatus(path)
    return found is not None and len(found) > 0


LANDING_READ_SCHEMA = LANDING_SCHEMA + ", _corrupt string"


def _landing_reader(reader):
    return (reader.format("json").schema(LANDING_READ_SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt"))


def _with_file(df):
    from pyspark.sql import functions as F
    return df.select("*", F.col("_metadata.file_path").alias("file"))


def read_landing(spark, landing):
    """The landing records (JSON data source, explicit schema), or None.

    A line that is not a landing record is kept whole in `_corrupt`.
    """
    glob = landing_glob(landing)
    if not _path_exists(spark, glob):
        return None
    return _with_file(_landing_reader(spark.read).load(glob))


def read_landing_stream(spark, landing, max_files=None):
    reader = _landing_reader(spark.readStream)
    if max_files:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    return _with_file(reader.load(landing_glob(landing)))


# -- parsing ----------------------------------------------------------------

def parse_landing(df):
    """Landing records -> typed readings with an `ok` flag (narrow).

    The payload is parsed with from_json and an explicit schema.  `ok` is
    true for a valid reading: a well-formed landing record with rx_ms and
    payload; the payload a JSON object with d (a non-empty string), b and s
    (integers >= 0) and q (0, 1 or 2).  t, u, w are optional (a value of the
    wrong type reads as null).  The raw line, payload, topic and file are
    only kept for rows that are not ok (see rejected_rows), so the cached
    data stays narrow.
    """
    from pyspark.sql import functions as F
    p = F.from_json(F.col("payload"), PAYLOAD_SCHEMA)
    df = df.select("*", p.alias("p"))
    # Spark reads a JSON number into a string column: check d is a JSON
    # string (fast path for the compact JSON boards send).
    d_is_string = (F.col("payload").contains('"d":"')
                   | F.col("payload").rlike(r'"d"\s*:\s*"'))
    ok = (F.col("_corrupt").isNull()
          & F.col("rx_ms").isNotNull() & F.col("payload").isNotNull()
          & F.col("p.d").isNotNull() & (F.col("p.d") != "")
          & F.col("p.b").isNotNull() & (F.col("p.b") >= 0)
          & F.col("p.s").isNotNull() & (F.col("p.s") >= 0)
          & F.col("p.q").isin(0, 1, 2) & d_is_string)
    df = df.select("*", F.coalesce(ok, F.lit(False)).alias("ok"))
    bad = ~F.col("ok")
    raw = F.coalesce(F.col("_corrupt"), F.to_json(F.struct(
        "topic", "qos", "retain", "dup", "rx_ms", "payload")))
    return df.select(
        F.col("p.d").alias("device"), F.col("p.b").alias("boot"),
        F.col("p.s").alias("seq"), F.col("p.q").alias("qos"),
        F.col("p.t").alias("temp_c"), F.col("p.u").alias("uptime_ms"),
        F.col("p.w").alias("wall_ms"), "rx_ms",
        F.col("qos").alias("delivered_qos"), "ok",
        F.when(bad, F.col("_corrupt").isNotNull()).alias("landing_bad"),
        F.when(bad, raw).alias("line"),
        F.when(bad, F.col("payload")).alias("payload"),
        F.when(bad, F.col("topic")).alias("topic"),
        F.when(bad, F.col("file")).alias("file"))


def rejected_rows(parsed):
    """The rows of `parsed` that are not valid readings, with a reason.

    Only evaluated on the rejected rows, so its extra parsing (a map view of
    the payload, to tell a missing key from one of the wrong type) costs
    nothing on good data.
    """
    from pyspark.sql import functions as F
    bad = parsed.where(~F.col("ok"))
    m = F.from_json(F.col("payload"), "map<string,string>")
    bad = bad.withColumn("m", m)

    def has(k):
        return F.coalesce(F.map_contains_key("m", k), F.lit(False))

    def key_problem(k, col, what):
        return (F.when(~has(k), F.lit("missing key " + k))
                .when(col.isNull(), F.lit("%s is not %s" % (k, what))))

    payload_problems = F.concat_ws("; ", F.array_compact(F.array(
        key_problem("d", F.col("device"), "a string"),
        F.when(has("d") & F.col("device").isNotNull()
               & ~F.col("payload").rlike(r'"d"\s*:\s*"'),
               F.lit("d is not a string")),
        F.when(F.col("device") == "", F.lit("d is empty")),
        key_problem("b", F.col("boot"), "an integer"),
        F.when(F.col("boot") < 0, F.lit("b is negative")),
        key_problem("s", F.col("seq"), "an integer"),
        F.when(F.col("seq") < 0, F.lit("s is negative")),
        F.when(~has("q"), F.lit("missing key q"))
        .when(~F.coalesce(F.col("qos").isin(0, 1, 2), F.lit(False)),
              F.lit("q is not 0, 1 or 2")),
    )))
    reason = (
        F.when(F.col("landing_bad"),
               F.lit("landing line is not a landing record (not JSON, or "
                     "a field of the wrong type)"))
        .when(F.col("payload").isNull(),
              F.lit("landing record has no payload"))
        .when(F.col("rx_ms").isNull(), F.lit("landing record has no rx_ms"))
        .when(F.col("m").isNull(), F.lit("payload is not a JSON object"))
        .otherwise(payload_problems))
    return bad.select("file", "line", "rx_ms", "topic", "payload",
                      reason.alias("reason"))


def _with_day_latency(df):
    from pyspark.sql import functions as F
    return (df.withColumn("latency_ms", F.col("rx_ms") - F.col("wall_ms"))
            .withColumn("day", F.date_format(F.timestamp_millis("rx_ms"),
                                             "yyyy-MM-dd")))


def deduplicate(valid):
    """One row per (device, boot, seq): rx_ms of the earliest copy, `copies`.

    Copies of one reading are the same message, so they carry the same
    payload fields and differ only in rx_ms (and the delivered QoS): a hash
    aggregate with min() per column (fixed-width buffers, no sort) keeps
    the earliest rx_ms.  Should a device send two different payloads under
    one (d, b, s) (a firmware bug), each field takes its minimum; the result
    is still one deterministic row.
    """
    from pyspark.sql import functions as F
    agg = valid.groupBy(*KEY).agg(
        F.min("rx_ms").alias("rx_ms"), F.min("qos").alias("qos"),
        F.min("temp_c").alias("temp_c"), F.min("uptime_ms").alias("uptime_ms"),
        F.min("wall_ms").alias("wall_ms"),
        F.min("delivered_qos").alias("delivered_qos"),
        F.count("*").alias("copies"))
    return _with_day_latency(agg)


# -- health -----------------------------------------------------------------

def _gaps(readings):
    """(device, gap_ranges array<struct<lo,hi>>) for devices missing seqs.

    lag() over the s values in order; an s seen under two boots repeats
    (difference 0), which is no gap, so no distinct() is needed.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    w = Window.partitionBy("device").orderBy("seq")
    g = (readings.select("device", "seq")
         .withColumn("prev", F.lag("seq").over(w))
         .where(F.col("seq") - F.col("prev") > 1)
         .select("device", F.struct((F.col("prev") + 1).alias("lo"),
                                    (F.col("seq") - 1).alias("hi"))
                 .alias("g")))
    return g.groupBy("device").agg(F.array_sort(F.collect_list("g"))
                                   .alias("gap_ranges"))


def _ranges_text(col):
    from pyspark.sql import functions as F
    return F.array_join(F.transform(col, lambda r: F.when(
        r["lo"] == r["hi"], r["lo"].cast("string")).otherwise(
        F.concat(r["lo"].cast("string"), F.lit("-"), r["hi"].cast("string")))),
        ", ")


def _percentiles(col):
    """p50, p95, p99, exact with linear interpolation (like numpy's default).

    Spark's exact percentile keeps a count per distinct value, and latencies
    in ms have few distinct values, so it is cheaper than the approximate one.
    """
    from pyspark.sql import functions as F
    return F.percentile(col, [0.5, 0.95, 0.99])


def device_health(dedup):
    """Per-device delivery health from de-duplicated readings (+copies).

    received = distinct s.  (d, b, s) is unique after de-duplication, so the
    count of readings is the count of distinct s unless the device re-used
    sequence numbers under another boot: only devices whose per-boot s
    ranges overlap get an exact distinct count.  The gap ranges need the
    s values in order (a window sort): only devices that miss some.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    h = dedup.groupBy("device").agg(
        F.expr("bit_or(shiftleft(1, qos))").alias("qos_mask"),
        F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"),
        F.count("*").alias("readings"),
        F.sum(F.col("copies") - 1).alias("duplicates"),
        F.count("latency_ms").alias("latency_samples"),
        F.count(F.when(F.col("latency_ms") < 0, 1)).alias("negative_latency"),
        _percentiles("latency_ms").alias("lat"),
        F.min("rx_ms").alias("first_rx_ms"), F.max("rx_ms").alias("last_rx_ms"))
    boots = dedup.groupBy("device", "boot").agg(
        F.min("seq").alias("lo"), F.max("seq").alias("hi"))
    w = Window.partitionBy("device").orderBy("lo", "hi").rowsBetween(
        Window.unboundedPreceding, -1)
    boots = boots.withColumn("prev_hi", F.max("hi").over(w))
    per_dev = boots.groupBy("device").agg(
        F.count("*").alias("boots"),
        F.max(F.when(F.col("lo") <= F.col("prev_hi"), 1).otherwise(0))
        .alias("overlap"))
    overlap = [r["device"] for r in per_dev.where("overlap = 1")
               .select("device").collect()]
    h = h.join(F.broadcast(per_dev), "device")
    if overlap:
        exact = (dedup.where(F.col("device").isin(overlap))
                 .groupBy("device").agg(F.countDistinct("seq")
                                        .alias("distinct_seq")))
        h = h.join(F.broadcast(exact), "device", "left")
        received = F.coalesce("distinct_seq", "readings")
    else:
        received = F.col("readings")
    h = h.withColumn("received", received)
    h = h.withColumn("qos", F.concat_ws(",", *[
        F.when(F.col("qos_mask").bitwiseAND(1 << q) != 0, F.lit(str(q)))
        for q in (0, 1, 2)]))
    h = h.withColumn("expected", F.col("last_seq") - F.col("first_seq") + 1)
    h = h.withColumn("missing", F.col("expected") - F.col("received"))
    h = h.persist()
    lossy = [r["device"] for r in h.where("missing > 0").select("device")
             .collect()]
    gap_type = "array<struct<lo:bigint,hi:bigint>>"
    if lossy:
        gaps = _gaps(dedup.where(F.col("device").isin(lossy)))
        h2 = h.join(F.broadcast(gaps), "device", "left")
        h2 = h2.withColumn("gap_ranges", F.coalesce(
            "gap_ranges", F.array().cast(gap_type)))
    else:
        h2 = h.withColumn("gap_ranges", F.array().cast(gap_type))
    return h2.select(
        "device", "qos", "first_seq", "last_seq", "expected", "received",
        "missing", F.size("gap_ranges").alias("gap_count"),
        _ranges_text(F.col("gap_ranges")).alias("gaps"), "gap_ranges",
        F.col("duplicates").cast("long").alias("duplicates"),
        (F.col("readings") - F.col("received")).alias("reused_seq"),
        (F.col("boots") - 1).alias("reboots"),
        "latency_samples",
        F.col("lat")[0].alias("latency_p50_ms"),
        F.col("lat")[1].alias("latency_p95_ms"),
        F.col("lat")[2].alias("latency_p99_ms"),
        "negative_latency", "first_rx_ms", "last_rx_ms")


def qos_health(dedup, health):
    """Delivery health per QoS: one row per QoS a device published with.

    Devices are grouped by the QoS their readings carry (`q`); a device that
    used several is in the row "mixed" (a missing reading has no QoS of its
    own, so its loss cannot be split).  Every number in a row is about the
    same devices.
    """
    from pyspark.sql import functions as F
    cls = health.select("device", F.when(F.col("qos").contains(","),
                                         F.lit("mixed"))
                        .otherwise(F.col("qos")).alias("qos_class"))
    per = (dedup.join(F.broadcast(cls), "device")
           .groupBy(F.col("qos_class").alias("qos")).agg(
               F.countDistinct("device").alias("devices"),
               F.count("*").alias("readings"),
               F.sum(F.col("copies") - 1).cast("long").alias("duplicates"),
               F.count("latency_ms").alias("latency_samples"),
               _percentiles("latency_ms").alias("lat")))
    loss = (health.join(cls, "device").groupBy(F.col("qos_class")
                                               .alias("qos")).agg(
        F.sum("missing").cast("long").alias("missing"),
        F.sum("expected").cast("long").alias("expected"),
        F.sum(F.when(F.col("missing") > 0, 1).otherwise(0))
        .cast("long").alias("devices_with_loss")))
    out = per.join(loss, "qos")
    return out.select(
        "qos", "devices", "readings", "expected", "missing",
        "devices_with_loss", "duplicates", "latency_samples",
        F.col("lat")[0].alias("latency_p50_ms"),
        F.col("lat")[1].alias("latency_p95_ms"),
        F.col("lat")[2].alias("latency_p99_ms")).orderBy("qos")


# -- report -----------------------------------------------------------------

def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.0f" % v if abs(v) >= 10 else "%.1f" % v
    return str(v)


def _gap_text(ranges, limit=REPORT_GAP_RANGES):
    if not ranges:
        return ""
    parts = [str(r["lo"]) if r["lo"] == r["hi"] else "%d-%d" % (r["lo"],
                                                               r["hi"])
             for r in ranges[:limit]]
    more = len(ranges) - limit
    return ", ".join(parts) + (" ... (+%d more)" % more if more > 0 else "")


def _md_table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(_fmt(c).replace("|", "\\|")
                                     for c in r) + " |")
    return "\n".join(out)


def write_report(path, summary, health_rows, qos_rows, rejected_reasons,
                 rejected_examples, quarantine_reasons, no_w_devices,
                 latency_png, delivery_png, timeline_png=None):
    s = summary
    lines = ["# holdfast telemetry report", ""]
    lines.append("Generated %s UTC by tools/pipeline.py (%s mode) from `%s`."
                 % (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                    s["mode"], s["input"]))
    lines += ["", "## Summary", ""]
    lines.append(_md_table(
        ["landing lines", "valid", "rejected", "duplicates removed",
         "readings", "devices", "quarantined by collector"],
        [[s["lines"], s["valid"], s["rejected"], s["duplicates"],
          s["readings"], s["devices"], _fmt(s["quarantined"])]]))
    lines.append("")
    lossy = [r for r in health_rows if r["missing"] > 0
             and any(q in ("1", "2") for q in r["qos"].split(","))]
    if lossy:
        lines.append("**QoS 1/2 delivery: %d reading(s) lost on %d "
                     "device(s)** (QoS 1 and 2 must not lose):"
                     % (sum(r["missing"] for r in lossy), len(lossy)))
        lines.append("")
        for r in lossy[:20]:
            lines.append("- `%s` (QoS %s): %d missing: %s"
                         % (r["device"], r["qos"], r["missing"],
                            _gap_text(r["gap_ranges"])))
        if len(lossy) > 20:
            lines.append("- ... and %d more device(s)" % (len(lossy) - 20))
    else:
        lines.append("QoS 1/2 delivery: no reading lost (every sequence "
                     "number between each device's first and last arrived).")
    if timeline_png:
        lines += ["", "## Over time", "",
                  "Per device, readings taken on the board and readings "
                  "delivered to the collector, counted since the first "
                  "reading; the shaded gap is what waited in the device's "
                  "outbox. Dashed lines: the injected faults (a power cut "
                  "on its own device's row).", "",
                  "![timeline](%s)" % timeline_png]
    lines += ["", "## Per QoS", "",
              "Devices grouped by the QoS they published with; "
              "`mixed`: devices that used several (a lost reading has no "
              "QoS of its own). Readings are distinct readings.", ""]
    lines.append(_md_table(
        ["QoS", "devices", "readings", "expected", "missing",
         "devices with loss", "duplicates removed", "latency samples",
         "p50 ms", "p95 ms", "p99 ms"],
        [[r["qos"], r["devices"], r["readings"], r["expected"], r["missing"],
          r["devices_with_loss"], r["duplicates"], r["latency_samples"],
          r["latency_p50_ms"], r["latency_p95_ms"], r["latency_p99_ms"]]
         for r in qos_rows]))
    lines += ["", "## Latency", "",
              "End-to-end latency: from the moment the board took the "
              "reading (its own clock) to the moment the collector received "
              "it, for the earliest copy of each reading; percentiles are "
              "exact, interpolated. Readings without the board's clock "
              "(field `w`) have none."]
    if no_w_devices:
        lines.append("Not computed for %d reading(s) without `w`, from "
                     "%d device(s): %s."
                     % (s["no_w_readings"], len(no_w_devices),
                        ", ".join("`%s`" % d for d in no_w_devices[:20])
                        + (" ..." if len(no_w_devices) > 20 else "")))
    if s.get("negative_latency"):
        lines.append("%d reading(s) have a negative latency (device clock "
                     "ahead of the collector's)." % s["negative_latency"])
    if latency_png:
        lines += ["", "![latency](%s)" % latency_png]
    else:
        lines += ["", "No reading carries `w`: no latency plot."]
    lines += ["", "## Per device", ""]
    shown = sorted(health_rows, key=lambda r: (-r["missing"],
                                               -r["duplicates"], r["device"]))
    if len(shown) > REPORT_DEVICE_ROWS:
        lines.append("The %d devices with the most missing, then duplicated, "
                     "readings of %d (all in the `health` table)."
                     % (REPORT_DEVICE_ROWS, len(shown)))
        lines.append("")
        shown = shown[:REPORT_DEVICE_ROWS]
    lines.append(_md_table(
        ["device", "QoS", "seq", "expected", "received", "missing", "gaps",
         "duplicates", "reboots", "p50/p95/p99 ms"],
        [[r["device"], r["qos"], "%d-%d" % (r["first_seq"], r["last_seq"]),
          r["expected"], r["received"], r["missing"],
          _gap_text(r["gap_ranges"]), r["duplicates"], r["reboots"],
          "/".join(_fmt(r[k]) for k in ("latency_p50_ms", "latency_p95_ms",
                                         "latency_p99_ms"))
          if r["latency_samples"] else "-"]
         for r in shown]))
    reused = [r for r in health_rows if r["reused_seq"]]
    if reused:
        lines.append("")
        lines.append("Sequence numbers seen under more than one boot (the "
                     "device re-used s after a reboot): %s."
                     % ", ".join("`%s` (%d)" % (r["device"], r["reused_seq"])
                                 for r in reused[:20]))
    if delivery_png:
        lines += ["", "![delivery](%s)" % delivery_png]
    lines += ["", "## Rejected landing lines", ""]
    if rejected_reasons:
        lines.append("Lines that are not valid readings; they are in the "
                     "`rejected` table with the file, the line and the "
                     "reason.")
        lines.append("")
        lines.append(_md_table(["reason", "lines"], rejected_reasons))
        lines.append("")
        lines.append("Examples:")
        lines.append("")
        for r in rejected_examples:
            # The payload says more than the landing line around it, when
            # the landing record itself was fine.
            line = r["payload"] if r["payload"] is not None and \
                not r["reason"].startswith("landing") else r["line"]
            line = line or ""
            line = line if len(line) <= 120 else line[:117] + "..."
            lines.append("- %s: `%s` (%s)" % (
                r["reason"], line.replace("`", "'"),
                os.path.basename(r["file"] or "?")))
    else:
        lines.append("None.")
    lines += ["", "## Collector quarantine", ""]
    if quarantine_reasons is None:
        lines.append("No quarantine files under the landing.")
    elif quarantine_reasons:
        lines.append("Messages the collector refused as readings (in "
                     "`quarantine/` of the landing, with their reason):")
        lines.append("")
        lines.append(_md_table(["reason", "messages"], quarantine_reasons))
    else:
        lines.append("Quarantine is empty.")
    lines += ["", "## Tables", "",
              "Under `%s`: `readings/` (Parquet, partitioned by `day` and "
              "`device`), `health/`, `qos/`, `rejected/`." % s["output"], ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


# -- batch ------------------------------------------------------------------

def _quarantine_reasons(spark, landing):
    from pyspark.sql import functions as F
    glob = quarantine_glob(landing)
    if not _path_exists(spark, glob):
        return None
    q = spark.read.format("text").load(glob)
    rows = (q.select(F.coalesce(F.from_json("value", "reason string")
                                ["reason"], F.lit("(no reason)"))
                     .alias("reason"))
            .groupBy("reason").count().orderBy(F.desc("count"), "reason")
            .collect())
    return [[r["reason"], r["count"]] for r in rows]


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

    with _Step("parsing landing %s" % input_uri):
        parsed = keep(parse_landing(landing))
        counts = parsed.groupBy("ok").count().collect()
        n_ok = sum(r["count"] for r in counts if r["ok"])
        n_bad = sum(r["count"] for r in counts if not r["ok"])
        log("%d landing lines: %d valid, %d rejected" % (n_ok + n_bad, n_ok,
                                                         n_bad))
    rejected = keep(rejected_rows(parsed))
    if write_rejected:
        with _Step("writing rejected"):
            rejected.coalesce(1).write.mode("overwrite").parquet(
                _join(output_uri, "rejected"))
    with _Step("de-duplicating"):
        # Partitioned by device: the aggregate, the Parquet writer
        # (partitioned by day, device) and the per-device health all use
        # this one shuffle.
        dedup = keep(deduplicate(parsed.where("ok").repartition("device")))
        n_read = dedup.count()
        log("%d readings after removing %d duplicates"
            % (n_read, n_ok - n_read))
    if write_readings:
        with _Step("writing readings (Parquet by day, device)"):
            (dedup.select(*READING_COLS)
             .write.mode("overwrite").partitionBy("day", "device")
             .parquet(_join(output_uri, "readings")))
    with _Step("computing health"):
        health = keep(device_health(dedup))
        health_rows = [r.asDict(recursive=True) for r in
                       health.orderBy("device").collect()]
        qos = qos_health(dedup, health)
        qos_rows = [r.asDict() for r in qos.collect()]
        health.coalesce(1).write.mode("overwrite").parquet(
            _join(output_uri, "health"))
        qos.coalesce(1).write.mode("overwrite").parquet(
            _join(output_uri, "qos"))
    with _Step("report"):
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
        quarantine = _quarantine_reasons(spark, input_uri)
        no_w_devices = [r["device"] for r in health_rows
                        if r["latency_samples"] < r["received"]
                        + r["reused_seq"]]
        report = report or _default_report(output_uri)
        rdir = os.path.dirname(os.path.abspath(report))
        os.makedirs(rdir, exist_ok=True)
        stem = os.path.splitext(os.path.basename(report))[0]
        latency_png = delivery_png = timeline_png = None
        if plots:
            import plots as P
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


# -- stream -----------------------------------------------------------------

def _readings_exist(spark, output_uri):
    return _path_exists(spark, _join(output_uri, "readings", "_SUCCESS")) \
        or _path_exists(spark, _join(output_uri, "readings", "day=*"))


def make_batch_writer(spark, output_uri):
    """foreachBatch function: de-duplicate against written readings, append.

    Idempotent per batch id: a replayed micro-batch (after a crash before
    the checkpoint commit) finds its readings already written and adds none;
    its rejected lines go to `rejected/batch=<id>/`, overwritten.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    readings_uri = _join(output_uri, "readings")

    def write_batch(batch_df, batch_id):
        t = time.monotonic()
        parsed = parse_landing(batch_df).persist(StorageLevel.MEMORY_AND_DISK)
        n_lines = parsed.count()
        if n_lines == 0:
            parsed.unpersist()
            return
        rejected = rejected_rows(parsed)
        n_bad = rejected.count()
        if n_bad:
            rejected.coalesce(1).write.mode("overwrite").parquet(
                _join(output_uri, "rejected", "batch=%d" % batch_id))
        new = deduplicate(parsed.where("ok")).drop("copies")
        if _readings_exist(spark, output_uri):
            devices = [r["device"] for r in
                       new.select("device").distinct().collect()]
            old = (spark.read.parquet(readings_uri)
                   .where(F.col("device").isin(devices)).select(*KEY))
            new = new.join(old, KEY, "left_anti")
        new = new.select(*READING_COLS).persist()
        n_new = new.count()
        if n_new:
            (new.repartition("day", "device").write.mode("append")
             .partitionBy("day", "device").parquet(readings_uri))
        log("stream batch %d: %d lines, %d new readings, %d duplicates, "
            "%d rejected (%.1fs)" % (batch_id, n_lines, n_new,
                                     n_lines - n_bad - n_new, n_bad,
                                     time.monotonic() - t))
        new.unpersist()
        parsed.unpersist()

    return write_batch


def run_stream(spark, input_uri, output_uri, checkpoint=None, follow=False,
               interval="10 seconds", duration=None, max_files=None,
               stop_event=None):
    """Structured Streaming over the landing; returns when caught up
    (default, trigger availableNow) or, with follow, on stop_event/duration.
    """
    checkpoint = checkpoint or _join(output_uri, "_checkpoint")
    src = read_landing_stream(spark, input_uri, max_files)
    w = (src.writeStream.foreachBatch(make_batch_writer(spark, output_uri))
         .option("checkpointLocation", checkpoint))
    if follow:
        w = w.trigger(processingTime=interval)
    else:
        w = w.trigger(availableNow=True)
    log("streaming %s -> %s (checkpoint %s, %s)"
        % (input_uri, output_uri, checkpoint,
           "every %s until stopped" % interval if follow else
           "available files, then stop"))
    q = w.start()
    deadline = None if duration is None else time.monotonic() + duration
    stop_event = stop_event or threading.Event()
    while q.isActive:
        if stop_event.is_set() or (deadline and time.monotonic() > deadline):
            q.stop()
            break
        q.awaitTermination(0.5)
    if q.exception() is not None:
        raise RuntimeError("streaming query failed: %s" % q.exception())


# -- CLI --------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Landing JSON lines -> Parquet readings, per-device "
                    "delivery health and a Markdown report (PySpark).")
    ap.add_argument("--input", required=True,
                    help="landing URI (a directory; any URI Spark reads)")
    ap.add_argument("--output", required=True,
                    help="output URI for the Parquet tables")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--mode", choices=("batch", "stream"), default="batch")
    ap.add_argument("--checkpoint", default=None,
                    help="stream mode: checkpoint URI (default "
                         "OUTPUT/_checkpoint)")
    ap.add_argument("--follow", action="store_true",
                    help="stream mode: keep polling the landing every "
                         "--interval until SIGINT/SIGTERM or --duration "
                         "(default: process what is there, then stop)")
    ap.add_argument("--interval", default="10 seconds")
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--max-files-per-trigger", type=int, default=None)
    ap.add_argument("--report", default=None,
                    help="Markdown report path (local; PNG plots next to "
                         "it). Default OUTPUT/report.md for a local OUTPUT")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--shuffle-partitions", type=int, default=None)
    ap.add_argument("--spark-log-level", default="ERROR")
    a = ap.parse_args(argv)
    if a.mode == "batch" and (a.follow or a.checkpoint):
        ap.error("--follow and --checkpoint are for --mode stream")
    t = time.monotonic()
    log("starting Spark (%s)" % a.master)
    spark = spark_session(a.master, driver_memory=a.driver_memory,
                          shuffle_partitions=a.shuffle_partitions,
                          log_level=a.spark_log_level)
    log("Spark %s up in %.1fs" % (spark.version, time.monotonic() - t))
    try:
        if a.mode == "stream":
            stop = threading.Event()

            def on_signal(signum, frame):
                log("%s: stopping the stream" % signal.Signals(signum).name)
                stop.set()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
            run_stream(spark, a.input, a.output, a.checkpoint,
                       follow=a.follow, interval=a.interval,
                       duration=a.duration,
                       max_files=a.max_files_per_trigger, stop_event=stop)
            log("health and report: batch pass over the landing")
            run_batch(spark, a.input, a.output, a.report, mode="stream",
                      write_readings=False, write_rejected=False,
                      plots=not a.no_plots)
        else:
            run_batch(spark, a.input, a.output, a.report,
                      plots=not a.no_plots)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

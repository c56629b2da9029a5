"""Delivery health from the de-duplicated readings: per device (expected,
received, missing, gaps, duplicates, reboots, latency percentiles) and per
QoS."""


# Faults that drop the collector's connection or the broker's state, and
# how long before the first copy of a reading one may have begun.
QOS2_CAUSE_EVENTS = ("broker restart", "reset", "partition")
QOS2_CAUSE_WINDOW_MS = 10000


def qos2_duplicate_flag():
    """A reading whose copies break QoS 2's exactly-once promise: published
    at QoS 2 (`q`), every copy delivered to the collector at QoS 2 (a
    collector subscribed at QoS 1 is only promised at least once), and more
    than one copy."""
    from pyspark.sql import functions as F
    return ((F.col("qos") == 2) & (F.col("delivered_qos") == 2)
            & (F.col("copies") > 1))


def qos2_cause(row, events):
    """The cause of one QoS 2 duplicate in words, from how its copies came
    (DUP flag) and the faults around them (events: [(wall ms, what)])."""
    if row["dup_copies"] >= row["copies"] - 1:
        how = ("the broker sent it again with DUP set: the collector's "
               "connection dropped after it landed the message and before "
               "its PUBREC reached the broker, and the collector no longer "
               "knew the packet id (it keeps them only while it runs: it "
               "had restarted)")
    elif row["dup_copies"] == 0:
        how = ("a new PUBLISH, not a redelivery: the broker had lost its "
               "QoS 2 state for the message (a broker restarted without "
               "persistence, or killed before it saved it) and the board "
               "sent it again")
    else:
        how = "copies both redelivered (DUP) and new"
    near = [(ms, what) for ms, what in events or ()
            if what.startswith(QOS2_CAUSE_EVENTS)
            and row["rx_ms"] - QOS2_CAUSE_WINDOW_MS <= ms <= row["last_rx_ms"]]
    if not near:
        return how
    ms, what = near[-1]
    if ms > row["rx_ms"]:
        return "%s (%s between the copies)" % (how, what)
    return "%s (%s %.1f s before the first copy)" % (how, what, (row["rx_ms"] - ms) / 1000.0)


def qos2_duplicates(dedup, total, events, limit=200):
    """The readings that broke the QoS 2 promise (up to `limit`, earliest
    first), each with its cause; no job when there are none."""
    if not total:
        return []
    rows = (dedup.where(qos2_duplicate_flag())
            .select("device", "boot", "seq", "copies", "dup_copies", "rx_ms",
                    "last_rx_ms").orderBy("rx_ms", "device").limit(limit)
            .collect())
    return [dict(r.asDict(), cause=qos2_cause(r, events)) for r in rows]


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
        F.sum(F.when(qos2_duplicate_flag(), F.col("copies") - 1)
              .otherwise(0)).alias("qos2_duplicates"),
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
        F.col("qos2_duplicates").cast("long").alias("qos2_duplicates"),
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
               F.count("*").alias("readings"),
               F.sum(F.col("copies") - 1).cast("long").alias("duplicates"),
               F.sum(F.when(qos2_duplicate_flag(), F.col("copies") - 1)
                     .otherwise(0)).cast("long").alias("qos2_duplicates"),
               F.count("latency_ms").alias("latency_samples"),
               _percentiles("latency_ms").alias("lat")))
    loss = (health.join(cls, "device").groupBy(F.col("qos_class")
                                               .alias("qos")).agg(
        F.count("*").alias("devices"),      # health has a row per device
        F.sum("missing").cast("long").alias("missing"),
        F.sum("expected").cast("long").alias("expected"),
        F.sum(F.when(F.col("missing") > 0, 1).otherwise(0))
        .cast("long").alias("devices_with_loss")))
    out = per.join(loss, "qos")
    return out.select(
        "qos", "devices", "readings", "expected", "missing",
        "devices_with_loss", "duplicates", "qos2_duplicates", "latency_samples",
        F.col("lat")[0].alias("latency_p50_ms"),
        F.col("lat")[1].alias("latency_p95_ms"),
        F.col("lat")[2].alias("latency_p99_ms")).orderBy("qos")

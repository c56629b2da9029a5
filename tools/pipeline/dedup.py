"""De-duplication: one row per reading, (device, boot, seq), from the valid
landing rows, with its latency and day; the rejected lines ride along in
the same aggregate, one group each."""

KEY = ["device", "boot", "seq"]
READING_COLS = ["device", "boot", "seq", "qos", "temp_c", "uptime_ms",
                "wall_ms", "rx_ms", "latency_ms", "delivered_qos", "day"]
# What a rejected line keeps (see landing.parse_landing): null on valid rows.
BAD_COLS = ["landing_bad", "line", "payload", "topic", "file"]


def with_day_latency(df):
    from pyspark.sql import functions as F
    return (df.withColumn("latency_ms", F.col("rx_ms") - F.col("wall_ms"))
            .withColumn("day", F.date_format(F.timestamp_millis("rx_ms"),
                                             "yyyy-MM-dd")))


def copy_aggs():
    """Per reading: the earliest copy, and what its copies say about how
    they came (for the QoS 2 promise: see report.py).

    Copies of one reading are the same message, so they carry the same
    payload fields and differ only in rx_ms, dup and the delivered QoS: a
    hash aggregate with min() per column (fixed-width buffers, no sort)
    keeps the earliest rx_ms.  Two different payloads under one (d, b, s)
    (a board whose state was wiped starts b and s again) are a key
    collision, not copies: `collision` says so (the smallest and the largest
    hash of the payload text differ), the report names it, and the row
    still holds each field's minimum (one deterministic row).
    """
    from pyspark.sql import functions as F
    return [F.min("rx_ms").alias("rx_ms"), F.min("qos").alias("qos"),
            F.min("temp_c").alias("temp_c"),
            F.min("uptime_ms").alias("uptime_ms"),
            F.min("wall_ms").alias("wall_ms"),
            F.min("delivered_qos").alias("delivered_qos"),
            F.count("*").alias("copies"),
            F.max("rx_ms").alias("last_rx_ms"),
            F.count(F.when(F.col("dup"), 1)).alias("dup_copies"),
            (F.min("content") != F.max("content")).alias("collision")]


def aggregate_landing(parsed):
    """One shuffle and one aggregate over the parsed landing (ok and not):
    a row per reading (ok: its earliest copy, see copy_aggs) and a row
    per rejected line (ok false, its own group: a per-row id in the key, so
    two equal bad lines stay two).  Partitioned by device, so the readings
    writer and the per-device health need no other shuffle.  The rejected
    line's text is part of the grouping key, not an aggregate, so every
    buffer stays fixed-width (a hash aggregate, no sort).
    """
    from pyspark.sql import functions as F
    keyed = parsed.select(
        "*", F.when(~F.col("ok"), F.monotonically_increasing_id())
        .alias("bad_id"))
    agg = (keyed.repartition("device")
           .groupBy("ok", *(KEY + ["bad_id"] + BAD_COLS)).agg(*copy_aggs()))
    return with_day_latency(agg)

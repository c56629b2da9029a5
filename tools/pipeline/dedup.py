"""De-duplication: one row per reading, (device, boot, seq), from the valid
landing rows, with its latency and day."""

KEY = ["device", "boot", "seq"]
READING_COLS = ["device", "boot", "seq", "qos", "temp_c", "uptime_ms",
                "wall_ms", "rx_ms", "latency_ms", "delivered_qos", "day"]


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

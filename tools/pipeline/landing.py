"""Reading the landing: its JSON lines with an explicit schema (batch or
stream), parsed into typed readings with an `ok` flag; the lines that are not
valid readings with a reason; the collector's quarantine, counted by reason."""

from pipeline import contract
from pipeline.session import join, path_exists

LANDING_SCHEMA = ("topic string, qos int, retain boolean, dup boolean, "
                  "rx_ms long, payload string")
PAYLOAD_SCHEMA = ("d string, b long, s long, q int, t double, u long, "
                  "w long")


def landing_glob(landing):
    return join(landing, "date=*", "hour=*", "*.jsonl")


def quarantine_glob(landing):
    return join(landing, "quarantine", "*.jsonl")


LANDING_READ_SCHEMA = LANDING_SCHEMA + ", _corrupt string"


def _landing_reader(reader):
    return (reader.format("json").schema(LANDING_READ_SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt"))


def _with_file(df):
    from pyspark.sql import functions as F
    return df.select("*", F.col("_metadata.file_path").alias("file"))


def read_landing(spark, paths):
    """The landing records of `paths` (files or globs; JSON data source,
    explicit schema).

    A line that is not a landing record is kept whole in `_corrupt`.
    """
    return _with_file(_landing_reader(spark.read).load(list(paths)))


def read_landing_stream(spark, landing, max_files=None):
    reader = _landing_reader(spark.readStream)
    if max_files:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    return _with_file(reader.load(landing_glob(landing)))


def parse_landing(df, keep=()):
    """Landing records -> typed readings with an `ok` flag (narrow), and
    the columns `keep` of `df` as they are.

    `ok` is true for a valid reading: a well-formed landing record with
    rx_ms and payload, whose payload on its topic passes the contract at the
    door (pipeline/contract.py, the collector's own check). Only then is
    the payload parsed (from_json, an explicit schema: what the contract
    let through reads the same in any JSON parser). The raw line, payload,
    topic and file are only kept for rows that are not ok (see
    rejected_rows), so the cached data stays narrow.
    """
    from pyspark.sql import functions as F
    ok = (F.col("_corrupt").isNull()
          & F.col("rx_ms").isNotNull() & F.col("payload").isNotNull()
          & contract.spark_ok(F.col("payload"), F.col("topic")))
    df = df.select("*", F.coalesce(ok, F.lit(False)).alias("ok"))
    df = df.select("*", F.when(F.col("ok"), F.from_json(F.col("payload"), PAYLOAD_SCHEMA))
                   .alias("p"))
    bad = ~F.col("ok")
    raw = F.coalesce(F.col("_corrupt"), F.to_json(F.struct(
        "topic", "qos", "retain", "dup", "rx_ms", "payload")))
    return df.select(
        F.col("p.d").alias("device"), F.col("p.b").alias("boot"),
        F.col("p.s").alias("seq"), F.col("p.q").alias("qos"),
        F.col("p.t").alias("temp_c"), F.col("p.u").alias("uptime_ms"),
        F.col("p.w").alias("wall_ms"), "rx_ms",
        F.col("qos").alias("delivered_qos"),
        F.coalesce(F.col("dup"), F.lit(False)).alias("dup"), "ok",
        F.when(F.col("ok"), F.xxhash64("payload")).alias("content"),
        F.when(bad, F.col("_corrupt").isNotNull()).alias("landing_bad"),
        F.when(bad, raw).alias("line"),
        F.when(bad, F.col("payload")).alias("payload"),
        F.when(bad, F.col("topic")).alias("topic"),
        F.when(bad, F.col("file")).alias("file"), *keep)


def rejected_rows(parsed):
    """The rows of `parsed` that are not valid readings, with a reason:
    the landing record's problem, else the contract's (contract.py), the
    collector's words."""
    from pyspark.sql import functions as F
    bad = parsed.where(~F.col("ok"))
    reason = (
        F.when(F.col("landing_bad"),
               F.lit("landing line is not a landing record (not JSON, or "
                     "a field of the wrong type)"))
        .when(F.col("payload").isNull(),
              F.lit("landing record has no payload"))
        .when(F.col("rx_ms").isNull(), F.lit("landing record has no rx_ms"))
        .otherwise(F.concat_ws("; ", contract.spark_problems(F.col("payload"),
                                                             F.col("topic")))))
    return bad.select("file", "line", "rx_ms", "topic", "payload",
                      reason.alias("reason"))


def quarantine_reasons(spark, landing):
    from pyspark.sql import functions as F
    glob = quarantine_glob(landing)
    if not path_exists(spark, glob):
        return None
    q = spark.read.format("text").load(glob)
    rows = (q.select(F.coalesce(F.from_json("value", "reason string")
                                ["reason"], F.lit("(no reason)"))
                     .alias("reason"))
            .groupBy("reason").count().orderBy(F.desc("count"), "reason")
            .collect())
    return [[r["reason"], r["count"]] for r in rows]

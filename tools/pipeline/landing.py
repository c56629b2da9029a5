"""Reading the landing: its JSON lines with an explicit schema (batch or
stream), parsed into typed readings with an `ok` flag; the lines that are not
valid readings with a reason; the collector's quarantine, counted by reason."""

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
        F.col("qos").alias("delivered_qos"),
        F.coalesce(F.col("dup"), F.lit(False)).alias("dup"), "ok",
        F.when(bad, F.col("_corrupt").isNotNull()).alias("landing_bad"),
        F.when(bad, raw).alias("line"),
        F.when(bad, F.col("payload")).alias("payload"),
        F.when(bad, F.col("topic")).alias("topic"),
        F.when(bad, F.col("file")).alias("file"), *keep)


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

"""tools/pipeline on small landing data with known answers.

One SparkSession (local[2]) for the whole module: Spark takes ~10-20 s to
start.  The landing below has duplicates (one with the earlier copy in a
later file), gaps, reboots, a re-used sequence number, late and
out-of-order readings, mixed QoS, readings without w, malformed lines of
every kind, a hidden in-progress file and a quarantine file.
"""

import glob
import json
import math
import os
import random
import re
import shutil
import time

import pytest

import pyspark  # noqa: E402,F401  (requirements.txt; a missing one fails)

from pipeline import gen_landing  # noqa: E402
from pipeline.batch import run_batch  # noqa: E402
from pipeline.dedup import READING_COLS  # noqa: E402
from pipeline.session import spark_session  # noqa: E402
from pipeline.stream import run_stream  # noqa: E402

H0 = 1767225600000                      # 2026-01-01T00:00:00Z
HOUR = 3600 * 1000


@pytest.fixture(scope="session")
def spark():
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        pytest.fail("PySpark needs Java 17+: no `java` on PATH and no "
                    "JAVA_HOME (Debian: apt-get install -y "
                    "openjdk-17-jre-headless)", pytrace=False)
    s = spark_session("local[2]", app="holdfast-tests",
                      driver_memory="1g", shuffle_partitions=1)
    yield s
    s.stop()


def rec(d, b, s, q, rx, w=None, dup=False):
    p = {"d": d, "b": b, "s": s, "q": q, "t": 21.5, "u": 1000 + s}
    if w is not None:
        p["w"] = w
    return {"topic": "holdfast/%s/telemetry" % d, "qos": q, "retain": False,
            "dup": dup, "rx_ms": rx,
            "payload": json.dumps(p, separators=(",", ":"))}


def raw(payload, rx=H0 + 500):
    return {"topic": "holdfast/dev-x/telemetry", "qos": 1, "retain": False,
            "dup": False, "rx_ms": rx, "payload": payload}


# Malformed lines and the reason the pipeline must give.
MALFORMED = [
    ("this is not json", "landing line is not a landing record"),
    (json.dumps(raw("hello")), "payload is not a flat JSON object"),
    (json.dumps(raw("[1,2]")), "payload is not a flat JSON object"),
    (json.dumps(raw('{"d":"dev-x","b":1,"q":1}')), "missing key s"),
    (json.dumps(raw('{"d":"dev-x","b":1.5,"s":"7","q":1}')),
     "b is not an integer from 0 to 999999999; s is not an integer from 0 to"),
    (json.dumps(raw('{"d":42,"b":1,"s":1,"q":1}')), "d is not a device id"),
    (json.dumps(raw('{"d":"dev-x","b":1,"s":1,"q":5}')),
     "q is not 0, 1 or 2"),
    (json.dumps(raw('{"d":"dev-x","b":-1,"s":1}')),
     "b is not an integer from 0 to 999999999; missing key q"),
    ('{"topic":"holdfast/dev-x/telemetry","qos":1,"rx_ms":1}',
     "landing record has no payload"),
    ('{"topic":"t","qos":1,"rx_ms":"soon","payload":"{}"}',
     "landing line is not a landing record"),
]


def lat_a(s):
    return (s - 99) * 10                 # dev-a latencies: 10, 20, ... ms


def build_landing():
    """{relative file path: [lines]} and the expected answers."""
    files = {}

    def add(path, r):
        files.setdefault(path, []).append(
            r if isinstance(r, str) else json.dumps(r))

    f00 = "date=2026-01-01/hour=00/part-1-0.jsonl"
    f00b = "date=2026-01-01/hour=00/part-2-0.jsonl"   # a second collector
    f02 = "date=2026-01-01/hour=02/part-1-1.jsonl"
    f25 = "date=2026-01-02/hour=01/part-1-2.jsonl"    # next day
    # dev-a, QoS 1: s 100..119, reboot at 110, missing 105 and 112-114;
    # s=101 three copies, s=110 two; s=103 arrives 2 hours late.
    for s in range(100, 120):
        if s in (105, 112, 113, 114):
            continue
        b = 1 if s < 110 else 2
        w = H0 + s * 1000
        rx = w + lat_a(s)
        if s == 103:
            add(f02, rec("dev-a", b, s, 1, w + 2 * HOUR, w=w))
            continue
        add(f00, rec("dev-a", b, s, 1, rx, w=w))
        if s == 101:
            add(f00, rec("dev-a", b, s, 1, rx + 5000, w=w, dup=True))
            add(f02, rec("dev-a", b, s, 1, rx + 2 * HOUR, w=w, dup=True))
        if s == 110:
            add(f00b, rec("dev-a", b, s, 1, rx + 700, w=w, dup=True))
    # dev-b, QoS 0, no w: s 0..9 missing 3-5 and 8; the last reading the
    # next day.
    for s in range(10):
        if s in (3, 4, 5, 8):
            continue
        add(f25 if s == 9 else f00, rec("dev-b", 4, s, 0,
                                        (H0 + 25 * HOUR) if s == 9
                                        else H0 + 2000 + s))
    # dev-c, QoS 2: s 5..7; s=6 twice, the earlier copy in the other file.
    for s in (5, 6, 7):
        add(f00, rec("dev-c", 1, s, 2, H0 + 60000 + s * 1000 + 15,
                     w=H0 + 60000 + s * 1000,
                     dup=(s == 6)))
    add(f00b, rec("dev-c", 1, 6, 2, H0 + 60000 + 6000 + 5,
                  w=H0 + 60000 + 6000))
    # dev-d, QoS 1 and 2 mixed: s 1..4, s=3 missing.
    for s in (1, 2, 4):
        add(f00, rec("dev-d", 9, s, 1 if s % 2 else 2, H0 + 90000 + s,
                     w=H0 + 90000 + s - 30))
    # dev-e, QoS 1: b=1 s 1..3, then b=2 re-uses s=3 and goes on to 4.
    for b, s in ((1, 1), (1, 2), (1, 3), (2, 3), (2, 4)):
        add(f00, rec("dev-e", b, s, 1, H0 + 100000 + 10 * s + b))
    for line, _ in MALFORMED:
        add(f00, line)
    # Shuffle the lines of each file: out-of-order arrival.
    rnd = random.Random(7)
    for lines in files.values():
        rnd.shuffle(lines)
    # A hidden in-progress file (skipped) and a quarantine file.
    files["date=2026-01-01/hour=00/.part-3-0.jsonl.inprogress"] = [
        json.dumps(rec("dev-z", 1, 1, 1, H0))]
    q = raw("garbage")
    q["reason"] = "payload is not JSON (Expecting value)"
    files["quarantine/part-1-0.jsonl"] = [json.dumps(q)]
    return files


def write_files(root, files, only=None):
    for rel, lines in files.items():
        if only is not None and rel not in only:
            continue
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")


def pct(vals, p):
    """Linear interpolation between closest ranks (Spark's percentile)."""
    v = sorted(vals)
    x = p * (len(v) - 1)
    lo = int(math.floor(x))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (x - lo)


A_KEPT = [s for s in range(100, 120) if s not in (105, 112, 113, 114)]
A_LAT = [lat_a(s) if s != 103 else 2 * HOUR for s in A_KEPT]

EXPECTED = {
    # device: (qos, first, last, expected, received, missing, gaps,
    #          duplicates, reboots, reused, latency samples)
    "dev-a": ("1", 100, 119, 20, 16, 4, "105, 112-114", 3, 1, 0, 16),
    "dev-b": ("0", 0, 9, 10, 6, 4, "3-5, 8", 0, 0, 0, 0),
    "dev-c": ("2", 5, 7, 3, 3, 0, "", 1, 0, 0, 3),
    "dev-d": ("1,2", 1, 4, 4, 3, 1, "3", 0, 0, 0, 3),
    # b=2 re-uses s=3: 5 readings, counted per boot, none missing
    "dev-e": ("1", 1, 4, 5, 5, 0, "", 0, 1, 1, 0),
}
N_VALID = 16 + 3 + 6 + 3 + 1 + 3 + 5        # kept + copies: a, a dups, b, c..
N_READINGS = 16 + 6 + 3 + 3 + 5


@pytest.fixture(scope="module")
def batch(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline-batch")
    landing = str(root / "landing")
    out = str(root / "out")
    write_files(landing, build_landing())
    summary = run_batch(spark, landing, out)
    return {"landing": landing, "out": out, "summary": summary}


def test_batch_counts(batch):
    s = batch["summary"]
    assert s["valid"] == N_VALID
    assert s["rejected"] == len(MALFORMED)
    assert s["lines"] == N_VALID + len(MALFORMED)   # in-progress skipped
    assert s["readings"] == N_READINGS
    assert s["duplicates"] == 4
    assert s["devices"] == 5
    assert s["quarantined"] == 1
    assert s["no_w_readings"] == 6 + 5


def test_duckdb_reference_counts_what_spark_counts(batch):
    # make bench's reference row without Spark: on a landing with malformed
    # lines, duplicates and reused sequence numbers, the same distinct
    # readings per device.
    from pipeline import duckdb_ref
    ref, _ = duckdb_ref.readings_per_device(batch["landing"])
    spark = {r["device"]: r["received"] for r in batch["summary"]["health"]}
    assert ref == spark
    assert sum(ref.values()) == N_READINGS


def test_batch_health_exact(batch, spark):
    rows = {r["device"]: r for r in
            spark.read.parquet(os.path.join(batch["out"], "health"))
            .collect()}
    assert set(rows) == set(EXPECTED)
    for dev, exp in EXPECTED.items():
        r = rows[dev]
        got = (r["qos"], r["first_seq"], r["last_seq"], r["expected"],
               r["received"], r["missing"], r["gaps"], r["duplicates"],
               r["reboots"], r["reused_seq"], r["latency_samples"])
        assert got == exp, (dev, got, exp)
    a = rows["dev-a"]
    assert [(g["lo"], g["hi"]) for g in a["gap_ranges"]] == [(105, 105),
                                                            (112, 114)]
    assert a["gap_count"] == 2
    for p, col in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms"),
                   (0.99, "latency_p99_ms")):
        assert a[col] == pytest.approx(pct(A_LAT, p)), col
    assert rows["dev-b"]["latency_p50_ms"] is None     # no w: not computed
    assert rows["dev-c"]["latency_p50_ms"] == pytest.approx(15)  # 5,15,15
    assert rows["dev-d"]["latency_p99_ms"] == pytest.approx(30)


def test_batch_qos_table(batch, spark):
    rows = {r["qos"]: r.asDict() for r in
            spark.read.parquet(os.path.join(batch["out"], "qos")).collect()}
    assert set(rows) == {"0", "1", "2", "mixed"}
    want = {  # qos: devices, readings, expected, missing, devices with loss,
              #      duplicates, latency samples
        "0": (1, 6, 10, 4, 1, 0, 0),              # dev-b
        "1": (2, 16 + 5, 20 + 5, 4, 1, 3, 16),    # dev-a, dev-e
        "2": (1, 3, 3, 0, 0, 1, 3),               # dev-c
        "mixed": (1, 3, 4, 1, 1, 0, 3),           # dev-d
    }
    for q, w in want.items():
        r = rows[q]
        got = (r["devices"], r["readings"], r["expected"], r["missing"],
               r["devices_with_loss"], r["duplicates"], r["latency_samples"])
        assert got == w, (q, got, w)
    assert rows["mixed"]["latency_p50_ms"] == pytest.approx(30)
    assert rows["0"]["latency_p50_ms"] is None


def test_batch_readings_dedup_earliest(batch, spark):
    from pyspark.sql import functions as F
    r = spark.read.parquet(os.path.join(batch["out"], "readings"))
    assert r.count() == N_READINGS
    assert r.groupBy("device", "boot", "seq").count() \
        .where("count > 1").count() == 0
    c6 = r.where((F.col("device") == "dev-c") & (F.col("seq") == 6)) \
        .collect()[0]
    assert c6["rx_ms"] == H0 + 66005         # the earlier copy, later file
    assert c6["latency_ms"] == 5
    a101 = r.where((F.col("device") == "dev-a") & (F.col("seq") == 101)) \
        .collect()[0]
    assert a101["rx_ms"] == H0 + 101000 + lat_a(101)
    b9 = r.where((F.col("device") == "dev-b") & (F.col("seq") == 9)) \
        .collect()[0]
    assert str(b9["day"]) == "2026-01-02"   # partition value, read as date
    # Partitioned by day, then device.
    assert os.path.isdir(os.path.join(batch["out"], "readings",
                                      "day=2026-01-01", "device=dev-a"))
    assert os.path.isdir(os.path.join(batch["out"], "readings",
                                      "day=2026-01-02", "device=dev-b"))


def test_batch_rejected_with_reasons(batch, spark):
    rej = spark.read.parquet(os.path.join(batch["out"], "rejected"))
    rows = rej.collect()
    assert len(rows) == len(MALFORMED)
    got = sorted(r["reason"] for r in rows)
    want = sorted(reason for _, reason in MALFORMED)
    for g, w in zip(got, want):
        assert g.startswith(w), (got, want)
    for r in rows:
        assert r["file"].endswith("part-1-0.jsonl")
        assert r["line"]
    bad_json = [r for r in rows if r["line"] == "this is not json"]
    assert len(bad_json) == 1


def test_report(batch):
    report = os.path.join(batch["out"], "report.md")
    with open(report) as f:
        text = f.read()
    for needle in ("## Summary", "## Per QoS", "## Latency", "## Per device",
                   "## Rejected landing lines", "## Collector quarantine",
                   "105, 112-114", "3-5, 8",
                   "**QoS 1/2 delivery: 5 reading(s) lost on 2 device(s)**",
                   "`dev-b`", "payload is not a flat JSON object",
                   "report-latency.png", "report-delivery.png",
                   "## Over time", "report-timeline.png",
                   "Sequence numbers seen under more than one boot",
                   "`dev-e` (1)",
                   "**QoS 2 exactly-once broken: 1 duplicate copy of 1 reading(s)**",
                   "- `dev-c` b=1 s=6: 2 copies, the last 10 ms after the first; "
                   "the broker sent it again with DUP set"):
        assert needle in text, needle
    assert "rx_ms - w" not in text  # the prose reads without the glossary
    # Paths as seen from the report's folder: no machine's directories in it.
    assert "from `../landing`" in text and "Under `.`:" in text, text
    assert os.path.dirname(batch["landing"]) not in text, text
    for png in ("report-latency.png", "report-delivery.png", "report-timeline.png"):
        path = os.path.join(batch["out"], png)
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_plot_that_fails_fails_the_run_with_its_error(batch, spark, tmp_path, monkeypatch):
    # The plots are drawn on a thread of their own (batch._Plots): what
    # goes wrong there must reach the caller, not vanish with the thread.
    from pipeline import plots

    def broken(rows, path):
        raise RuntimeError("no room for the delivery plot")
    monkeypatch.setattr(plots, "plot_delivery", broken)
    with pytest.raises(RuntimeError, match="no room for the delivery plot"):
        run_batch(spark, batch["landing"], str(tmp_path / "out"))


def _spark_latency_reference(spark, readings):
    """What the health tables' latency figures were when Spark computed
    them (F.percentile per device and per QoS class, and the latency plot's
    count per (QoS, value)): the reference the counts in Python must equal,
    exactly."""
    from pyspark.sql import functions as F
    from pipeline.health import PERCENTILES
    r = spark.read.parquet(readings)
    aggs = [F.count("latency_ms").alias("n"),
            F.percentile("latency_ms", list(PERCENTILES)).alias("p")]
    per_dev = {x["device"]: (x["n"], x["p"]) for x in r.groupBy("device").agg(*aggs).collect()}
    qos = {x["device"]: x["q"] for x in r.groupBy("device").agg(
        F.collect_set("qos").alias("q")).collect()}
    mixed = [d for d, q in qos.items() if len(q) > 1]
    cls = F.col("qos").cast("string")
    if mixed:
        cls = F.when(F.col("device").isin(mixed), F.lit("mixed")).otherwise(cls)
    per_cls = {x["c"]: (x["n"], x["p"]) for x in
               r.groupBy(cls.alias("c")).agg(*aggs).collect()}
    v = F.expr("CASE WHEN abs(latency_ms) < 10000 THEN latency_ms ELSE "
               "CAST(round(latency_ms / pow(10, floor(log10(abs(latency_ms))) - 3))"
               " * pow(10, floor(log10(abs(latency_ms))) - 3) AS BIGINT) END")
    plot = {}
    for x in (r.where(F.col("latency_ms").isNotNull()).groupBy("qos", v.alias("v"))
              .count().collect()):
        plot.setdefault(str(x["qos"]), {})[x["v"]] = x["count"]
    return per_dev, per_cls, plot


def _latency_cols(row):
    p = [row["latency_p50_ms"], row["latency_p95_ms"], row["latency_p99_ms"]]
    return row["latency_samples"], (None if p[0] is None else p)


@pytest.mark.parametrize("landing_kind", ["fixture", "generated"])
def test_latency_figures_counted_in_python_equal_sparks_percentiles(
        batch, spark, tmp_path, landing_kind):
    # The health's percentiles, per device and per QoS class, and the
    # latency plot's counts come from one aggregate of per-value counts
    # (health.Figures); they must be the tables Spark's own exact
    # percentile gave, to the last bit. The generated landing has late
    # readings (latencies of hours, rounded for the plot) and 200 devices.
    from pyspark.sql import functions as F
    from pipeline import health
    if landing_kind == "fixture":
        out, summary = batch["out"], batch["summary"]
    else:
        landing, out = str(tmp_path / "landing"), str(tmp_path / "out")
        gen_landing.generate(landing, 30000, devices=200, seed=5, late_rate=0.01)
        summary = run_batch(spark, landing, out, plots=False)
    per_dev, per_cls, plot = _spark_latency_reference(spark, os.path.join(out, "readings"))
    assert {h["device"]: _latency_cols(h) for h in summary["health"]} == per_dev
    assert {q["qos"]: _latency_cols(q) for q in summary["qos"]} == per_cls
    dedup = spark.read.parquet(os.path.join(out, "readings")).withColumn(
        "copies", F.lit(1)).withColumn("collision", F.lit(False))
    assert health.Figures(dedup).plot == plot
    assert any(n > 1 for n, _ in per_dev.values())


def test_timeline_counts_taken_and_delivered_per_second(spark, tmp_path):
    # dev-a takes 3 readings in second 0 and 1 in second 2; two of them wait
    # in its outbox until second 3. The gap between the curves is the outbox.
    from pipeline import plots
    t0 = 1_700_000_000_000
    rows = [("dev-a", t0, t0 + 100), ("dev-a", t0 + 300, t0 + 3100),
            ("dev-a", t0 + 600, t0 + 3200), ("dev-a", t0 + 2000, t0 + 2100),
            ("dev-b", t0 + 1500, t0 + 1600)]
    df = spark.createDataFrame(rows, "device string, wall_ms long, rx_ms long")
    data = plots.timeline_data(df)
    assert data["t0_ms"] == t0
    assert data["devices"]["dev-a"] == ([3, 3, 4, 4], [1, 1, 2, 4])
    assert data["devices"]["dev-b"] == ([0, 1, 1, 1], [0, 1, 1, 1])
    path = str(tmp_path / "t.png")
    plots.plot_timeline(data, [(t0 + 1000, "power cut dev-a for 1.0 s"),
                               (t0 + 2500, "broker restart")], path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # Counted from the fleet's start, as its log times the faults.
    plots.plot_timeline(data, [(t0 + 1000, "broker restart")], path, origin_ms=t0 - 1300)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_stream_two_batches_matches_batch(batch, spark, tmp_path):
    # Spark's file source (the fallback): published files only, so the
    # hidden in-progress file is not read, as in batch mode.
    files = build_landing()
    landing = str(tmp_path / "landing")
    out = str(tmp_path / "out")
    first = [k for k in files if "hour=02" not in k
             and "date=2026-01-02" not in k]
    second = [k for k in files if k not in first]
    assert second
    write_files(landing, files, only=first)
    run_stream(spark, landing, out, source="files")
    n1 = spark.read.parquet(os.path.join(out, "readings")).count()
    write_files(landing, files, only=second)
    run_stream(spark, landing, out, source="files")
    cols = READING_COLS

    def rows(path):
        return sorted(tuple(r) for r in spark.read.parquet(path)
                      .select(*cols).collect())

    got = rows(os.path.join(out, "readings"))
    want = rows(os.path.join(batch["out"], "readings"))
    assert n1 < len(got)
    assert got == want
    rej = spark.read.parquet(os.path.join(out, "rejected"))
    assert rej.count() == len(MALFORMED)
    assert "batch" in rej.columns
    # Replaying is harmless: a third run finds nothing new.
    run_stream(spark, landing, out, source="files")
    assert rows(os.path.join(out, "readings")) == want
    # (The health of stream mode is run_batch's over the same landing.)


def test_generated_landing_matches_truth_and_duckdb(spark, tmp_path):
    # The one-pass batch (one scan, one aggregate, one cache) against what
    # the generator wrote and against DuckDB on the same landing: every
    # table and figure. QoS 2 devices' duplicates are all delivered at QoS
    # 2 here, so each one breaks the promise and is counted as such.
    from pipeline import duckdb_ref
    landing = str(tmp_path / "landing")
    out = str(tmp_path / "out")
    truth = gen_landing.generate(landing, 8000, devices=6, seed=3,
                                 loss_rate=0.01, dup_rate=0.02,
                                 late_rate=0.01, reboot_every=400,
                                 malformed=4, per_file=1000)
    s = run_batch(spark, landing, out, plots=False)
    assert s["lines"] == truth["lines"]
    assert s["rejected"] == truth["malformed"] == 4
    assert s["duplicates"] == truth["duplicates"]
    assert s["readings"] == truth["readings"]
    assert s["missing"] == truth["missing"] > 0
    q2 = {t["device"]: t["duplicates"] for t in truth["devices"] if t["qos"] == 2}
    assert s["qos2_duplicates"] == sum(q2.values()) > 0
    assert sum(r["copies"] - 1 for r in s["qos2_breaks"]) == sum(q2.values())
    got = {h["device"]: h for h in s["health"]}
    for t in truth["devices"]:
        h = got[t["device"]]
        for k in ("expected", "received", "missing", "duplicates",
                  "reboots", "first_seq", "last_seq", "latency_samples"):
            assert h[k] == t[k], (t["device"], k, h[k], t[k])
        assert h["gaps"] == t["gaps_text"], t["device"]
        assert h["qos"] == str(t["qos"])
        assert h["qos2_duplicates"] == q2.get(t["device"], 0)
    ref, _ = duckdb_ref.readings_per_device(landing)
    assert ref == {d: h["received"] + h["reused_seq"] for d, h in got.items()}
    # The tables on disk say the same as the summary.
    r = spark.read.parquet(os.path.join(out, "readings"))
    assert r.count() == truth["readings"]
    assert r.groupBy("device", "boot", "seq").count().where("count > 1").count() == 0
    assert spark.read.parquet(os.path.join(out, "rejected")).count() == 4
    h = {x["device"]: x for x in spark.read.parquet(os.path.join(out, "health")).collect()}
    assert {d: (x["received"], x["missing"], x["duplicates"], x["qos2_duplicates"])
            for d, x in h.items()} == {
        d: (x["received"], x["missing"], x["duplicates"], x["qos2_duplicates"])
        for d, x in got.items()}
    q = {x["qos"]: x for x in spark.read.parquet(os.path.join(out, "qos")).collect()}
    for level in (0, 1, 2):
        devs = [t for t in truth["devices"] if t["qos"] == level]
        row = q[str(level)]
        assert row["devices"] == len(devs)
        assert row["readings"] == sum(t["received"] for t in devs)
        assert row["missing"] == sum(t["missing"] for t in devs)
        assert row["duplicates"] == sum(t["duplicates"] for t in devs)
        assert row["qos2_duplicates"] == (sum(q2.values()) if level == 2 else 0)


def test_qos2_duplicates_counted_apart_with_cause(spark, tmp_path):
    # Exactly once is QoS 2 on both hops: a QoS 2 reading delivered twice
    # at QoS 2 breaks it; delivered at QoS 1 (the collector subscribed at
    # 1) it does not; a QoS 1 duplicate never does. The cause comes from
    # the copies (DUP: a redelivery; none: a new PUBLISH) and the faults.
    landing = str(tmp_path / "landing")
    f = "date=2026-01-01/hour=00/part-1-0.jsonl"

    def at(r, delivered):
        r["qos"] = delivered
        return r

    lines = [
        rec("dev-n", 1, 1, 2, H0 + 1000), rec("dev-n", 1, 2, 2, H0 + 2000),
        rec("dev-n", 1, 2, 2, H0 + 4500),                 # new PUBLISH
        rec("dev-r", 1, 7, 2, H0 + 1500),
        rec("dev-r", 1, 7, 2, H0 + 1900, dup=True),       # redelivered
        at(rec("dev-s", 1, 3, 2, H0 + 1000), 1),
        at(rec("dev-s", 1, 3, 2, H0 + 1200, dup=True), 1),
        rec("dev-t", 1, 5, 1, H0 + 1000), rec("dev-t", 1, 5, 1, H0 + 1100),
    ]
    write_files(landing, {f: [json.dumps(x) for x in lines]})
    s = run_batch(spark, landing, str(tmp_path / "out"), plots=False,
                  events=[(H0 + 3000, "broker restart")])
    assert s["duplicates"] == 4
    assert s["qos2_duplicates"] == 2
    got = {r["device"]: r for r in s["qos2_breaks"]}
    assert set(got) == {"dev-n", "dev-r"}
    assert "lost its QoS 2 state" in got["dev-n"]["cause"]
    assert "broker restart between the copies" in got["dev-n"]["cause"]
    assert "DUP set" in got["dev-r"]["cause"]
    assert "broker restart" not in got["dev-r"]["cause"]   # it came after
    assert {h["device"]: h["qos2_duplicates"] for h in s["health"]} == {
        "dev-n": 1, "dev-r": 1, "dev-s": 0, "dev-t": 0}
    with open(s["report"]) as fh:
        text = fh.read()
    assert "**QoS 2 exactly-once broken: 2 duplicate copies of 2 reading(s)**" in text
    assert "- `dev-n` b=1 s=2: 2 copies, the last 2500 ms after the first; a new PUBLISH" in text


def test_no_landing_files(tmp_path, spark):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as e:
        run_batch(spark, str(empty), str(tmp_path / "out"))
    assert "no landing files" in str(e.value)


@pytest.mark.parametrize("source", ["bytes", "files"])
def test_stream_follows_a_landing_being_written(spark, tmp_path, source):
    # Files appear (renamed in, as the collector publishes them) while the
    # stream runs with a processing-time trigger; it is stopped between
    # micro-batches once every reading is in readings/, and its readings
    # equal the batch's on the same landing.
    import threading
    staged = str(tmp_path / "staged")
    truth = gen_landing.generate(staged, 3000, devices=4, seed=11,
                                 dup_rate=0.05, per_file=300)
    files = sorted((os.path.join(r, f) for r, _, fs in os.walk(staged) for f in fs),
                   key=lambda p: (os.path.dirname(p), int(p.rsplit("-", 1)[1].split(".")[0])))
    assert len(files) >= 6
    landing = str(tmp_path / "landing")
    out = str(tmp_path / "out")
    stop = threading.Event()
    err = []

    def stream():
        try:
            run_stream(spark, landing, out, follow=True, interval="0.5 seconds",
                       stop_event=stop, source=source)
        except Exception as e:     # reported below
            err.append(e)

    os.makedirs(os.path.join(landing, "date=2026-01-01", "hour=00"))
    th = threading.Thread(target=stream)
    th.start()
    readings = os.path.join(out, "readings")
    try:
        for i, path in enumerate(files):
            dest = os.path.join(landing, os.path.relpath(path, staged))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.rename(path, dest)
            # The next file once the stream has taken this one in (a
            # micro-batch, and its marker, per new file): the landing grows
            # under the running query.
            for _ in range(1200):
                if len(glob_batches(out)) > i or err:
                    break
                th.join(0.1)
        for _ in range(1200):
            if err or (os.path.isdir(readings) and spark.read.parquet(readings).count()
                       >= truth["readings"]):
                break
            th.join(0.25)
    finally:
        stop.set()
        th.join(120)
    assert not th.is_alive()
    assert not err, err
    batch_out = str(tmp_path / "batch")
    run_batch(spark, landing, batch_out, plots=False)

    def rows(path):
        return sorted(tuple(r) for r in spark.read.parquet(path)
                      .select(*READING_COLS).collect())

    got = rows(readings)
    assert len(got) == truth["readings"]
    assert got == rows(os.path.join(batch_out, "readings"))
    # It followed, file by file (the bytes source also seals the closed hour
    # once it has taken its files: a micro-batch that reads nothing).
    if source == "files":
        assert len(glob_batches(out)) == len(files)
    else:
        assert len(glob_batches(out)) >= len(files)


def glob_batches(out):
    d = os.path.join(out, "_batches")
    return [f for f in os.listdir(d) if not f.startswith(".")] if os.path.isdir(d) else []


def reading_rows(spark, path):
    return sorted(tuple(r) for r in spark.read.parquet(path).select(*READING_COLS).collect())


def rejected_of(spark, path):
    return sorted(tuple(r) for r in spark.read.parquet(path).select(
        "file", "line", "rx_ms", "topic", "payload", "reason").collect())


def test_bytes_stream_takes_lines_in_progress_and_matches_batch(batch, spark, tmp_path):
    # The bytes source (pipeline.landed) reads the hidden in-progress file
    # too: dev-z's reading is streamed before its file is published. Once
    # the file is renamed (the collector's roll), a rerun takes nothing
    # again, and the stream's readings and rejected lines are the batch's
    # over the published landing. Ranges split every 700 bytes, mid-line.
    landing = str(tmp_path / "landing")
    out = str(tmp_path / "out")
    write_files(landing, build_landing())
    # The clock an hour ahead: a directory renamed into just now counts as
    # settled, so an hour taken whole is sealed at the next micro-batch.
    opts = {"splitBytes": 700, "nowMs": int(time.time() * 1000) + HOUR}
    run_stream(spark, landing, out, source="bytes", source_options=opts)
    got = reading_rows(spark, os.path.join(out, "readings"))
    assert [r for r in got if r[0] == "dev-z"] and len(got) == N_READINGS + 1
    hidden = os.path.join(landing, HIDDEN)
    os.rename(hidden, os.path.join(os.path.dirname(hidden), "part-3-0.jsonl"))
    last = run_stream(spark, landing, out, source="bytes", source_options=opts)
    assert reading_rows(spark, os.path.join(out, "readings")) == got
    # Its micro-batch read nothing: every hour closed and taken whole, so
    # sealed (never listed again).
    assert last["numInputRows"] == 0
    end = json.loads(last["sources"][0]["endOffset"])
    assert end["files"] == {} and sorted(end["sealed"]) == [
        "date=2026-01-01/hour=00", "date=2026-01-01/hour=02", "date=2026-01-02/hour=01"]
    # A file copied into a sealed hour (by hand: a collector writes only the
    # current hour) is streamed: the hour is read again, and what was taken
    # from it before is dropped as duplicates.
    late = rec("dev-a", 1, 105, 1, H0 + 2 * HOUR + 999, w=H0 + 105000)
    write_files(landing, {"date=2026-01-01/hour=02/part-9-0.jsonl": [json.dumps(late)]})
    run_stream(spark, landing, out, source="bytes", source_options=opts)
    got = reading_rows(spark, os.path.join(out, "readings"))
    assert len(got) == N_READINGS + 2
    published = str(tmp_path / "batch")
    run_batch(spark, landing, published, plots=False, compaction=False)
    assert got == reading_rows(spark, os.path.join(published, "readings"))
    assert rejected_of(spark, os.path.join(out, "rejected")) == \
        rejected_of(spark, os.path.join(published, "rejected"))
    assert len(rejected_of(spark, os.path.join(out, "rejected"))) == len(MALFORMED)


def test_bytes_stream_lands_each_reading_once_across_stream_and_collector_restarts(
        spark, tmp_path, monkeypatch):
    # A collector writes one in-progress file; the stream takes it while it
    # grows (a torn last line is not taken), crashes in a micro-batch after
    # Spark logged its offsets (before the write), the collector is killed
    # mid-line and restarted (its recovery cuts the torn line and renames the
    # file), the broker redelivers what was not acknowledged into a new file,
    # and the stream restarts: it replays the crashed micro-batch from the
    # renamed file, by its offsets, and goes on. Every reading is in
    # readings/ once, as the batch over the final landing has them.
    from pipeline import collector, stream
    staged = str(tmp_path / "staged")
    gen_landing.generate(staged, 3000, devices=4, seed=12, dup_rate=0.05, per_file=100000)
    lines = []
    for r, _, fs in sorted(os.walk(staged)):
        for f in sorted(fs):
            with open(os.path.join(r, f)) as fh:
                lines += fh.read().splitlines(True)
    assert len(lines) > 2500
    hour = os.path.join(tmp_path, "landing", "date=2026-01-01", "hour=00")
    os.makedirs(hour)
    landing = str(tmp_path / "landing")
    out = str(tmp_path / "out")
    me = os.getpid()
    part0 = os.path.join(hour, ".part-%d-0.jsonl.inprogress" % me)
    opts = {"splitBytes": 4096, "nowMs": int(time.time() * 1000) + HOUR}   # see above
    a, b, c = 900, 1800, len(lines)

    def append(path, text):
        with open(path, "a") as f:
            f.write(text)

    torn = lines[a][:40]
    append(part0, "".join(lines[:a]) + torn)
    run_stream(spark, landing, out, source="bytes", source_options=opts)
    first = reading_rows(spark, os.path.join(out, "readings"))
    assert 0 < len(first) <= a

    append(part0, lines[a][len(torn):] + "".join(lines[a + 1:b]))
    real_writer = stream.make_batch_writer

    class Crash(Exception):
        pass

    def crashing_writer(spark_, output_uri):
        def write(df, batch_id):
            raise Crash("killed in micro-batch %d" % batch_id)
        return write

    monkeypatch.setattr(stream, "make_batch_writer", crashing_writer)
    with pytest.raises(RuntimeError, match="killed in micro-batch 1"):
        run_stream(spark, landing, out, source="bytes", source_options=opts)
    monkeypatch.setattr(stream, "make_batch_writer", real_writer)
    offsets = os.path.join(out, "_checkpoint", "offsets")
    assert "1" in os.listdir(offsets)
    assert "1" not in os.listdir(os.path.join(out, "_checkpoint", "commits"))

    # The collector, killed while writing line b; its next start publishes
    # the file without the torn line; the broker sends again what was not
    # acknowledged (from b - 50: some of it landed already).
    append(part0, lines[b][:25])
    renamed, dropped = collector.recover_inprogress(landing)
    assert (renamed, dropped) == (1, 25)
    part1 = os.path.join(hour, ".part-%d-1.jsonl.inprogress" % me)
    append(part1, "".join(lines[b - 50:c]))
    run_stream(spark, landing, out, source="bytes", source_options=opts)
    os.rename(part1, os.path.join(hour, "part-%d-1.jsonl" % me))
    run_stream(spark, landing, out, source="bytes", source_options=opts)
    got = reading_rows(spark, os.path.join(out, "readings"))
    published = str(tmp_path / "batch")
    run_batch(spark, landing, published, plots=False, compaction=False)
    want = reading_rows(spark, os.path.join(published, "readings"))
    assert got == want
    assert len(set(r[:3] for r in got)) == len(got)
    assert set(first) <= set(got)


def listening_ports(pid):
    """The TCP ports process pid listens on (its sockets in /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:      # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_standalone_cluster_gives_the_local_results(spark, tmp_path):
    # A Spark standalone master and two workers (1 core each) on 127.0.0.1,
    # from the pyspark installation; the pipeline's command line with
    # --master spark://... must write the same tables as local mode. The
    # daemons are stopped by pid whatever happens (LocalCluster).
    import subprocess
    import sys
    from pipeline.cluster import LocalCluster
    landing = str(tmp_path / "landing")
    gen_landing.generate(landing, 6000, devices=5, seed=21, dup_rate=0.03,
                         loss_rate=0.01, malformed=3, per_file=800)
    local_out = str(tmp_path / "local")
    run_batch(spark, landing, local_out, plots=False)
    cluster_out = str(tmp_path / "cluster")
    tools = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")
    with LocalCluster(workers=2, cores=1, memory="1g", workdir=str(tmp_path / "spark")) as c:
        # The master listens on its RPC port and its web UI only: no REST
        # submission server (which ran any driver an unauthenticated POST
        # asked for), on 6066 or elsewhere.
        master = c.procs[0][1].pid
        ports = listening_ports(master)
        assert c.port in ports and len(ports) == 2 and 6066 not in ports, ports
        with open(c.procs[0][2]) as f:
            assert "REST server" not in f.read()
        r = subprocess.run(
            [sys.executable, "-m", "pipeline", "--master", c.url, "--input", landing,
             "--output", cluster_out, "--no-plots", "--driver-memory", "1g",
             "--shuffle-partitions", "4"],
            env=dict(os.environ, PYTHONPATH=tools), capture_output=True, text=True,
            timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        # Work ran on the workers: each started an executor for the app.
        started = [d for w in ("worker-1", "worker-2")
                   for d in os.listdir(str(tmp_path / "spark" / w)) if d.startswith("app-")]
        assert len(started) == 2, started
    assert "pipeline: batch pass done" in r.stderr

    def table(root, name, drop=()):
        df = spark.read.parquet(os.path.join(root, name))
        cols = sorted(c for c in df.columns if c not in drop)
        return sorted(tuple(str(v) for v in row) for row in df.select(*cols).collect())

    for name in ("readings", "health", "qos", "rejected"):
        assert table(cluster_out, name) == table(local_out, name), name


HIDDEN = "date=2026-01-01/hour=00/.part-3-0.jsonl.inprogress"
OPEN_NOW = H0 + 25 * HOUR + 60000     # 2026-01-02 01:01: that hour is still open


def tables(spark, out):
    got = {}
    for name in ("readings", "health", "qos", "rejected"):
        df = spark.read.parquet(os.path.join(out, name))
        cols = sorted(df.columns)
        got[name] = sorted(tuple(str(v) for v in row) for row in df.select(*cols).collect())
    return got


def counts(summary):
    return {k: summary[k] for k in ("lines", "valid", "rejected", "duplicates", "readings",
                                     "devices", "missing", "qos2_duplicates")}


def manifests(landing):
    root = os.path.join(landing, "_compacted")
    found = {}
    for day in sorted(os.listdir(root)):
        if day.startswith("day="):
            for hour in sorted(os.listdir(os.path.join(root, day))):
                with open(os.path.join(root, day, hour, "_manifest.json")) as f:
                    found[day + "/" + hour] = json.load(f)
    return found


def test_compaction_gives_the_same_tables_and_parses_each_closed_hour_once(spark, tmp_path):
    # Every hour of the test landing but the last is closed at OPEN_NOW
    # (the in-progress file, which would keep its hour open, is left out).
    files = build_landing()
    del files[HIDDEN]
    landing = str(tmp_path / "landing")
    write_files(landing, files)
    plain = run_batch(spark, landing, str(tmp_path / "plain"), plots=False, compaction=False)
    assert plain["sources"] == {"hours_from_parquet": 0, "json_files_read": 4,
                                "hours_compacted_now": []}
    assert not os.path.exists(os.path.join(landing, "_compacted"))
    first = run_batch(spark, landing, str(tmp_path / "first"), plots=False, now_ms=OPEN_NOW)
    assert first["sources"] == {"hours_from_parquet": 2, "json_files_read": 1,
                                "hours_compacted_now": ["2026-01-01 00", "2026-01-01 02"]}
    made = manifests(landing)
    assert sorted(made) == ["day=2026-01-01/hour=00", "day=2026-01-01/hour=02"]
    # The compacted hours' JSON files, overwritten with lines of the same
    # length that are not landing records (size and time kept): read again,
    # they would be rejected lines. The rerun must not read them.
    for rel in files:
        if rel.startswith("date=2026-01-01/"):
            path = os.path.join(landing, rel)
            st = os.stat(path)
            with open(path, "r+") as f:
                f.write("x" * (st.st_size - 1) + "\n")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = run_batch(spark, landing, str(tmp_path / "second"), plots=False, now_ms=OPEN_NOW)
    assert second["sources"] == {"hours_from_parquet": 2, "json_files_read": 1,
                                 "hours_compacted_now": []}
    assert manifests(landing) == made            # nothing compacted again
    want = tables(spark, str(tmp_path / "plain"))
    assert tables(spark, str(tmp_path / "first")) == want
    assert tables(spark, str(tmp_path / "second")) == want
    assert counts(first) == counts(second) == counts(plain)
    assert [r["device"] for r in second["health"]] == [r["device"] for r in plain["health"]]
    # The compacted table reads as a table, partitioned by day and hour.
    c = spark.read.parquet(os.path.join(landing, "_compacted"))
    assert {"day", "hour", "device", "ok"} <= set(c.columns)
    assert c.count() == plain["lines"] - 1       # all but the open hour's one line


def test_a_crash_or_a_damaged_compaction_loses_and_doubles_nothing(spark, tmp_path, monkeypatch):
    from pipeline import compact
    files = build_landing()
    del files[HIDDEN]
    landing = str(tmp_path / "landing")
    write_files(landing, files)
    want = _run(spark, landing, tmp_path, "plain", compaction=False)[1]

    class Crash(BaseException):
        pass

    rename = compact._FS.rename

    def crash_at_second_commit(self, src, dst):
        # The process dies once hour 02's Parquet and manifest are in
        # staging, before the rename that commits them; hour 00 committed.
        if "/_staging/" in src and dst.endswith("/day=2026-01-01/hour=02"):
            raise Crash()
        rename(self, src, dst)

    monkeypatch.setattr(compact._FS, "rename", crash_at_second_commit)
    with pytest.raises(Crash):
        run_batch(spark, landing, str(tmp_path / "crashed"), plots=False)
    monkeypatch.setattr(compact._FS, "rename", rename)
    assert os.listdir(os.path.join(landing, "_compacted", "_staging"))
    assert sorted(manifests(landing)) == ["day=2026-01-01/hour=00"]
    s, got = _run(spark, landing, tmp_path, "after-crash")
    assert s["sources"] == {"hours_from_parquet": 3, "json_files_read": 0,
                            "hours_compacted_now": ["2026-01-01 02", "2026-01-02 01"]}
    assert got == want
    assert not os.path.exists(os.path.join(landing, "_compacted", "_staging"))
    # A committed hour's Parquet cut short: that hour is read from JSON and
    # compacted again.
    unit = os.path.join(landing, "_compacted", "day=2026-01-01", "hour=00")
    part = [f for f in os.listdir(unit) if f.endswith(".parquet")][0]
    with open(os.path.join(unit, part), "r+b") as f:
        f.truncate(100)
    s, got = _run(spark, landing, tmp_path, "after-damage")
    assert s["sources"]["hours_compacted_now"] == ["2026-01-01 00"]
    assert got == want
    # A file that turns up in a compacted hour (a dead collector's
    # in-progress file, renamed by the next collector start) is read: the
    # hour is compacted again with it.
    late = rec("dev-a", 1, 105, 1, H0 + 2 * HOUR + 999, w=H0 + 105000)
    write_files(landing, {"date=2026-01-01/hour=02/part-9-0.jsonl": [json.dumps(late)]})
    s, got = _run(spark, landing, tmp_path, "late-file")
    assert s["sources"]["hours_compacted_now"] == ["2026-01-01 02"]
    assert s["readings"] == N_READINGS + 1
    assert got == _run(spark, landing, tmp_path, "late-plain", compaction=False)[1]


def _run(spark, landing, tmp_path, name, **kw):
    """run_batch's summary and its tables."""
    out = str(tmp_path / name)
    return run_batch(spark, landing, out, plots=False, **kw), tables(spark, out)


def test_an_hour_is_compacted_once_it_is_over_and_has_no_file_in_progress(spark, tmp_path):
    # Hour 00 holds a hidden in-progress file (a collector still writing,
    # or one that died and whose file the next start renames into place):
    # open however old. Hour 02 is open until GRACE_MS after it ended.
    from pipeline import compact
    landing = str(tmp_path / "landing")
    write_files(landing, build_landing())
    end_02 = H0 + 3 * HOUR
    s = compact.prepare(spark, landing, now_ms=end_02 + compact.GRACE_MS - 1).summary()
    assert s == {"hours_from_parquet": 0, "json_files_read": 4, "hours_compacted_now": []}
    s = compact.prepare(spark, landing, now_ms=end_02 + compact.GRACE_MS).summary()
    assert s == {"hours_from_parquet": 1, "json_files_read": 3,
                 "hours_compacted_now": ["2026-01-01 02"]}
    s = compact.prepare(spark, landing, now_ms=H0 + 100 * HOUR).summary()
    assert s == {"hours_from_parquet": 2, "json_files_read": 2,     # hour 00's two files
                 "hours_compacted_now": ["2026-01-02 01"]}


# -- the contract at the door, and what the data path no longer trusts -------

def test_the_contract_cases_on_sparks_side(spark):
    # The cases test_collector.py checks on the collector's side
    # (door_cases): Spark's columns give the same verdict and the same words.
    from pyspark.sql import functions as F
    from pipeline import contract
    import door_cases
    df = spark.createDataFrame([(p, t) for p, t, _ in door_cases.CASES],
                               "payload string, topic string")
    got = df.select(contract.spark_ok(F.col("payload"), F.col("topic")).alias("ok"),
                    F.concat_ws("; ", contract.spark_problems(F.col("payload"), F.col("topic")))
                    .alias("why")).collect()
    for (payload, topic, want), r in zip(door_cases.CASES, got):
        assert (r["ok"], r["why"]) == (not want, "; ".join(want)), (payload[:80], topic)


def _publish_all(pub, msgs):
    infos = [pub.publish(topic, payload, qos=q) for topic, payload, q in msgs]
    for i in infos:
        i.wait_for_publish(10)


def test_a_hostile_corpus_is_quarantined_and_the_proof_of_loss_stays_true(
        mosquitto, spark, tmp_path, monkeypatch):
    # Through a real broker and collector into the pipeline: every case of
    # door_cases that a broker carries on a topic the collector subscribes,
    # invalid UTF-8, a message the collector's own code fails on, next to
    # good readings of devices whose one lost reading the report must name.
    # Beside the collector's files, a landing file of the same cases as
    # another writer could leave them: the pipeline rejects each with the
    # collector's words.
    import paho.mqtt.client as mqtt
    import door_cases
    from pipeline import collector as C
    from pipeline import contract
    landing = str(tmp_path / "landing")
    real = contract.problems

    def problems(text, topic, fast=True):
        if text == "boom":
            raise RecursionError("maximum recursion depth exceeded")
        return real(text, topic, fast)

    monkeypatch.setattr(contract, "problems", problems)
    col = C.Collector(mosquitto.host, mosquitto.port, landing, client_id="test-hostile",
                      progress_s=0, log=lambda line: None).start()
    good, bad = [], []
    sent = {}
    for dev, q, n, lost in (("good-1", 1, 30, {7}), ("good-2", 2, 20, set()),
                            ("good-0", 0, 10, set())):
        for s in range(n):
            if s in lost:
                continue
            p = '{"d":"%s","b":1,"s":%d,"q":%d,"t":21.5,"u":%d,"w":%d}' % (
                dev, s, q, s, H0 + s)
            good.append(("holdfast/%s/telemetry" % dev, p, q))
            sent[(dev, s)] = q
    subscribed = re.compile(r"^holdfast/[^/+#]+/telemetry$")
    for payload, topic, want in door_cases.CASES:
        if want and subscribed.match(topic):
            bad.append((topic, payload, 1))
    bad.append(("holdfast/dev-a/telemetry", b'{"d":"dev-\xff","b":1,"s":2,"q":1}', 2))
    bad.append(("holdfast/dev-a/telemetry", "boom", 1))
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-pub-hostile")
    pub.max_queued_messages_set(0)
    pub.connect(mosquitto.host, mosquitto.port)
    pub.loop_start()
    try:
        mixed = []
        for i in range(max(len(good), len(bad))):
            mixed += good[i:i + 1] + bad[i:i + 1]
        _publish_all(pub, mixed)
        deadline = time.monotonic() + 60
        while col.stats()["written"] + col.stats()["quarantined"] < len(mixed):
            assert time.monotonic() < deadline, col.stats()
            assert col._thread.is_alive(), col._error
            time.sleep(0.05)
    finally:
        pub.loop_stop()
        pub.disconnect()
    col.stop()
    st = col.stats()
    assert (st["written"], st["quarantined"]) == (len(good), len(bad)), st
    quarantined = {}
    for path in glob.glob(os.path.join(landing, "quarantine", "*.jsonl")):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                quarantined[(r["topic"], r["payload"])] = r["reason"]
    for topic, payload, _ in bad:
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        reason = quarantined[(topic, text)]
        want = [w for p, t, w in door_cases.CASES if (p, t) == (payload, topic)]
        if want:
            assert reason == "; ".join(want[0]), (payload[:60], reason)
        elif text == "boom":
            assert reason.startswith("the collector could not handle this message "
                                     "(RecursionError"), reason
        else:
            assert reason == contract.R_NOT_UTF8
    # The same cases as a landing file that did not come from the collector.
    other = os.path.join(landing, "date=2026-01-01", "hour=00", "part-999-0.jsonl")
    rejected_want = {}
    os.makedirs(os.path.dirname(other))
    with open(other, "w") as f:
        for i, (payload, topic, want) in enumerate(door_cases.CASES):
            if want:
                f.write(json.dumps({"topic": topic, "qos": 1, "retain": False, "dup": False,
                                    "rx_ms": H0 + i, "payload": payload}) + "\n")
                rejected_want[(topic, payload)] = "; ".join(want)
    monkeypatch.setattr(contract, "problems", real)
    out = str(tmp_path / "out")
    summary = run_batch(spark, landing, out)
    assert summary["valid"] == len(good) == len(sent)
    assert summary["quarantined"] == len(bad)
    assert summary["rejected"] == len(rejected_want)
    rej = {(r["topic"], r["payload"]): r["reason"]
           for r in spark.read.parquet(os.path.join(out, "rejected")).collect()}
    assert rej == rejected_want
    health = {h["device"]: h for h in summary["health"]}
    assert health["good-1"]["missing"] == 1 and health["good-1"]["gaps"] == "7"
    assert health["good-2"]["missing"] == 0 and health["good-2"]["received"] == 20
    assert sorted(health) == ["good-0", "good-1", "good-2"]
    assert sum(h["received"] for h in health.values()) == len(sent)
    with open(summary["report"]) as f:
        report = f.read()
    assert "**QoS 1/2 delivery: 1 reading(s) lost on 1 device(s)**" in report
    assert "- `good-1` (QoS 1): 1 missing: 7" in report
    lines = report.split("\n")
    row = lines[lines.index("## Summary") + 4]
    assert row.strip("| ").split(" | ")[-1] == str(len(bad))   # quarantined by collector
    assert row.strip("| ").split(" | ")[2] == str(len(rejected_want))
    q_rows = [ln for ln in report.split("## Collector quarantine")[1].split("## Tables")[0]
              .splitlines() if ln.startswith("| ") and ln != "| reason | messages |"]
    assert sum(int(ln.strip("| ").rsplit(" | ", 1)[1]) for ln in q_rows) == len(bad)


def test_loss_is_counted_per_boot_and_a_key_collision_is_no_duplicate(spark, tmp_path):
    # good-r: boot 1 s 0..19, then boot 2 starts s at 0 again and loses
    # 5-9: 5 lost (counted over s across boots, they hid under boot 1's).
    # wiped: its state file wiped, b and s start again; 10 different
    # readings under the keys of 10 older ones: key collisions, not
    # duplicates. cont: s goes on across a reboot, 2 lost between the boots.
    lines = []
    for s in range(20):
        lines.append(rec("good-r", 1, s, 1, H0 + s))
        if s not in range(5, 10):
            lines.append(rec("good-r", 2, s, 1, H0 + 1000 + s))
    for s in range(10):
        lines.append(rec("wiped", 1, s, 1, H0 + s))
        r = rec("wiped", 1, s, 1, H0 + 5000 + s)
        r["payload"] = r["payload"].replace('"u":', '"u":9')
        lines.append(r)
    lines.append(rec("wiped", 1, 3, 1, H0 + 3, dup=True))     # a real copy
    for b, s in ((1, 0), (1, 1), (1, 2), (2, 5), (2, 6)):
        lines.append(rec("cont", b, s, 1, H0 + s))
    landing = str(tmp_path / "landing")
    write_files(landing, {"date=2026-01-01/hour=00/part-1-0.jsonl": [json.dumps(x) for x in lines]})
    out = str(tmp_path / "out")
    s = run_batch(spark, landing, out, plots=False)
    h = {r["device"]: r for r in s["health"]}
    assert (h["good-r"]["expected"], h["good-r"]["received"], h["good-r"]["missing"]) == (40, 35, 5)
    assert h["good-r"]["gaps"] == "5-9"
    assert (h["cont"]["missing"], h["cont"]["gaps"]) == (2, "3-4")
    assert (h["wiped"]["key_collisions"], h["wiped"]["duplicates"]) == (10, 0)
    assert (s["key_collisions"], s["collided_readings"], s["duplicates"]) == (10, 11, 0)
    q1 = [r for r in s["qos"] if r["qos"] == "1"][0]
    assert (q1["expected"], q1["missing"]) == (40 + 10 + 5 + 2, 7)
    with open(s["report"]) as f:
        report = f.read()
    assert "**QoS 1/2 delivery: 7 reading(s) lost on 2 device(s)**" in report
    assert "**Key collisions: 10 key(s) (d, b, s) carry different readings" in report


def test_a_failed_table_write_leaves_the_last_good_table(batch, spark, tmp_path, monkeypatch):
    # A run whose readings write fails in the middle of its job (as a
    # partition value the file system refuses did): the last run's tables
    # are still there (an overwrite used to delete them first).
    from pyspark.sql import functions as F
    from pipeline import batch as B
    from pipeline.session import write_atomically
    out = str(tmp_path / "out")
    shutil.copytree(batch["out"], out)
    boom = F.when(F.col("seq") >= 0, F.raise_error(F.lit("disk full"))).alias("boom")
    monkeypatch.setattr(B, "READING_COLS", READING_COLS + [boom])
    with pytest.raises(Exception) as e:
        run_batch(spark, batch["landing"], out, plots=False)
    assert "disk full" in str(e.value)
    assert spark.read.parquet(os.path.join(out, "readings")).count() == N_READINGS
    assert not [n for n in os.listdir(out) if n.startswith("_tmp-")]
    # and a table is replaced when its write succeeds
    uri = str(tmp_path / "t")
    write_atomically(spark, uri, lambda u: spark.range(3).write.parquet(u))
    write_atomically(spark, uri, lambda u: spark.range(4).write.parquet(u))
    assert spark.read.parquet(uri).count() == 4


def test_a_replayed_micro_batch_writes_its_readings_once(spark, tmp_path):
    # Killed after a micro-batch's write and before its marker: the replay
    # (same batch id, same rows) replaces what it wrote.
    from pipeline.landing import parse_landing, read_landing
    from pipeline.stream import make_batch_writer, streaming_readings
    landing = str(tmp_path / "landing")
    write_files(landing, {"date=2026-01-01/hour=00/part-1-0.jsonl":
                          [json.dumps(rec("dev-s", 1, s, 1, H0 + s)) for s in range(50)]})
    out = str(tmp_path / "out")
    rows = streaming_readings(parse_landing(read_landing(spark, [landing + "/date=*/hour=*/*"])))
    write = make_batch_writer(spark, out)
    write(rows, 3)
    os.remove(os.path.join(out, "_batches", "3"))   # the marker never written
    write(rows, 3)
    assert spark.read.parquet(os.path.join(out, "readings")).count() == 50


def test_a_clock_years_off_bounds_the_timeline_by_the_data(spark):
    from pipeline import plots
    t0 = 1_700_000_000_000
    month = 30 * 86400 * 1000
    rows = [("dev-a", t0 - month, t0 + 100), ("dev-a", t0, t0 + 200), ("dev-b", t0, t0 + 300)]
    df = spark.createDataFrame(rows, "device string, wall_ms long, rx_ms long")
    data = plots.timeline_data(df)
    taken, delivered = data["devices"]["dev-a"]
    assert len(taken) <= 601 and taken[-1] == 2 and delivered[-1] == 2
    assert data["step_s"] * len(taken) * 1000 >= month


HOSTILE_NAMES = ["a`b", "x\n\n<script>alert(1)</script>", "[click](javascript:alert(1))",
                 "$\\foo{$", "p|q", "<img src=x onerror=alert(1)>", "line\u2028break"]


def test_device_text_is_text_in_the_report_and_the_plots(tmp_path):
    from pipeline import plots
    from pipeline.report import write_report
    rows = [dict(device=d, qos="1", first_seq=0, last_seq=2, expected=3, received=2,
                 missing=1, gap_count=1, gaps="1", gap_ranges=[{"lo": 1, "hi": 1}],
                 duplicates=0, qos2_duplicates=0, reused_seq=1, key_collisions=1,
                 reboots=0, latency_samples=0, latency_p50_ms=None, latency_p95_ms=None,
                 latency_p99_ms=None, negative_latency=0, first_rx_ms=0, last_rx_ms=1)
            for d in HOSTILE_NAMES]
    summary = {"mode": "batch", "input": "in`put\n# x", "output": "out", "lines": 1,
               "valid": 1, "rejected": 1, "duplicates": 0, "qos2_duplicates": 0,
               "readings": 1, "devices": len(rows), "quarantined": 1, "no_w_readings": 1,
               "negative_latency": 0, "collided_readings": 1}
    examples = [{"reason": "why <b>", "payload": d, "line": d, "file": "f<i>.jsonl"}
                for d in HOSTILE_NAMES]
    path = str(tmp_path / "report.md")
    write_report(path, summary, rows, [], [["why\n<b>", 1]], examples,
                 [["q <script>", 1]], [r["device"] for r in rows], None, None)
    with open(path) as f:
        text = f.read()
    assert "<script" not in text and "<img" not in text and "<b>" not in text
    assert not re.search(r"(?<!\\)\]\(javascript:", text) and "\u2028" not in text
    assert "\n# x" not in text and "\n\n<" not in text
    lines = text.split("\n")
    for name in HOSTILE_NAMES:
        # a name is never a line of its own, nor splits a table row
        assert name not in lines
    device_rows = [ln for ln in lines if " | 0-2 | " in ln]    # the per-device table
    assert len(device_rows) == len(HOSTILE_NAMES)
    assert {len(re.findall(r"(?<!\\)\|", ln)) for ln in device_rows} == {12}
    png = str(tmp_path / "d.png")
    plots.plot_delivery(rows, png)             # math markup in a name raised
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_file_recovered_a_week_late_is_read_by_the_stream(spark, tmp_path):
    # A dead collector's file, last written 8 days before a stream's newest
    # file, recovered now: the stream reads it (Spark's file source skips
    # what is older than the newest file it saw by maxFileAge, 7 days, and
    # a rename keeps the old mtime).
    from pipeline.collector import recover_inprogress
    landing = str(tmp_path / "landing")
    out = str(tmp_path / "out")
    write_files(landing, {"date=2026-01-01/hour=00/part-1-0.jsonl":
                          [json.dumps(rec("dev-n", 1, s, 1, H0 + s)) for s in range(5)]})
    run_stream(spark, landing, out)
    late = os.path.join(landing, "date=2026-01-01", "hour=00", ".part-%d-0.jsonl.inprogress"
                        % (2 ** 22 + 7))
    with open(late, "w") as f:
        f.write("".join(json.dumps(rec("dev-o", 1, s, 1, H0 + s)) + "\n" for s in range(3)))
    week_ago = time.time() - 8 * 86400
    os.utime(late, (week_ago, week_ago))
    assert recover_inprogress(landing) == (1, 0)
    run_stream(spark, landing, out)
    devices = sorted(r["device"] for r in spark.read.parquet(os.path.join(out, "readings"))
                     .select("device").collect())
    assert devices == ["dev-n"] * 5 + ["dev-o"] * 3

# End to end: a short demo with every kind of fault on, through the real
# broker, collector and PySpark pipeline. Nothing published at QoS 1 or 2 may
# be lost, and the readings table must hold each reading once.
import os

from fleet import demo
from pipeline.session import spark_session


def test_short_demo_with_faults_loses_nothing_and_dedups(tmp_path):
    out = str(tmp_path / "demo")
    v = demo.run(boards=3, duration=25, seed=11, out=out, interval_ms=150)
    assert v["problems"] == []
    assert v["lost"] == 0
    assert sum(v["faults"].values()) >= 2, v["faults"]
    assert v["readings"] > 3 * 100
    spark = spark_session("local[2]")
    try:
        r = spark.read.parquet(os.path.join(out, "tables", "readings"))
        total = r.count()
        distinct = r.select("device", "boot", "seq").distinct().count()
    finally:
        spark.stop()
    assert total == distinct == v["readings"]

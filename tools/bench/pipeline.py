"""Bench section: the PySpark pipeline on local[1] and local[2] at 1M and 4M
generated landing records (pipeline_timing.py here), with a reference
computed without Spark (DuckDB, tools/pipeline/duckdb_ref.py) on the same
landing, so Spark's cost reads as a ratio."""

import shutil
import tempfile

from bench import pipeline_timing

TITLE = "Pipeline: Spark on local[1] and local[2] against DuckDB on one machine"


def run(ctx):
    sizes = [20000, 80000] if ctx.quick else [1000000, 4000000]
    runs = {}
    for master in ("local[1]", "local[2]"):
        work = tempfile.mkdtemp(prefix="hf-pipeline-bench-")
        ctx.log("%s: generating and running %s records (checked against the generator's truth "
                "and against DuckDB)" % (master, " and ".join(str(n) for n in sizes)))
        try:
            runs[master] = pipeline_timing.run(sizes, master, 100, work, False, "3g")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    one, two = runs["local[1]"], runs["local[2]"]
    md = ["| records | landing MB | Spark local[1] s | Spark local[2] s | DuckDB s (same counts) "
          "| local[2] / DuckDB | local[1] / local[2] | local[2] warm, compacted s "
          "| warm / DuckDB | Spark local[2] on DuckDB's work / DuckDB | local[2] records/s |",
          "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for a, b in zip(one, two):
        md.append("| %d | %.0f | %.1f | %.1f | %.2f | %.1fx | %.2fx | %.1f | %.1fx | %.1fx | %.0f |" % (
            b["records"], b["mb"], a["seconds"], b["seconds"], b["duckdb_seconds"],
            b["seconds"] / b["duckdb_seconds"], a["seconds"] / b["seconds"],
            b["warm_seconds"], b["warm_seconds"] / b["duckdb_seconds"],
            b["spark_ref_seconds"] / b["duckdb_seconds"], b["records"] / b["seconds"]))
    a, b = two[0], two[-1]
    ratio = b["seconds"] / a["seconds"]
    grows = b["records"] / a["records"]
    md += ["", "DuckDB computes only the distinct readings per device (checked equal to Spark's); "
           "the Spark pipeline also writes Parquet tables, health, the report and its plots. "
           "Spark columns are the batch parsing every line from JSON; warm is a rerun over "
           "the landing compacted to Parquet (pipeline.compact). "
           "On local[2], %d records took %.2fx the time of %d (%.1fx the records)." % (
               b["records"], ratio, a["records"], grows)]
    return {"markdown": "\n".join(md),
            "data": {"runs": runs, "time_ratio": ratio}, "targets": []}

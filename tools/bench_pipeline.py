"""Bench section: PySpark pipeline throughput on local[2] at 1M and 4M
generated landing records (tools/pipeline_bench.py), and how the time grows
with size."""

import shutil
import tempfile

import pipeline_bench

TITLE = "Pipeline: records per second on local[2]"


def run(ctx):
    sizes = [20000, 80000] if ctx.quick else [1000000, 4000000]
    work = tempfile.mkdtemp(prefix="hf-pipeline-bench-")
    ctx.log("generating and running %s records (checked against the generator's truth)"
            % " and ".join(str(n) for n in sizes))
    try:
        res = pipeline_bench.run(sizes, "local[2]", 100, work, False, "3g")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    md = ["| records | landing MB | pipeline s | records/s |", "| ---: | ---: | ---: | ---: |"]
    for r in res:
        md.append("| %d | %.0f | %.1f | %.0f |" % (r["records"], r["mb"], r["seconds"], r["records"] / r["seconds"]))
    a, b = res[0], res[-1]
    ratio = b["seconds"] / a["seconds"]
    grows = b["records"] / a["records"]
    md += ["", "%d records took %.2fx the time of %d (%.1fx the records): the cost grows %s "
           "linearly at these sizes%s." % (
               b["records"], ratio, a["records"], grows,
               "less than" if ratio < grows else "more than",
               ", the fixed part (Spark jobs, Parquet and report writing) still weighs"
               if ratio < grows else "")]
    return {"markdown": "\n".join(md), "data": {"runs": res, "time_ratio": ratio}, "targets": []}

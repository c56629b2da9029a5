"""PySpark pipeline: landing files -> readings, delivery health, report.

Input: the collector's landing (docs/telemetry.md), any URI Spark reads; the
files read are `<input>/date=*/hour=*/*.jsonl` (hidden in-progress files are
skipped); the batch keeps the landing's closed hours, parsed once, as
Parquet under `<input>/_compacted` and reads them from there.  Output,
under OUT_URI:

    readings/   Parquet, partitioned by day (UTC date of rx_ms) and device
                (stream mode: by day and micro-batch): one row per (device,
                boot, seq), the earliest received copy
    health/     Parquet, one row per device: expected/received/missing,
                gaps, duplicates, reboots, latency percentiles
    qos/        Parquet, the same per QoS
    rejected/   Parquet, landing lines that are not valid readings, with a
                reason in words (nothing is dropped silently)

and a Markdown report with PNG plots (default OUT/report.md when OUT is a
local path).  `--mode stream` runs Structured Streaming over the landing
(checkpointed; de-duplicated in the streaming plan, one append per
micro-batch), then computes health and the report with a batch pass.
See docs/pipeline.md and README.md here.

One module a step: contract (what a reading is, for the collector and the
pipeline alike), session (Spark, URIs, progress), landing (read and parse the
landing, rejected lines), compact (closed hours parsed once into
Parquet), dedup, health, report, batch and stream
(the two ways to run them), __main__ (the command line); beside them the
collector that writes the landing, gen_landing (synthetic landings), plots,
duckdb_ref (the result without Spark, for the bench), cluster (a standalone
Spark cluster on this machine).
"""

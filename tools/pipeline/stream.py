"""Structured Streaming over the landing: each micro-batch de-duplicated
against the readings already written and appended (checkpointed)."""

import threading
import time

from pipeline.dedup import KEY, READING_COLS, deduplicate
from pipeline.landing import parse_landing, read_landing_stream, rejected_rows
from pipeline.session import join, log, path_exists


def _readings_exist(spark, output_uri):
    return path_exists(spark, join(output_uri, "readings", "_SUCCESS")) \
        or path_exists(spark, join(output_uri, "readings", "day=*"))


def make_batch_writer(spark, output_uri):
    """foreachBatch function: de-duplicate against written readings, append.

    Idempotent per batch id: a replayed micro-batch (after a crash before
    the checkpoint commit) finds its readings already written and adds none;
    its rejected lines go to `rejected/batch=<id>/`, overwritten.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    readings_uri = join(output_uri, "readings")

    def write_batch(batch_df, batch_id):
        t = time.monotonic()
        parsed = parse_landing(batch_df).persist(StorageLevel.MEMORY_AND_DISK)
        n_lines = parsed.count()
        if n_lines == 0:
            parsed.unpersist()
            return
        rejected = rejected_rows(parsed)
        n_bad = rejected.count()
        if n_bad:
            rejected.coalesce(1).write.mode("overwrite").parquet(
                join(output_uri, "rejected", "batch=%d" % batch_id))
        new = deduplicate(parsed.where("ok")).drop("copies")
        if _readings_exist(spark, output_uri):
            devices = [r["device"] for r in
                       new.select("device").distinct().collect()]
            old = (spark.read.parquet(readings_uri)
                   .where(F.col("device").isin(devices)).select(*KEY))
            new = new.join(old, KEY, "left_anti")
        new = new.select(*READING_COLS).persist()
        n_new = new.count()
        if n_new:
            (new.repartition("day", "device").write.mode("append")
             .partitionBy("day", "device").parquet(readings_uri))
        log("stream batch %d: %d lines, %d new readings, %d duplicates, "
            "%d rejected (%.1fs)" % (batch_id, n_lines, n_new,
                                     n_lines - n_bad - n_new, n_bad,
                                     time.monotonic() - t))
        new.unpersist()
        parsed.unpersist()

    return write_batch


def run_stream(spark, input_uri, output_uri, checkpoint=None, follow=False,
               interval="10 seconds", duration=None, max_files=None,
               stop_event=None):
    """Structured Streaming over the landing; returns when caught up
    (default, trigger availableNow) or, with follow, on stop_event/duration.
    """
    checkpoint = checkpoint or join(output_uri, "_checkpoint")
    src = read_landing_stream(spark, input_uri, max_files)
    w = (src.writeStream.foreachBatch(make_batch_writer(spark, output_uri))
         .option("checkpointLocation", checkpoint))
    if follow:
        w = w.trigger(processingTime=interval)
    else:
        w = w.trigger(availableNow=True)
    log("streaming %s -> %s (checkpoint %s, %s)"
        % (input_uri, output_uri, checkpoint,
           "every %s until stopped" % interval if follow else
           "available files, then stop"))
    q = w.start()
    deadline = None if duration is None else time.monotonic() + duration
    stop_event = stop_event or threading.Event()
    while q.isActive:
        if stop_event.is_set() or (deadline and time.monotonic() > deadline):
            q.stop()
            break
        q.awaitTermination(0.5)
    if q.exception() is not None:
        raise RuntimeError("streaming query failed: %s" % q.exception())

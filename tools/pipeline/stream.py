"""Structured Streaming over the landing: de-duplicated in the streaming
plan (state in RocksDB), one append per micro-batch, no listing of the
output."""

import threading
import time

from pipeline.dedup import BAD_COLS, KEY, READING_COLS, copy_aggs, with_day_latency
from pipeline.landing import parse_landing, read_landing_stream, rejected_rows
from pipeline.session import join, local_path, log, path_exists, touch

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def streaming_readings(parsed):
    """The streaming plan: a stateful aggregate per reading (and per
    rejected line), in update mode: each micro-batch yields a row for every
    key it touched, with the earliest copy so far (dedup.copy_aggs, the
    batch's aggregate), its copies, and the batch timestamps of its first
    and last sighting; a key is new in this micro-batch when they are equal.

    Why an aggregate and not dropDuplicates: dropDuplicates keeps whichever
    copy a micro-batch happens to process first, so the kept rx_ms (and the
    latency) would depend on file sizes and task order; the aggregate keeps
    the earliest, as the batch does. Its state is one small row per reading,
    kept (so a copy that comes hours later is still recognised).
    """
    from pyspark.sql import functions as F
    # Two equal bad lines of one file are one group here; copies says how
    # many (write_batch writes them back out one a line).
    return (parsed.withColumn("seen", F.current_timestamp())
            .groupBy("ok", *(KEY + BAD_COLS))
            .agg(*(copy_aggs() + [F.min("seen").alias("first_seen"),
                                  F.max("seen").alias("last_seen")])))


def make_batch_writer(spark, output_uri):
    """foreachBatch function: append the readings new in this micro-batch
    (and its rejected lines), once.

    The readings of micro-batch <id> are the partition
    `readings/day=<day>/batch=<id>/`, written with dynamic partition
    overwrite: a micro-batch replayed after a crash between its write and
    its marker (or the checkpoint's commit) replaces what it wrote, never
    adds to it. A replay that finds its marker `_batches/<id>` writes
    nothing again.
    The marker's modification time is when the micro-batch's readings
    were in readings/ (the lag benchmark reads it).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    readings_uri = join(output_uri, "readings")

    def write_batch(batch_df, batch_id):
        t = time.monotonic()
        marker = join(output_uri, "_batches", str(batch_id))
        if path_exists(spark, marker):
            log("stream batch %d: written before (replay), skipped" % batch_id)
            return
        new = (batch_df.where(F.col("first_seen") == F.col("last_seen"))
               .persist())
        try:
            # By day only: a directory per device would be a file per
            # device per micro-batch (the batch's readings/ has them).
            # The rejected lines are counted by the same job (observed),
            # not by a job of their own: most micro-batches have none.
            seen = Observation("rejected")
            (with_day_latency(new.observe(seen, F.count(F.when(~F.col("ok"), 1)).alias("n"))
                              .where("ok")).select(*READING_COLS)
             .withColumn("batch", F.lit(batch_id))
             .write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
             .partitionBy("day", "batch").parquet(readings_uri))
            bad = new.where(~F.col("ok"))
            if seen.get["n"]:
                (rejected_rows(bad.select(
                    "*", F.explode(F.array_repeat(F.lit(1), F.col("copies")
                                                  .cast("int"))).alias("_n")))
                 .coalesce(1).write.mode("overwrite")
                 .parquet(join(output_uri, "rejected", "batch=%d" % batch_id)))
        finally:
            new.unpersist()
        touch(spark, marker)
        log("stream batch %d written (%.1fs)" % (batch_id, time.monotonic() - t))

    return write_batch


SOURCES = ("bytes", "files")


def default_source(input_uri):
    """`bytes` (pipeline.landed: every acknowledged line, by file and
    offset) for a local landing, `files` (Spark's file source: published
    files only) for one elsewhere."""
    return "bytes" if local_path(input_uri) is not None else "files"


def run_stream(spark, input_uri, output_uri, checkpoint=None, follow=False,
               interval="0.5 seconds", duration=None, max_files=None,
               stop_event=None, stop_timeout=30.0, source=None, source_options=None):
    """Structured Streaming over the landing; returns when caught up
    (default, trigger availableNow) or, with follow, on stop_event/duration.
    Returns the query's last progress (a dict) or None.

    source: "bytes" (pipeline.landed: the landing's bytes by file and
    offset, in-progress files included) or "files" (Spark's file source
    over the published files; max_files per micro-batch); default
    default_source(input_uri). A checkpoint keeps the source it was started
    with. source_options: more options of the bytes source (tests).
    """
    checkpoint = checkpoint or join(output_uri, "_checkpoint")
    # The state store: RocksDB keeps the per-reading state off the JVM heap
    # (one row per reading seen). Only a new checkpoint takes it; an
    # existing one keeps the provider it was started with.
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    # A changelog of the keys a micro-batch touched is written at its
    # commit, not a RocksDB snapshot (made in the background): the commit
    # was a good part of a micro-batch's time, and of the lag.
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                   "true")
    source = source or default_source(input_uri)
    if source == "bytes":
        from pipeline.landed import read_landed_stream
        src = read_landed_stream(spark, input_uri, options=source_options)
    elif source == "files":
        src = read_landing_stream(spark, input_uri, max_files)
    else:
        raise ValueError("stream source %r: one of %s" % (source, ", ".join(SOURCES)))
    w = (streaming_readings(parse_landing(src)).writeStream
         .outputMode("update")
         .foreachBatch(make_batch_writer(spark, output_uri))
         .option("checkpointLocation", checkpoint))
    if follow:
        w = w.trigger(processingTime=interval)
    else:
        w = w.trigger(availableNow=True)
    log("streaming %s -> %s (%s source, checkpoint %s, %s)"
        % (input_uri, output_uri, source, checkpoint,
           "every %s until stopped" % interval if follow else
           "available files, then stop"))
    deadline = None if duration is None else time.monotonic() + duration
    stop_event = stop_event or threading.Event()
    for attempt in range(1, START_ATTEMPTS + 1):
        q = w.start()
        _wait(q, stop_event, deadline, stop_timeout)
        err = q.exception()
        if err is None or not _python_late(err) or attempt == START_ATTEMPTS \
                or stop_event.is_set():
            break
        # The bytes source's reader is a Python process the JVM gives 10 s
        # (fixed) to call back; on a loaded machine its start can take
        # longer. A restart resumes from the checkpoint: nothing is lost or
        # taken twice.
        log("stream: the source's Python worker did not start in time (attempt %d of %d); "
            "restarting from the checkpoint" % (attempt, START_ATTEMPTS))
    if err is not None:
        raise RuntimeError("streaming query failed: %s" % err)
    return q.lastProgress


# How many times run_stream starts a query whose Python worker was late.
START_ATTEMPTS = 20


def _python_late(err):
    return "Python worker failed to connect back" in str(err)


def _wait(q, stop_event, deadline, stop_timeout):
    """Until the query ends, stop_event is set or the deadline passes."""
    from pyspark.errors import StreamingQueryException
    try:
        while q.isActive:
            if stop_event.is_set() or (deadline and time.monotonic() > deadline):
                break
            try:
                q.awaitTermination(0.2)
            except StreamingQueryException:
                break                 # q.exception() has it
    finally:
        if q.isActive:
            # Stop between micro-batches: stop() interrupts a running batch
            # (its Python foreachBatch call included), which is what printed
            # a StackOverflowError in the stream thread at stop.
            _stop_between_batches(q, stop_timeout)


def _stop_between_batches(q, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end and q.isActive:
        st = q.status
        if not st["isTriggerActive"]:
            break
        time.sleep(0.05)
    q.stop()
    q.awaitTermination(timeout)

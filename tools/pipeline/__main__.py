"""The pipeline's command line (see __init__.py and docs/pipeline.md).

    PYTHONPATH=tools python -m pipeline --input LANDING_URI --output OUT_URI \\
        [--master local[*]] [--mode batch|stream] [--stream-source bytes|files] \\
        [--checkpoint URI] [--report report.md]
"""

import argparse
import signal
import sys
import threading
import time

from pipeline.batch import run_batch
from pipeline.session import log, spark_session
from pipeline.stream import SOURCES, run_stream


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m pipeline",
        description="Landing JSON lines -> Parquet readings, per-device "
                    "delivery health and a Markdown report (PySpark).")
    ap.add_argument("--input", required=True,
                    help="landing URI (a directory; any URI Spark reads)")
    ap.add_argument("--output", required=True,
                    help="output URI for the Parquet tables")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--mode", choices=("batch", "stream"), default="batch")
    ap.add_argument("--checkpoint", default=None,
                    help="stream mode: checkpoint URI (default "
                         "OUTPUT/_checkpoint)")
    ap.add_argument("--follow", action="store_true",
                    help="stream mode: keep polling the landing every "
                         "--interval until SIGINT/SIGTERM or --duration "
                         "(default: process what is there, then stop)")
    ap.add_argument("--interval", default="0.5 seconds",
                    help="stream mode with --follow: the trigger (default "
                         "0.5 seconds; docs/pipeline.md gives the lag it makes)")
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--stream-source", choices=SOURCES, default=None,
                    help="stream mode: bytes (the landing read by file and offset, "
                         "in-progress files included: a reading is streamed once the "
                         "collector acknowledged it; local landings) or files (Spark's "
                         "file source: published files only, any URI). Default: bytes "
                         "for a local landing")
    ap.add_argument("--max-files-per-trigger", type=int, default=None,
                    help="stream mode, files source: most files a micro-batch takes")
    ap.add_argument("--report", default=None,
                    help="Markdown report path (local; PNG plots next to "
                         "it). Default OUTPUT/report.md for a local OUTPUT")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-compaction", action="store_true",
                    help="parse every landing line from JSON and write nothing under the "
                         "landing (default: closed hours are compacted once to "
                         "LANDING/_compacted and read from there; docs/pipeline.md)")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--shuffle-partitions", type=int, default=None)
    ap.add_argument("--spark-log-level", default="ERROR")
    a = ap.parse_args(argv)
    if a.mode == "batch" and (a.follow or a.checkpoint):
        ap.error("--follow and --checkpoint are for --mode stream")
    t = time.monotonic()
    log("starting Spark (%s)" % a.master)
    spark = spark_session(a.master, driver_memory=a.driver_memory,
                          shuffle_partitions=a.shuffle_partitions,
                          log_level=a.spark_log_level)
    log("Spark %s up in %.1fs" % (spark.version, time.monotonic() - t))
    try:
        if a.mode == "stream":
            stop = threading.Event()

            def on_signal(signum, frame):
                log("%s: stopping the stream" % signal.Signals(signum).name)
                stop.set()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
            run_stream(spark, a.input, a.output, a.checkpoint,
                       follow=a.follow, interval=a.interval,
                       duration=a.duration,
                       max_files=a.max_files_per_trigger, stop_event=stop,
                       source=a.stream_source)
            log("health and report: batch pass over the landing")
            run_batch(spark, a.input, a.output, a.report, mode="stream",
                      write_readings=False, write_rejected=False,
                      plots=not a.no_plots, compaction=not a.no_compaction)
        else:
            run_batch(spark, a.input, a.output, a.report,
                      plots=not a.no_plots, compaction=not a.no_compaction)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

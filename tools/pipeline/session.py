"""What every pipeline step runs in: the SparkSession, URIs and paths of the
input and output, and the progress log on stderr."""

import os
import sys
import time
import urllib.parse


def log(msg):
    print("pipeline: " + msg, file=sys.stderr, flush=True)


class Step:
    """Times a step and prints it: `with Step("parsing"): ...`.

    The step names the Spark jobs it starts (their description, per thread),
    so Spark's event log and UI tell which step each job belongs to (the
    profile in docs/pipeline.md is made from that). `Step.record`, when a
    list, gets (what, start, end) in time.time() of every finished step.
    """

    record = None

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        self.t = time.monotonic()
        self.wall = time.time()
        self.outer = self._describe(self.what)
        log(self.what + " ...")
        return self

    def __exit__(self, *exc):
        self._describe(self.outer)
        if exc[0] is None:
            log("%s done (%.1fs)" % (self.what, time.monotonic() - self.t))
            if Step.record is not None:
                Step.record.append((self.what, self.wall, time.time()))

    @staticmethod
    def _describe(what):
        """Name this thread's next Spark jobs `what`; returns the name before."""
        from pyspark import SparkContext
        sc = SparkContext._active_spark_context
        if sc is None:
            return None
        outer = sc.getLocalProperty("spark.job.description")
        sc.setJobDescription(what)
        return outer


def spark_session(master="local[*]", app="holdfast-pipeline",
                  driver_memory="2g", shuffle_partitions=None,
                  log_level="ERROR", conf=None):
    """A SparkSession set up for the pipeline (UTC, quiet, no UI); `conf`:
    more Spark settings ({key: value})."""
    from pyspark.sql import SparkSession
    if shuffle_partitions is None:
        # Two per core on one machine (AQE merges the small ones); a
        # cluster's default beyond it.
        shuffle_partitions = 2 * local_cores(master) if master.startswith("local") else 200
    b = SparkSession.builder.master(master).appName(app)
    if master.startswith(("local", "spark://127.0.0.1:", "spark://localhost:")):
        # Local mode, or a cluster on this machine (pipeline.cluster), talks
        # to itself only: bind loopback, not the machine's network address
        # (and no warning about which one it picked).
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")   # for a JVM not started yet
        # Python workers (the stream's reader, pipeline.landed) run this
        # Python, with its packages, not the first python3 on PATH (through
        # pyworker: with the installed, compiled pyspark rather than Spark's
        # zip of it), and import the pipeline from where this process does
        # (the JVM, started below, passes its environment on to them).
        here = os.path.dirname(os.path.abspath(__file__))
        if "PYSPARK_PYTHON" not in os.environ:
            os.environ["HOLDFAST_WORKER_PYTHON"] = sys.executable
            os.environ["PYSPARK_PYTHON"] = os.path.join(here, "pyworker")
        tools = os.path.dirname(here)
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if tools not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([tools] + [p for p in paths if p])
    spark = (b.config("spark.driver.memory", driver_memory)
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             # A batch wants throughput, not short pauses: the parallel
             # collector costs less CPU than the default G1.
             .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC")
             .config("spark.executor.extraJavaOptions", "-XX:+UseParallelGC")
             .config("spark.ui.enabled", "false")
             # The batch caches its de-duplicated readings once and reads
             # them a few times: compressing the cache cost a third of the
             # building of it (1.2 of 4.3 s at 1M records) for a cache that
             # fits in memory uncompressed (about 0.1 GB per million).
             .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
             # A Python worker (the stream's reader) starting on a machine
             # this busy can take longer than the default 15 s to call back.
             .config("spark.python.authenticate.socketTimeout", "120s")
             .config("spark.ui.showConsoleProgress", "false"))
    for k, v in (conf or {}).items():
        spark = spark.config(k, v)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def local_cores(master):
    """The cores of a local[N] / local[*] master."""
    n = master[len("local["):].split(",")[0].rstrip("]") if master.startswith("local[") else "1"
    return (os.cpu_count() or 1) if n == "*" else max(1, int(n))


def join(uri, *parts):
    return "/".join([uri.rstrip("/")] + list(parts))


def local_path(uri):
    """The local path of a file: URI or plain path, else None."""
    u = urllib.parse.urlparse(uri)
    if u.scheme in ("", "file"):
        return u.path if u.scheme else uri
    if len(u.scheme) == 1:        # a Windows drive letter
        return uri
    return None


def path_exists(spark, uri):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(uri)
    found = path.getFileSystem(conf).globStatus(path)
    return found is not None and len(found) > 0


def write_atomically(spark, uri, write):
    """A table written with write(tmp_uri) beside `uri`, then put in its
    place: a write that fails (a partition value the file system refuses, a
    full disk, a killed job) leaves the table that was there. The swap is
    two renames (atomic on a local disk and HDFS): a crash between them
    leaves the new table under `_tmp-*` and no table for a moment."""
    import uuid
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    Path = jvm.org.apache.hadoop.fs.Path
    final = Path(uri)
    fs = final.getFileSystem(conf)
    parent, name = uri.rstrip("/").rsplit("/", 1)
    tag = uuid.uuid4().hex[:12]
    tmp = "%s/_tmp-%s-%s" % (parent, name, tag)
    try:
        write(tmp)
    except BaseException:
        fs.delete(Path(tmp), True)
        raise
    old = Path("%s/_old-%s-%s" % (parent, name, tag))
    had = fs.exists(final)
    if had and not fs.rename(final, old):
        raise OSError("could not move %s aside" % uri)
    if not fs.rename(Path(tmp), final):
        raise OSError("could not rename %s to %s" % (tmp, uri))
    if had:
        fs.delete(old, True)


def touch(spark, uri):
    """Create an empty file (a marker) through Hadoop's file system: no job."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(uri)
    path.getFileSystem(conf).create(path, True).close()

"""A streaming source over the landing's bytes: each file is read by (file,
offset), the collector's in-progress file included, so a reading reaches the
stream once its batch is fsync'ed and acknowledged, not when its file rolls.

    spark.dataSource.register(LandedBytes)
    spark.readStream.format("holdfast_landing").load(LANDING_DIR)
        -> value string (one landing line), file string (its file's final URI)

The offset Spark checkpoints is, per landing file, how many bytes of it the
stream has taken, always at a line's end:

    {"v": 1, "files": {"date=D/hour=H/part-P-N.jsonl": bytes},
     "sealed": {"date=D/hour=H": the hour directory's mtime in ns}}

A file is named by its final name, so the collector's rename of
`.part-P-N.jsonl.inprogress` to `part-P-N.jsonl` (a roll, or recovery at its
next start) changes nothing: the bytes up to an offset are the same in either
name, because the collector only appends. A micro-batch reads, per file,
the bytes between its start and end offsets; a replayed micro-batch (Spark
restarted between its read and its commit) reads the same bytes again, so
the stream's output, with its per-batch marker (stream.make_batch_writer),
gets each line once across restarts of the stream and of the collector.
A torn last line (a collector killed mid-write) is never taken: an offset
ends at a newline, and the collector's recovery cuts only after its last
one.

An hour is sealed when it ended more than compact.GRACE_MS ago, holds no
hidden file, and every file in it was taken whole by an earlier
micro-batch: its files leave the offset, which so stays the size of the open
hours, and it is not listed again while its directory's mtime stays the one
the offset records (one stat a trigger). A file copied into a sealed hour
changes that mtime: the hour is then read again from the start, and the
stream's de-duplication drops what it had already taken.

What the collector has written but not yet fsync'ed can be taken too (it
is in the page cache). The collector has not acknowledged it, so if the
machine (not the collector) dies before the fsync, those lines vanish from
the file and the broker delivers them again into another file: the stream
has them twice, and de-duplicates them (dedup.copy_aggs, by device, boot,
seq). A file found shorter than its offset is logged and left where it is.

Local landing only (the collector's, which fsyncs): the reader opens files
with Python on the driver and the executors. A landing elsewhere (hdfs:,
s3a:) streams with Spark's file source (stream.run_stream(source="files")).
"""

import os
import re
import tempfile
import time
import urllib.parse
import zipfile

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pipeline.compact import GRACE_MS, hour_end_ms
from pipeline.landing import LANDING_READ_SCHEMA
from pipeline.session import local_path, log

NAME = "holdfast_landing"
SCHEMA = "value string, file string"
_HOUR = re.compile(r"^date=(\d{4}-\d\d-\d\d)$"), re.compile(r"^hour=(\d\d)$")
# A collector's hidden in-progress file and the name it is renamed to.
_HIDDEN = re.compile(r"^\.(part-.*\.jsonl)\.inprogress$")
# The default most bytes a task reads (a backlog after a restart is split).
SPLIT_BYTES = 64 << 20
# How long an hour's directory must be unchanged before the hour is sealed.
SETTLED_NS = 1000 * 1000 * 1000
# How far back from a file's end latestOffset looks for its last newline at
# a time (a landing line is ~200 bytes).
_TAIL = 64 << 10


class LandedBytes(DataSource):
    """Spark's name for it: `holdfast_landing`; the path is the landing
    directory. Options: `splitBytes` (most bytes per task), `graceMs` and
    `nowMs` (the clock that says when an hour is closed and its directory
    settled; tests)."""

    @classmethod
    def name(cls):
        return NAME

    def schema(self):
        return SCHEMA

    def streamReader(self, schema):
        return LandedBytesReader(self.options)


class Range(InputPartition):
    """Bytes [start, end) of one landing file (both at a line boundary, or
    `start` inside a line when a large range is split: see read)."""

    def __init__(self, root, rel, start, end, aligned):
        self.root, self.rel, self.start, self.end, self.aligned = root, rel, start, end, aligned


def _hidden_name(rel):
    d, name = rel.rsplit("/", 1)
    return "%s/.%s.inprogress" % (d, name)


def open_landed(root, rel):
    """The file `rel` (final name) under root, by its final or its hidden
    name (it may be renamed between two calls: the bytes are the same), or
    None."""
    for name in (rel, _hidden_name(rel)):
        try:
            return open(os.path.join(root, name), "rb")
        except FileNotFoundError:
            continue
    return None


def file_uri(root, rel):
    """As Spark's file sources name a local file (`_metadata.file_path`)."""
    return "file:" + urllib.parse.quote(os.path.join(root, rel), safe="/=:@!$&'()*+,;-._~")


def hour_dirs(root):
    """["date=D/hour=H"] under root, sorted."""
    out = []
    for d in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        if _HOUR[0].match(d) and os.path.isdir(os.path.join(root, d)):
            out += ["%s/%s" % (d, h) for h in sorted(os.listdir(os.path.join(root, d)))
                    if _HOUR[1].match(h)]
    return out


def _hour_key(hour):
    d, h = hour.split("/")
    return d.split("=", 1)[1], h.split("=", 1)[1]


def listing(root, hour):
    """({final rel name: (size, hidden)}, has hidden file) of one hour."""
    files, hidden = {}, False
    try:
        names = os.listdir(os.path.join(root, hour))
    except FileNotFoundError:
        return files, False
    for name in names:
        m = _HIDDEN.match(name)
        if m:
            hidden = True
            final, is_hidden = m.group(1), True
        elif name.endswith(".jsonl") and not name.startswith("."):
            final, is_hidden = name, False
        else:
            continue
        try:
            size = os.stat(os.path.join(root, hour, name)).st_size
        except FileNotFoundError:
            continue                # renamed just now: seen under the other name
        rel = hour + "/" + final
        if rel not in files or not is_hidden:
            files[rel] = (size, is_hidden)
    return files, hidden


def last_line_end(root, rel, start, size):
    """The offset just after the last newline in bytes [start, size) of a
    file, or start when there is none (no complete new line)."""
    f = open_landed(root, rel)
    if f is None:
        return start
    with f:
        hi = size
        while hi > start:
            lo = max(start, hi - _TAIL)
            f.seek(lo)
            block = f.read(hi - lo)
            i = block.rfind(b"\n")
            if i >= 0:
                return lo + i + 1
            hi = lo
    return start


class LandedBytesReader(DataSourceStreamReader):

    def __init__(self, options):
        root = local_path(options.get("path") or "")
        if not root:
            raise ValueError("holdfast_landing: the path must be a local landing directory "
                             "(got %r); stream a remote landing with the file source"
                             % options.get("path"))
        self.root = os.path.abspath(root)
        self.split = int(options.get("splitBytes", SPLIT_BYTES))
        self.grace_ms = int(options.get("graceMs", GRACE_MS))
        self.now_ms = options.get("nowMs")

    def initialOffset(self):
        return {"v": 1, "files": {}, "sealed": {}}

    def _now_ms(self):
        return int(self.now_ms) if self.now_ms is not None else int(time.time() * 1000)

    def latestOffset(self, start=None, limit=None):
        """Every file of the open hours up to its last complete line."""
        start = start or self.initialOffset()
        taken = start["files"]
        now = self._now_ms()
        files, sealed = {}, {}
        for hour in hour_dirs(self.root):
            path = os.path.join(self.root, hour)
            # Before the listing: a file renamed in after it changes this.
            mtime = os.stat(path).st_mtime_ns
            if hour in start["sealed"]:
                if start["sealed"][hour] == mtime:
                    sealed[hour] = mtime
                    continue
                # A file came into a sealed hour (copied in by hand: a
                # collector only writes the current hour, and its hidden
                # file keeps an hour open). Its files are read again from
                # the start; the stream's de-duplication state drops
                # every line it had already taken.
                log("holdfast_landing: %s changed after it was sealed: reading it again "
                    "(what was streamed from it before is dropped as duplicates)" % hour)
            listed, hidden = listing(self.root, hour)
            names = set(listed) | {r for r in taken if r.startswith(hour + "/")}
            whole = all(r in listed and not listed[r][1] and taken.get(r) == listed[r][0]
                        for r in names)
            # Sealed only once its directory has not changed for a second: a
            # later change then has a later mtime (timestamps tick in ms).
            if (names and whole and not hidden and hour not in start["sealed"]
                    and now >= hour_end_ms(_hour_key(hour)) + self.grace_ms
                    and now * 1000000 - mtime > SETTLED_NS):
                sealed[hour] = mtime    # every byte taken before this batch: nothing to read
                continue
            for rel in sorted(names):
                off = taken.get(rel, 0)
                size = listed.get(rel, (off, False))[0]
                if size < off:
                    log("holdfast_landing: %s is %d bytes, shorter than the %d already "
                        "taken (lost unsynced bytes in a machine crash?): left as it is"
                        % (rel, size, off))
                files[rel] = off if size <= off else last_line_end(self.root, rel, off, size)
        return {"v": 1, "files": files, "sealed": sealed}

    def partitions(self, start, end):
        """A Range per file with new bytes, large ones split."""
        out = []
        sealed = set(start["sealed"])
        for rel, hi in sorted(end["files"].items()):
            lo = 0 if rel.rsplit("/", 1)[0] in sealed else start["files"].get(rel, 0)
            a = lo
            while a < hi:
                b = min(hi, a + self.split)
                out.append(Range(self.root, rel, a, b, a == lo))
                a = b
        return out

    def read(self, partition):
        """The lines of a Range, with the file's final URI. A split Range
        that starts inside a line leaves that line to the Range before it,
        which reads on past its end to finish its last line (Hadoop's line
        reader does the same)."""
        import pyarrow as pa
        r = partition
        f = open_landed(r.root, r.rel)
        if f is None:
            raise FileNotFoundError("holdfast_landing: %s is gone from %s (neither name)"
                                    % (r.rel, r.root))
        with f:
            pos = r.start
            if not r.aligned:
                f.seek(pos - 1)
                skip = f.readline()           # the line the Range before takes
                pos += len(skip) - 1
            f.seek(pos)
            data = f.read(max(0, r.end - pos))
            if data and not data.endswith(b"\n"):
                data += f.readline()          # finish the last line past the Range's end
        if not data:
            return
        lines = data.decode("utf-8", "replace").split("\n")
        lines.pop()                           # after the last newline: nothing
        uri = file_uri(r.root, r.rel)
        for i in range(0, len(lines), 65536):
            chunk = lines[i:i + 65536]
            yield pa.RecordBatch.from_arrays(
                [pa.array(chunk, pa.string()), pa.array([uri] * len(chunk), pa.string())],
                ["value", "file"])


def _ship_package(sc):
    """The pipeline package, zipped, to the Python workers (the executors
    import this module to read): once per SparkContext."""
    if getattr(sc, "_holdfast_shipped", False):
        return
    pkg = os.path.dirname(os.path.abspath(__file__))
    fd, path = tempfile.mkstemp(prefix="holdfast-pipeline-", suffix=".zip")
    with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as z:
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py"):
                z.write(os.path.join(pkg, name), "pipeline/" + name)
    sc.addPyFile(path)
    sc._holdfast_shipped = True


def read_landed_stream(spark, landing, split_bytes=None, options=None):
    """The landing as a stream of records, as landing.read_landing_stream
    gives them (its explicit schema, a line that is not a landing record
    whole in `_corrupt`, and `file`), read by (file, offset)."""
    from pyspark.sql import functions as F
    _ship_package(spark.sparkContext)
    spark.dataSource.register(LandedBytes)
    r = spark.readStream.format(NAME)
    if split_bytes:
        r = r.option("splitBytes", str(split_bytes))
    for k, v in (options or {}).items():
        r = r.option(k, str(v))
    rec = F.from_json("value", LANDING_READ_SCHEMA,
                      {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    return (r.load(landing).select(rec.alias("r"), "file")
            .select("r.*", "file"))

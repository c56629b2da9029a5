"""Landing compaction: each closed hour of the landing parsed once and kept as
Parquet, so a rerun of the batch parses JSON only for the hours still open.

    <landing>/_compacted/day=YYYY-MM-DD/hour=HH/part-*.parquet
    <landing>/_compacted/day=YYYY-MM-DD/hour=HH/_manifest.json

The table holds one row per landing line of the hour, as
landing.parse_landing makes it (typed reading, `ok`, and for a rejected line
its text, file and reason inputs), partitioned by the landing's day and hour:
`spark.read.parquet("<landing>/_compacted")` reads it as any table.  The JSON
files stay where they are: the collector acknowledged them, and they remain
the landing; the Parquet copy is a parse done once.

An hour is closed when it ended more than GRACE_MS ago and its directory
holds no hidden file (a collector's in-progress file, or one a dead
collector left that the next collector start renames into place).

An hour's Parquet is used only while its JSON files are exactly those it was
made from, under the same contract at the door (contract.VERSION):
`_manifest.json` lists them (name, size, modification time) and
the Parquet files (name, size).  A late file (a recovered in-progress one),
a file changed, or a Parquet file missing or cut short makes the hour read
as JSON again and compacted again.  Compaction writes into
`_compacted/_staging/`, writes the manifest there, and then renames the
hour's directory into place: the rename is the commit.  A crash before it
leaves only staging (not read, removed by the next compaction), a crash
after it a complete hour; in between an hour being replaced has no
directory for a moment and reads as JSON.  Either way each landing line is
read once, from JSON or from Parquet.  One compaction at a time per
landing (one batch run).
"""

import calendar
import json
import re
import time
import uuid

from pipeline import contract
from pipeline.session import join, log

COMPACTED = "_compacted"
MANIFEST = "_manifest.json"
GRACE_MS = 5 * 60 * 1000
HOUR_MS = 3600 * 1000
_HOUR_DIR = re.compile(r"date=(\d{4}-\d\d-\d\d)/hour=(\d\d)$")


class _FS:
    """The Hadoop file system of a URI (any URI Spark reads), through py4j."""

    def __init__(self, spark, uri):
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._path(uri).getFileSystem(
            spark.sparkContext._jsc.hadoopConfiguration())

    def glob(self, pattern):
        """[(path URI, size, mtime ms, is dir)] matching a glob."""
        found = self._fs.globStatus(self._path(pattern))
        return [(st.getPath().toString(), st.getLen(), st.getModificationTime(),
                 st.isDirectory()) for st in (found or ())]

    def exists(self, uri):
        return self._fs.exists(self._path(uri))

    def mkdirs(self, uri):
        self._fs.mkdirs(self._path(uri))

    def rename(self, src, dst):
        if not self._fs.rename(self._path(src), self._path(dst)):
            raise OSError("compaction: could not rename %s to %s" % (src, dst))

    def delete(self, uri):
        self._fs.delete(self._path(uri), True)

    def read_text(self, uri):
        s = self._fs.open(self._path(uri))
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(s, "UTF-8")
        finally:
            s.close()

    def write_text(self, uri, text):
        s = self._fs.create(self._path(uri), True)
        try:
            s.write(bytearray(text.encode("utf-8")))
            s.hsync()
        finally:
            s.close()


def _hour_key(dir_uri):
    m = _HOUR_DIR.search(dir_uri)
    return None if m is None else (m.group(1), m.group(2))


def hour_end_ms(key):
    day, hour = key
    t = calendar.timegm(time.strptime(day + " " + hour, "%Y-%m-%d %H"))
    return t * 1000 + HOUR_MS


class Sources:
    """Where each hour of the landing is read from for this run."""

    def __init__(self, units, json_files, compacted_now):
        self.units = units                  # {hour key: (unit dir, [parquet URIs])}
        self.json_files = json_files        # [JSON file URIs] of the other hours
        self.compacted_now = compacted_now  # hour keys compacted by this run

    def summary(self):
        return {"hours_from_parquet": len(self.units),
                "json_files_read": len(self.json_files),
                "hours_compacted_now": ["%s %s" % k for k in sorted(self.compacted_now)]}

    def parsed(self, spark):
        """The parsed landing (landing.parse_landing's rows), Parquet for the
        compacted hours and JSON for the rest, or None when it is empty."""
        from pipeline.landing import parse_landing, read_landing
        parts = []
        if self.json_files:
            parts.append(parse_landing(read_landing(spark, self.json_files)))
        if self.units:
            files = [f for _, fs in sorted(self.units.values()) for f in fs]
            if files:
                parts.append(spark.read.schema(parsed_schema(spark))
                             .parquet(*files))
        if not parts:
            return None
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        return df


def parsed_schema(spark):
    """The schema of parse_landing's rows (no job: the reader has its
    schema)."""
    from pipeline.landing import LANDING_READ_SCHEMA, parse_landing
    from pyspark.sql import functions as F
    empty = spark.createDataFrame([], LANDING_READ_SCHEMA)
    return parse_landing(empty.withColumn("file", F.lit(None).cast("string"))).schema


def _landing_hours(fs, landing):
    """{hour key: (hour dir URI, {json name: [size, mtime]}, has hidden)}."""
    hours = {}
    for uri, size, mtime, is_dir in fs.glob(join(landing, "date=*", "hour=*", "*")):
        d, name = uri.rsplit("/", 1)
        key = _hour_key(d)
        if key is None:
            continue
        h = hours.setdefault(key, (d, {}, []))
        if name.startswith("."):
            h[2].append(name)
        elif name.endswith(".jsonl") and not is_dir:
            h[1][name] = [size, mtime]
    return {k: (d, files, bool(hidden)) for k, (d, files, hidden) in hours.items()}


def _units(fs, root):
    """{hour key: (unit dir, manifest dict, {file name: size})} of the
    committed hours under `root` (the manifest read, not yet checked)."""
    listed = {}
    for uri, size, _, is_dir in fs.glob(join(root, "day=*", "hour=*", "*")):
        d, name = uri.rsplit("/", 1)
        if not is_dir:
            listed.setdefault(d, {})[name] = size
    units = {}
    for d, files in listed.items():
        if MANIFEST not in files:
            continue
        try:
            m = json.loads(fs.read_text(join(d, MANIFEST)))
            key = (m["day"], m["hour"])
        except (ValueError, KeyError, TypeError):
            continue                  # not a manifest we wrote: hour read as JSON
        units[key] = (d, m, files)
    return units


def _valid(unit, json_files):
    d, m, files = unit
    return (m.get("json") == json_files and m.get("contract") == contract.VERSION
            and all(files.get(n) == size for n, size in m.get("parquet", {}).items()))


def _closed(key, hour, now_ms, grace_ms):
    _, files, hidden = hour
    return bool(files) and not hidden and now_ms >= hour_end_ms(key) + grace_ms


def prepare(spark, landing, compaction=True, now_ms=None, grace_ms=GRACE_MS):
    """List the landing, compact its closed hours that have no valid Parquet
    yet (when `compaction`), and say where each hour is read from.

    Without `compaction` every hour is read as JSON and nothing is written.
    """
    fs = _FS(spark, landing)
    hours = _landing_hours(fs, landing)
    root = join(landing, COMPACTED)
    if not compaction:
        return Sources({}, _json_files(hours, hours), [])
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    units = _units(fs, root)
    valid = {k: u for k, u in units.items() if k in hours and _valid(u, hours[k][1])}
    todo = sorted(k for k, h in hours.items()
                  if k not in valid and _closed(k, h, now_ms, grace_ms))
    if todo:
        for k, unit in _compact(spark, fs, root, hours, todo).items():
            valid[k] = unit
    read_units = {k: (u[0], [join(u[0], n) for n in sorted(u[1]["parquet"])])
                  for k, u in valid.items()}
    rest = {k: h for k, h in hours.items() if k not in read_units}
    return Sources(read_units, _json_files(hours, rest), todo)


def _json_files(hours, which):
    return [join(hours[k][0], n) for k in sorted(which) for n in sorted(hours[k][1])]


def _compact(spark, fs, root, hours, todo):
    """Parse the JSON of the `todo` hours in one job into staging, then
    commit each hour by renaming its directory into place.  Returns
    {hour key: (unit dir, manifest)}."""
    from pyspark.sql import functions as F
    from pipeline.landing import parse_landing, read_landing
    staging_root = join(root, "_staging")
    fs.delete(staging_root)             # what a crashed compaction left
    run = join(staging_root, uuid.uuid4().hex)
    files = _json_files(hours, todo)
    t = time.monotonic()
    raw = read_landing(spark, files)
    where = r"date=([^/]+)/hour=([^/]+)/[^/]*$"
    raw = raw.select("*", F.regexp_extract("file", where, 1).alias("day"),
                     F.regexp_extract("file", where, 2).alias("hour"))
    (parse_landing(raw, keep=("day", "hour")).write.partitionBy("day", "hour")
     .parquet(run))
    listed = {}
    for uri, size, _, is_dir in fs.glob(join(run, "day=*", "hour=*", "*")):
        d, name = uri.rsplit("/", 1)
        if not is_dir and not name.startswith((".", "_")):
            listed.setdefault(_unit_key(d), {})[name] = size
    committed = {}
    for key in todo:
        day, hh = key
        tmp = join(run, "day=" + day, "hour=" + hh)
        fs.mkdirs(tmp)               # an hour of empty files has no Parquet
        parquet = listed.get(key, {})
        manifest = {"day": day, "hour": hh, "json": hours[key][1],
                    "parquet": parquet, "contract": contract.VERSION,
                    "compacted_ms": int(time.time() * 1000)}
        fs.write_text(join(tmp, MANIFEST), json.dumps(manifest, sort_keys=True))
        final = join(root, "day=" + day, "hour=" + hh)
        if fs.exists(final):         # an hour changed since: replace it
            fs.rename(final, join(run, "replaced-%s-%s" % key))
        else:
            fs.mkdirs(join(root, "day=" + day))
        fs.rename(tmp, final)        # the commit
        committed[key] = (final, manifest)
    fs.delete(staging_root)
    log("compacted %d closed hour(s) of the landing to Parquet (%.1fs)"
        % (len(todo), time.monotonic() - t))
    return committed


def _unit_key(d):
    day_dir, hour_dir = d.rsplit("/", 2)[1:]
    return (day_dir.split("=", 1)[1], hour_dir.split("=", 1)[1])

"""Delivery health from the de-duplicated readings: per device (expected,
received, missing, gaps, duplicates, reboots, latency percentiles) and per
QoS."""

import bisect
import itertools
import math

# Faults that drop the collector's connection or the broker's state, and
# how long before the first copy of a reading one may have begun.
QOS2_CAUSE_EVENTS = ("broker restart", "reset", "partition")
QOS2_CAUSE_WINDOW_MS = 10000


def qos2_duplicate_flag():
    """A reading whose copies break QoS 2's exactly-once promise: published
    at QoS 2 (`q`), every copy delivered to the collector at QoS 2 (a
    collector subscribed at QoS 1 is only promised at least once), and more
    than one copy of one payload (not a key collision)."""
    from pyspark.sql import functions as F
    return ((F.col("qos") == 2) & (F.col("delivered_qos") == 2)
            & (F.col("copies") > 1) & ~F.coalesce(F.col("collision"), F.lit(False)))


def duplicate_copies():
    """The copies of a reading beyond the first: 0 for a key collision
    (its rows are different readings, counted as key_collisions)."""
    from pyspark.sql import functions as F
    return F.when(~F.col("collision"), F.col("copies") - 1).otherwise(0)


def qos2_cause(row, events):
    """The cause of one QoS 2 duplicate in words, from how its copies came
    (DUP flag) and the faults around them (events: [(wall ms, what)])."""
    if row["dup_copies"] >= row["copies"] - 1:
        how = ("the broker sent it again with DUP set: the collector's "
               "connection dropped after it landed the message and before "
               "its PUBREC reached the broker, and the collector no longer "
               "knew the packet id (it keeps them only while it runs: it "
               "had restarted)")
    elif row["dup_copies"] == 0:
        how = ("a new PUBLISH, not a redelivery: the broker had lost its "
               "QoS 2 state for the message (a broker restarted without "
               "persistence, or killed before it saved it) and the board "
               "sent it again")
    else:
        how = "copies both redelivered (DUP) and new"
    near = [(ms, what) for ms, what in events or ()
            if what.startswith(QOS2_CAUSE_EVENTS)
            and row["rx_ms"] - QOS2_CAUSE_WINDOW_MS <= ms <= row["last_rx_ms"]]
    if not near:
        return how
    ms, what = near[-1]
    if ms > row["rx_ms"]:
        return "%s (%s between the copies)" % (how, what)
    return "%s (%s %.1f s before the first copy)" % (how, what, (row["rx_ms"] - ms) / 1000.0)


def qos2_duplicates(dedup, total, events, limit=200):
    """The readings that broke the QoS 2 promise (up to `limit`, earliest
    first), each with its cause; no job when there are none."""
    if not total:
        return []
    rows = (dedup.where(qos2_duplicate_flag())
            .select("device", "boot", "seq", "copies", "dup_copies", "rx_ms",
                    "last_rx_ms").orderBy("rx_ms", "device").limit(limit)
            .collect())
    return [dict(r.asDict(), cause=qos2_cause(r, events)) for r in rows]


HEALTH_SCHEMA = (
    "device string, qos string, first_seq bigint, last_seq bigint, expected bigint, "
    "received bigint, missing bigint, gap_count int, gaps string, "
    "gap_ranges array<struct<lo:bigint,hi:bigint>>, duplicates bigint, "
    "qos2_duplicates bigint, reused_seq bigint, key_collisions bigint, reboots bigint, "
    "latency_samples bigint, "
    "latency_p50_ms double, latency_p95_ms double, latency_p99_ms double, "
    "negative_latency bigint, first_rx_ms bigint, last_rx_ms bigint")
QOS_SCHEMA = (
    "qos string, devices bigint, readings bigint, expected bigint, missing bigint, "
    "devices_with_loss bigint, duplicates bigint, qos2_duplicates bigint, "
    "latency_samples bigint, latency_p50_ms double, latency_p95_ms double, "
    "latency_p99_ms double")


def _gaps(readings):
    """[(device, lo, hi)] of the missing seq ranges of `readings`, by the
    firmware's rule for s (see boot_loss): lag() over s in (boot, s) order;
    a step down (s started again in a later boot) is no gap, a repeat
    cannot happen ((d, b, s) is unique after de-duplication).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    w = Window.partitionBy("device").orderBy("boot", "seq")
    return (readings.select("device", "boot", "seq")
            .withColumn("prev", F.lag("seq").over(w))
            .where(F.col("seq") - F.col("prev") > 1)
            .select("device", (F.col("prev") + 1).alias("lo"),
                    (F.col("seq") - 1).alias("hi")).collect())


def boot_loss(boots):
    """Readings missing from one device's boots [(boot, lo, hi, n)], counted
    per (device, boot): within a boot, what its s range lacks; between a
    boot and the next, the s between them when the next goes on above the
    last (the firmware's rule: s never repeats, it goes on across boots,
    docs/telemetry.md); a boot whose s starts again at or below the last
    one's (its state wiped, another firmware) is counted on its own, since
    nothing says what came between."""
    missing = 0
    top = None
    for _b, lo, hi, n in sorted(boots):
        missing += hi - lo + 1 - n
        if top is not None and lo > top:
            missing += lo - top - 1
        top = hi
    return missing


PERCENTILES = (0.5, 0.95, 0.99)


def percentiles(counts, ps=PERCENTILES):
    """Exact percentiles of the values counted in `counts` ({value: n}),
    linearly interpolated, computed as Spark's `percentile` computes them
    (position (n - 1) * p between the closest ranks, lo + (pos - lower) *
    (hi - lo) in doubles: the form whose last bit matched this Spark's on
    every one of 300 sets of latencies tried, where (higher - pos) * lo +
    (pos - lower) * hi differed in a quarter), so a table built from
    per-value counts equals one Spark built; [None, ...] without values."""
    if not counts:
        return [None] * len(ps)
    keys = sorted(counts)
    cum = list(itertools.accumulate(counts[k] for k in keys))
    top = cum[-1] - 1
    out = []
    for p in ps:
        pos = top * p
        lower, higher = math.floor(pos), math.ceil(pos)
        lo = keys[bisect.bisect_left(cum, lower + 1)]
        hi = keys[bisect.bisect_left(cum, higher + 1)]
        if higher == lower or hi == lo:
            out.append(float(lo))
        else:
            out.append(float(lo) + (pos - lower) * (float(hi) - float(lo)))
    return out


def _lat(counts):
    lat = percentiles(counts)
    return {"latency_p50_ms": lat[0], "latency_p95_ms": lat[1], "latency_p99_ms": lat[2]}


def _merge(into, counts):
    for v, n in counts.items():
        into[v] = into.get(v, 0) + n
    return into


class Figures:
    """What the health tables and the latency plot are made of, from two
    aggregates over the readings, each one pass and collected once:

    - per (device, boot): the seq range and count, and every per-device
      sum or extreme (QoS mask, copies, collisions, receive times), summed
      per device here;
    - per (device, QoS, latency): the readings' count, and the latency
      plot's value (exact below 10 s, 4 significant digits above), from
      which the exact percentiles per device and per QoS class and the
      plot's histogram are counted here (latencies in ms have few
      distinct values; Arrow, not Row objects, brings them over).
    """

    def __init__(self, dedup):
        from pyspark.sql import functions as F
        copies = duplicate_copies()
        self.boots = dedup.groupBy("device", "boot").agg(
            F.min("seq").alias("lo"), F.max("seq").alias("hi"),
            F.count("*").alias("n"),
            F.expr("bit_or(shiftleft(1, qos))").alias("qos_mask"),
            F.sum(copies).alias("duplicates"),
            F.sum(F.when(qos2_duplicate_flag(), copies).otherwise(0)).alias("qos2_duplicates"),
            F.count(F.when(F.col("collision"), 1)).alias("key_collisions"),
            F.count(F.when(F.col("latency_ms") < 0, 1)).alias("negative_latency"),
            F.min("rx_ms").alias("first_rx_ms"), F.max("rx_ms").alias("last_rx_ms"),
        ).collect()
        v = F.expr("CASE WHEN abs(latency_ms) < 10000 THEN latency_ms ELSE "
                   "CAST(round(latency_ms / pow(10, floor(log10(abs(latency_ms))) - 3))"
                   " * pow(10, floor(log10(abs(latency_ms))) - 3) AS BIGINT) END")
        t = (dedup.where(F.col("latency_ms").isNotNull())
             .groupBy("device", "qos", "latency_ms", v.alias("v")).count().toArrow())
        # {device: {latency: n}}, and {str(qos): {plot value: n}} for the plot
        self.latency, self.plot = {}, {}
        cols = [t.column(c).to_pylist() for c in ("device", "qos", "latency_ms", "v", "count")]
        for dev, q, ms, pv, n in zip(*cols):
            d = self.latency.setdefault(dev, {})
            d[ms] = d.get(ms, 0) + n
            p = self.plot.setdefault(str(q), {})
            p[pv] = p.get(pv, 0) + n


def _overlapping(boots):
    """The devices whose per-boot seq ranges overlap (a seq re-used under
    another boot), from {device: [(boot, lo, hi, n)]}."""
    out = set()
    for dev, per in boots.items():
        top = None
        for _b, lo, hi, _n in sorted(per, key=lambda r: (r[1], r[2])):
            if top is not None and lo <= top:
                out.add(dev)
                break
            top = hi if top is None else max(top, hi)
    return out


def device_health(dedup, fig):
    """Per-device delivery health from de-duplicated readings (+copies) and
    their Figures: rows (dicts, HEALTH_SCHEMA, by device).

    The rows are assembled here from the Figures' per-boot rows: the tables
    are small, every extra Spark job costs more than the arithmetic.
    received = distinct s.  (d, b, s) is unique after de-duplication, so the
    count of readings is the count of distinct s unless the device re-used
    sequence numbers under another boot: only devices whose per-boot s
    ranges overlap get an exact distinct count (a job).  The gap ranges need
    the s values in order (a window sort): only devices that miss some.

    Loss is counted per (device, boot) (boot_loss): received is every
    reading, expected = received + missing. Readings under one key with
    different payloads are key_collisions, not duplicates.
    """
    from pyspark.sql import functions as F
    boots, per = {}, {}
    sums = ("n", "duplicates", "qos2_duplicates", "key_collisions", "negative_latency")
    for r in fig.boots:
        dev = r["device"]
        boots.setdefault(dev, []).append((r["boot"], r["lo"], r["hi"], r["n"]))
        d = per.get(dev)
        if d is None:
            per[dev] = r.asDict()
            continue
        for k in sums:
            d[k] += r[k]
        d["qos_mask"] |= r["qos_mask"]
        for k, pick in (("lo", min), ("first_rx_ms", min), ("hi", max), ("last_rx_ms", max)):
            d[k] = pick(d[k], r[k])
    overlap = _overlapping(boots)
    distinct = {}
    if overlap:
        distinct = {r["device"]: r["n"] for r in
                    dedup.where(F.col("device").isin(sorted(overlap)))
                    .groupBy("device").agg(F.countDistinct("seq").alias("n")).collect()}
    health = []
    for dev in sorted(per):
        r = per[dev]
        received = r["n"]
        missing = boot_loss(boots[dev])
        lat = fig.latency.get(dev, {})
        health.append(dict(
            device=dev,
            qos=",".join(str(q) for q in (0, 1, 2) if r["qos_mask"] & (1 << q)),
            first_seq=r["lo"], last_seq=r["hi"], expected=received + missing,
            received=received, missing=missing, gap_count=0, gaps="",
            gap_ranges=[], duplicates=r["duplicates"], qos2_duplicates=r["qos2_duplicates"],
            reused_seq=received - distinct.get(dev, received),
            key_collisions=r["key_collisions"], reboots=len(boots[dev]) - 1,
            latency_samples=sum(lat.values()), **_lat(lat),
            negative_latency=r["negative_latency"], first_rx_ms=r["first_rx_ms"],
            last_rx_ms=r["last_rx_ms"]))
    lossy = [h["device"] for h in health if h["missing"] > 0]
    if lossy:
        by_dev = {h["device"]: h for h in health}
        for g in sorted(_gaps(dedup.where(F.col("device").isin(lossy))),
                        key=lambda g: (g["device"], g["lo"], g["hi"])):
            by_dev[g["device"]]["gap_ranges"].append({"lo": g["lo"], "hi": g["hi"]})
        for h in health:
            h["gap_count"] = len(h["gap_ranges"])
            h["gaps"] = ", ".join(str(g["lo"]) if g["lo"] == g["hi"]
                                  else "%d-%d" % (g["lo"], g["hi"]) for g in h["gap_ranges"])
    return health


def qos_class(h):
    """The row of the per-QoS table a device's health row counts in."""
    return "mixed" if "," in h["qos"] else h["qos"]


def qos_health(fig, health):
    """Delivery health per QoS: rows (dicts, QOS_SCHEMA, by QoS), one per
    QoS a device published with.

    Devices are grouped by the QoS their readings carry (`q`); a device that
    used several is in the row "mixed" (a missing reading has no QoS of its
    own, so its loss cannot be split).  Every number in a row is about the
    same devices: a device that used one QoS has it on every reading, so
    each row is summed from its devices' health rows, and its latency
    percentiles counted from their Figures (no job).
    """
    out = []
    for cls in sorted({qos_class(h) for h in health}):
        devs = [h for h in health if qos_class(h) == cls]
        lat = {}
        for h in devs:
            _merge(lat, fig.latency.get(h["device"], {}))
        out.append(dict(
            qos=cls, devices=len(devs), readings=sum(h["received"] for h in devs),
            expected=sum(h["expected"] for h in devs),
            missing=sum(h["missing"] for h in devs),
            devices_with_loss=sum(1 for h in devs if h["missing"] > 0),
            duplicates=sum(h["duplicates"] for h in devs),
            qos2_duplicates=sum(h["qos2_duplicates"] for h in devs),
            latency_samples=sum(lat.values()), **_lat(lat)))
    return out

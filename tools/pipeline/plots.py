"""The report's plots (PNG, matplotlib): what a fleet owner reads first.

    latency_data(figures.plot) / plot_latency(data, path)
        how long readings took from the board to the collector, per QoS:
        histogram on log axes (the tail is what matters) and the CDF
    plot_delivery(health_rows, path)
        per device: readings delivered, duplicates removed, readings lost
    timeline_data(dedup, health_rows) / plot_timeline(data, events, path)
        per device over time: readings taken on the board and readings
        delivered, the gap between them being what waits in its outbox,
        with the injected faults marked

timeline_data runs in Spark, latency_data counts from health.Figures (the
health's own aggregate); both return small Python structures, and the plot
functions only draw.
"""
import bisect
import itertools
import math

LOST_COLOR = "#c0392b"
DUP_COLOR = "#e0a030"
OK_COLOR = "#4c9a2a"
WAIT_COLOR = "#2e86c1"  # the backlog in the outbox, on the timeline
FAULT_COLORS = {"power cut": "#c0392b", "broker restart": "#8e44ad", "partition": "#2c3e50",
                "reset": "#e67e22", "latency": "#7f8c8d"}


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _interp(values, cum, p):
    """The p-quantile of sorted `values` whose cumulative counts are `cum`,
    interpolated linearly between closest ranks (Spark's percentile,
    numpy's default)."""
    x = p * (cum[-1] - 1)
    lo = int(math.floor(x))
    a = values[bisect.bisect_right(cum, lo)]
    b = values[bisect.bisect_right(cum, min(lo + 1, cum[-1] - 1))]
    return a + (b - a) * (x - lo)


def latency_data(plot_counts, nbins=40):
    """CDF quantiles and log-spaced histogram counts per QoS, or None.

    plot_counts (health.Figures.plot): {QoS: {latency: readings}}, exact
    below 10 s (latencies in ms have few distinct values), 4 significant
    digits above; the quantiles and the histogram are counted from it here.
    """
    per = {q: list(c.items()) for q, c in plot_counts.items() if c}
    if not per:
        return None
    qs = [i / 100.0 for i in range(1, 100)] + [0.995, 0.999]
    top = max(v for rows in per.values() for v, _ in rows)
    # Log-spaced bins from 1 ms to the slowest reading: nothing clipped.
    hi = math.log10(max(2.0, float(top) + 1))
    width = hi / nbins
    cdf, hist = {}, {}
    for q, rows in per.items():
        rows.sort()
        vals = [v for v, _ in rows]
        cum = list(itertools.accumulate(c for _, c in rows))
        cdf[q] = (qs, [_interp(vals, cum, p) for p in qs])
        h = hist[q] = [0] * nbins
        for v, c in rows:
            h[min(int(math.floor(math.log10(max(v, 0) + 1) / width)), nbins - 1)] += c
    edges = [10 ** (i * width) - 1 for i in range(nbins + 1)]
    return {"cdf": cdf, "hist": hist, "edges": edges}


def plot_latency(data, path):
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    edges = [max(e, 0.5) for e in data["edges"]]
    for q in sorted(data["hist"]):
        ax1.stairs(data["hist"][q], edges, label="QoS %s" % q)
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax1.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ax1.yaxis.set_minor_formatter(NullFormatter())
    ax1.set_xlabel("latency: received by the collector - taken on the board (ms)")
    ax1.set_ylabel("readings (log scale)")
    ax1.set_title("Latency histogram, every reading (log axes)")
    ax1.legend()
    for q in sorted(data["cdf"]):
        qs, vals = data["cdf"][q]
        ax2.plot(vals, qs, label="QoS %s" % q)
    ax2.set_xscale("symlog")
    ax2.set_xlabel("latency (ms, log scale)")
    ax2.set_ylabel("fraction of readings")
    ax2.set_title("Latency CDF (1st to 99.9th percentile)")
    ax2.grid(True, alpha=0.3)
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_delivery(rows, path, limit=40):
    """Per device: delivered (left), duplicates removed and lost (right),
    each panel on its own scale: losses and duplicates are small next to
    what was delivered. A zero is no bar (the axis label says so): a "0"
    by every empty bar cluttered the panel."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator
    rows = sorted(rows, key=lambda r: (-r["missing"], -r["duplicates"], r["device"]))
    shown = sorted(rows[:limit], key=lambda r: r["device"], reverse=True)
    names = ["%s (QoS %s)" % (r["device"], r["qos"]) for r in shown]
    y = list(range(len(shown)))
    fig, (ax1, ax2) = plt.subplots(
        1, 2, sharey=True, figsize=(11, max(2.5, 0.3 * len(shown) + 1.5)),
        gridspec_kw={"width_ratios": [1, 2]})
    ax1.barh(y, [r["received"] for r in shown], color=OK_COLOR)
    ax1.set_yticks(y)
    ax1.set_yticklabels(names, fontsize="small", parse_math=False)  # device text, not markup
    ax1.set_xlabel("readings delivered")
    ax1.xaxis.set_major_locator(MaxNLocator(integer=True))
    h = 0.4
    ax2.barh([i + h / 2 for i in y], [r["duplicates"] for r in shown],
             height=h, color=DUP_COLOR, label="duplicates removed")
    ax2.barh([i - h / 2 for i in y], [r["missing"] for r in shown],
             height=h, color=LOST_COLOR, label="lost (never arrived)")
    ax2.set_xlabel("readings (no bar: none)")
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.set_xlim(left=0, right=max([1] + [max(r["duplicates"], r["missing"]) for r in shown]) * 1.15)
    ax2.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    title = "Delivery per device: %d lost in all" % sum(r["missing"] for r in rows)
    if len(rows) > limit:
        title += " (the %d of %d devices with most loss, then duplicates)" % (limit, len(rows))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def timeline_data(dedup, health_rows=None, limit=8, step_s=1):
    """Per device (the first `limit` by name that carry w), per step_s
    seconds (more when the span needs more than 600 steps, steps aligned
    to the epoch): readings taken on the board (by their wall clock) and
    readings delivered (by the collector's clock). {"t0_ms", "step_s",
    "devices": {device: (taken, delivered)}} as cumulative counts, or None.

    health_rows (device_health's, when the caller has them) give the
    devices and the span without a job of their own; the counts are one
    aggregate.
    """
    from pyspark.sql import functions as F
    rows = dedup.where(F.col("wall_ms").isNotNull())
    if health_rows is None:
        health_rows = [
            {"device": r["device"], "latency_samples": 1, "first_rx_ms": r["lo"],
             "last_rx_ms": r["hi"]}
            for r in rows.groupBy("device").agg(
                F.min("rx_ms").alias("lo"), F.max("rx_ms").alias("hi")).collect()]
    shown = sorted((r for r in health_rows if r["latency_samples"]),
                   key=lambda r: r["device"])[:limit]
    if not shown:
        return None
    devices = [r["device"] for r in shown]
    span = max(r["last_rx_ms"] for r in shown) - min(r["first_rx_ms"] for r in shown)
    # At most about 600 points per curve, whatever the span.
    step_s = max(step_s, int(math.ceil(span / 600000.0)))
    step = step_s * 1000
    rows = rows.where(F.col("device").isin(devices))
    both = rows.select("device", F.lit(0).alias("k"),
                       F.floor(F.col("wall_ms") / step).alias("b")).unionByName(
        rows.select("device", F.lit(1).alias("k"),
                    F.floor(F.col("rx_ms") / step).alias("b")))
    out = {}
    for r in both.groupBy("device", "k", "b").count().collect():
        out.setdefault(r["device"], ({}, {}))[r["k"]][int(r["b"])] = r["count"]
    b0 = min(min(list(t) + list(d)) for t, d in out.values())
    n = 1 + max(max(list(t) + list(d)) for t, d in out.values()) - b0
    # A device clock years off (w) spans more than the receipts: what is
    # built is bounded by the steps collected (the data's size), coarsened
    # to about 600 points whatever the span.
    t0_ms = b0 * step
    k = max(1, -(-n // 600))
    if k > 1:
        def coarser(counts):
            c = {}
            for b, v in counts.items():
                c[(b - b0) // k] = c.get((b - b0) // k, 0) + v
            return c
        out = {dev: (coarser(t), coarser(d)) for dev, (t, d) in out.items()}
        b0, n, step_s = 0, -(-n // k), step_s * k
    series = {}
    for dev, (taken, delivered) in sorted(out.items()):
        cum = []
        for counts in (taken, delivered):
            c, run = 0, []
            for i in range(n):
                c += counts.get(b0 + i, 0)
                run.append(c)
            cum.append(run)
        series[dev] = tuple(cum)
    return {"t0_ms": t0_ms, "step_s": step_s, "devices": series}


def _fault_kind(what):
    for k in FAULT_COLORS:
        if what.startswith(k):
            return k
    return None


def plot_timeline(data, events, path, origin_ms=None):
    """events: [(wall-clock ms, what)] of the injected faults; a power cut
    names its device and is marked on that device's row only. origin_ms:
    the wall-clock ms the x axis counts from (the fleet's start, so a fault
    sits at the t= its log printed); None: the first reading.

    What waits in the outbox (taken less delivered) is drawn on a right-hand
    scale of its own, one for every row: between two cumulative curves of
    hundreds of readings a backlog of a dozen was a hairline."""
    plt = pyplot()
    devs = sorted(data["devices"])
    fig, axes = plt.subplots(len(devs), 1, sharex=True, squeeze=False,
                             figsize=(11, 1.6 * len(devs) + 1.2))
    t0, step = data["t0_ms"], data["step_s"]
    origin = t0 if origin_ms is None else origin_ms
    shift = (t0 - origin) / 1000.0
    seen = set()
    extra = []  # the backlog's axes, for the legend
    top = max([10] + [a - b for t, d in data["devices"].values() for a, b in zip(t, d)]) * 1.1
    for ax, dev in zip(axes[:, 0], devs):
        taken, delivered = data["devices"][dev]
        x = [shift + i * step for i in range(len(taken))]
        ax.plot(x, taken, color="#34495e", lw=1, label="taken on the board")
        ax.plot(x, delivered, color=OK_COLOR, lw=1.5, label="delivered to the collector")
        wait = ax.twinx()
        backlog = [a - b for a, b in zip(taken, delivered)]
        wait.fill_between(x, 0, backlog, color=WAIT_COLOR, alpha=0.55, lw=0,
                          label="waiting in the outbox (right scale)")
        wait.set_ylim(0, top)
        wait.tick_params(axis="y", labelsize="x-small", colors=WAIT_COLOR)
        ax.set_zorder(wait.get_zorder() + 1)  # the curves over the shading
        ax.patch.set_visible(False)
        extra.append(wait)
        for ms, what in events or ():
            kind = _fault_kind(what)
            if kind is None or kind == "power cut" and dev not in what:
                continue  # not a fault (the fleet's own steps), or another device's
            label = kind if kind not in seen else None
            seen.add(kind)
            ax.axvline((ms - origin) / 1000.0, color=FAULT_COLORS.get(kind, "#999999"), lw=1,
                       ls="--", label=label)
        ax.set_ylabel(dev, rotation=0, ha="right", fontsize="small", parse_math=False)
        ax.grid(True, alpha=0.2)
    axes[-1, 0].set_xlabel("seconds since the first reading" if origin_ms is None else
                           "seconds since the fleet started (the t= of its log)")
    handles, labels = [], []
    for ax in list(axes[:, 0]) + extra:
        for hnd, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(hnd)
                labels.append(lab)
    fig.suptitle("Readings per device over time (cumulative), faults marked", x=0.02, ha="left")
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.02, 0.95), fontsize="small",
               ncol=4, frameon=False)
    top_in = 1.0 - 0.8 / fig.get_figheight()  # title and legend above the rows
    fig.tight_layout(rect=(0, 0, 1, top_in))
    fig.savefig(path, dpi=100)
    plt.close(fig)

"""The diagrams of the README and docs, drawn with matplotlib:

    .venv/bin/python tools/docs_diagrams.py [OUTDIR]     # default docs/img

docs/img/data-path.png    board -> fault proxy -> broker -> collector ->
                          landing -> Spark -> report, with the program
                          that plays each part
docs/img/outbox-life.png  a QoS 1/2 message in the outbox: accepted,
                          stored, sent, acknowledged, committed, and what a
                          power cut at each step keeps, per outbox

Every name drawn is checked against the code first (the modules of the data
path, the outbox calls of each step), so a rename fails here instead of
leaving a picture that is no longer true. The output is the same on every
run (no dates in the files): host_tests/test_docs_diagrams.py redraws both
and compares them with the committed ones.
"""

import importlib.util
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "img")
DPI = 100

# The data path: (part, what it does, the program that plays it).
DATA_PATH = [
    ("boards", "holdfast publishes readings\nQoS 1/2, outbox on flash", "boards/unix (emulated)"),
    ("fault proxy", "latency, resets,\npartitions", "tools/fleet/proxy.py"),
    ("broker", "mosquitto, restarted\nduring the run", "tools/fleet/mosquitto.py"),
    ("collector", "writes to disk,\nthen acknowledges", "tools/pipeline/collector.py"),
    ("landing", "JSON lines by\ndate and hour", "tools/pipeline/landing.py"),
    ("Spark", "de-duplicates,\nwrites Parquet", "tools/pipeline/batch.py"),
    ("report", "per device: arrived,\nduplicated, lost", "tools/pipeline/report.py"),
]
FAULTS = {0: "power cuts", 1: "resets, partitions", 2: "restarts"}

# The outbox life of one QoS 1/2 message: (step, how it gets there, what
# the outbox is told (MemoryStore, FileStore and FlashStore share the
# interface), the outbox calls that text names).
STEPS = [
    ("accepted", "publish() called", "(in the session)", ()),
    ("stored", "publish() returned", "outbox.put()", ("put",)),
    ("sent", "PUBLISH written", "QoS 2, PUBREC: release()", ("release",)),
    ("acknowledged", "PUBACK / PUBCOMP\narrived", "outbox.done()", ("done",)),
    ("committed", "the acknowledgement\nis on flash", "done() or the next sync()", ("done", "sync")),
]
# What a power cut at each step keeps, per outbox (README's durability
# table, docs/outbox.md): (text, colour).
GONE = "#f6d6d6"  # the message is lost
KEPT = "#d8f0d8"  # kept, delivered after the reboot
SOME = "#f6e7cf"  # kept or not, by a setting
NEUTRAL = "#eeeeee"  # nothing to lose
NOT_YET = ("nothing to lose: publish()\nhad not returned", NEUTRAL)
DELIVERED = ("nothing to lose:\nthe broker has it", NEUTRAL)
KEEPS = [
    ("MemoryStore\n(default, RAM)",
     [NOT_YET, ("lost", GONE), ("lost, unless the\nbroker got it", GONE), DELIVERED, DELIVERED]),
    ("FileStore / FlashStore",
     [NOT_YET, ("kept: sent after\nthe reboot, DUP set", KEPT),
      ("kept: sent again, DUP set\n(QoS 2 past PUBREC: PUBREL)", KEPT),
      ("delivered; may be sent\nonce more (a duplicate)", KEPT), DELIVERED]),
    ("... with group=N",
     [NOT_YET, ("kept once committed:\nevery N puts, group_ms,\nflush()", SOME),
      ("kept if committed, else\nlost unless the broker got it", SOME),
      ("delivered; may be sent\nonce more (a duplicate)", KEPT), DELIVERED]),
]


def check_names():
    """Fails (SystemExit) if a program or an outbox call drawn is gone."""
    for _, _, where in DATA_PATH:
        path = where.split(" ")[0]
        if not os.path.exists(os.path.join(ROOT, path)):
            raise SystemExit("docs_diagrams: %s is drawn but not in the checkout" % path)
    sys.path.insert(0, os.path.join(ROOT, "firmware"))
    from holdfast import memstore
    from holdfast.durable import FileStore, FlashStore
    for cls in (memstore.MemoryStore, FileStore, FlashStore):
        for call in [c for step in STEPS for c in step[3]]:
            if not callable(getattr(cls, call, None)):
                raise SystemExit("docs_diagrams: %s.%s is drawn but does not exist"
                                 % (cls.__name__, call))
    if importlib.util.find_spec("pyspark") is None:
        raise SystemExit("docs_diagrams: pyspark is drawn but not installed")


def box(ax, x, y, w, h, title, body, color, foot=None):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                fc=color, ec="#555555", lw=1.2))
    ax.text(x + w / 2, y + h - 0.18, title, ha="center", va="top", fontsize=11, weight="bold")
    ax.text(x + w / 2, y + h / 2 - 0.12, body, ha="center", va="center", fontsize=8.5)
    if foot:
        ax.text(x + w / 2, y + 0.08, foot, ha="center", va="bottom", fontsize=7,
                family="monospace", color="#444444")


def arrow(ax, x0, y0, x1, y1):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=14,
                                 lw=1.4, color="#333333"))


def canvas(w, h):
    fig = plt.figure(figsize=(w, h), dpi=DPI)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, w)
    ax.set_ylim(0, h)
    ax.axis("off")
    return fig, ax


def save(fig, name, outdir):
    path = os.path.join(outdir, name)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def data_path(outdir):
    w, h = 13.0, 5.2
    fig, ax = canvas(w, h)
    ax.text(0.3, h - 0.3, "The data path of make demo", fontsize=13, weight="bold", va="top")
    bw, bh = 2.6, 1.45
    top = [(0.4 + i * 3.2, 2.95) for i in range(4)]  # boards .. collector, left to right
    bottom = [(0.4 + (3 - i) * 3.2 - 1.6, 0.55) for i in range(3)]  # landing .. report, right to left
    colors = ["#dbe8f6", "#f6e7cf", "#e6e6e6", "#dcefdc", "#dcefdc", "#e9dcf2", "#e9dcf2"]
    spots = top + bottom
    for i, ((part, body, where), (x, y)) in enumerate(zip(DATA_PATH, spots)):
        box(ax, x, y, bw, bh, part, body, colors[i], where)
        if i in FAULTS:
            ax.text(x + bw / 2, y + bh + 0.12, "faults: " + FAULTS[i], ha="center",
                    fontsize=8, color="#a03030", style="italic")
    for i in range(3):
        (x0, y0), (x1, _) = top[i], top[i + 1]
        arrow(ax, x0 + bw, y0 + bh / 2, x1, y0 + bh / 2)
    cx, cy = top[3]
    lx, ly = bottom[0]
    arrow(ax, cx + bw / 2, cy, lx + bw / 2 + 0.9, ly + bh)
    for i in range(2):
        (x0, y0), (x1, _) = bottom[i], bottom[i + 1]
        arrow(ax, x0, y0 + bh / 2, x1 + bw, y0 + bh / 2)
    ax.text(w - 0.3, 0.15, "From the boards to the collector the readings travel as MQTT; from the landing on, as files.",
            ha="right", fontsize=8, color="#555555")
    return save(fig, "data-path.png", outdir)


def outbox_life(outdir):
    w, h = 13.0, 6.4
    fig, ax = canvas(w, h)
    ax.text(0.3, h - 0.3, "A QoS 1/2 message in the outbox, and what a power cut at each step keeps",
            fontsize=13, weight="bold", va="top")
    left, cw, gap = 2.35, 1.95, 0.17
    xs = [left + i * (cw + gap) for i in range(len(STEPS))]
    y = 4.2
    for i, (step, how, told, _) in enumerate(STEPS):
        box(ax, xs[i], y, cw, 1.35, step, how, "#dbe8f6", told)
        if i:
            arrow(ax, xs[i - 1] + cw, y + 0.67, xs[i], y + 0.67)
    ax.text(0.3, y - 0.35, "power cut here keeps:", fontsize=9, style="italic", va="center")
    for r, (outbox, cells) in enumerate(KEEPS):
        ry = y - 1.35 - r * 1.12
        ax.text(0.3, ry + 0.45, outbox, fontsize=9, weight="bold", va="center")
        for i, (cell, color) in enumerate(cells):
            ax.add_patch(FancyBboxPatch((xs[i], ry), cw, 0.9, boxstyle="round,pad=0.01,rounding_size=0.05",
                                        fc=color, ec="#999999", lw=0.8))
            ax.text(xs[i] + cw / 2, ry + 0.45, cell, ha="center", va="center", fontsize=7.8)
    ax.text(0.3, 0.12, "green: kept, delivered after the reboot; red: lost; amber: by a setting; "
            "grey: nothing to lose. Details: docs/outbox.md", fontsize=8, color="#555555")
    return save(fig, "outbox-life.png", outdir)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    outdir = argv[0] if argv else OUT
    os.makedirs(outdir, exist_ok=True)
    check_names()
    for path in (data_path(outdir), outbox_life(outdir)):
        print("docs_diagrams: wrote", os.path.relpath(path, ROOT))


if __name__ == "__main__":
    main()

"""`make bench`: holdfast's figures, section by section (CPython).

    PYTHONPATH=tools .venv/bin/python -m bench [--only client] [--skip client] [--quick]
                                               [--out build/bench/results] [--docs]
                                               [--frozen-unix PATH] [--unix32 PATH]

Each section is a module tools/bench/<name>.py with

    TITLE = "..."
    def run(ctx) -> dict   {"markdown": str, "data": json-able,
                            "targets": [{"name", "value", "goal", "pass"}]}

and one line in SECTIONS below. ctx gives the repo root, the build dir, the
options (ctx.quick, ctx.args) and ctx.log(...) for progress lines. A section
that raises is reported as failed; the others still run.

Writes build/bench/results/latest.md and latest.json; --docs also
copies the Markdown to docs/bench.md (the copy the README links to).
"""

import argparse
import datetime
import importlib
import json
import os
import platform
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Sections a --quick run leaves out unless named with --only: Spark's start
# and warm-up alone take minutes, and the collector's ceiling needs its full
# load to mean anything.
NOT_QUICK = ("pipeline", "ingest")

# (name, module): run in this order. Add a section here.
SECTIONS = [
    ("codec", "bench.codec"),
    ("client", "bench.client"),
    ("ws", "bench.ws"),
    ("footprint", "bench.footprint"),
    ("outbox", "bench.outbox"),
    ("board", "bench.board"),
    ("pipeline", "bench.pipeline"),
    ("ingest", "bench.ingest"),
]


class Context:
    def __init__(self, args, started):
        self.root = ROOT
        self.build = os.path.join(ROOT, "build", "bench")
        self.args = args
        self.quick = args.quick
        self.started = started
        self.section = ""

    def log(self, msg):
        t = time.monotonic() - self.started
        print("[%02d:%02d] %s%s" % (t // 60, t % 60, self.section + ": " if self.section else "", msg),
              flush=True)


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "os": "%s %s" % (platform.system(), platform.release()),
            "python": platform.python_version()}


def _load():
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def git_rev():
    try:
        import subprocess
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "firmware"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + (" + uncommitted firmware changes" if dirty else "")
    except Exception:
        return "unknown"


def _verdict(t):
    return "n/a" if t["pass"] is None else "PASS" if t["pass"] else "MISS"


def render(report):
    m = report["machine"]
    out = ["# holdfast benchmarks", "",
           "Run %s, %.0f s, on %d CPUs (%s), %s, commit %s; load average %s at the start, "
           "%s at the end (other work on the machine shows in the spread of the rates). "
           "Produced by `make bench` (tools/bench); figures vary from run to run, compare "
           "ratios rather than absolute rates."
           % (report["date"], report["duration_s"], m["nproc"], m["cpu"], m["os"], report["commit"],
              report["load"][0], report["load"][-1]), ""]
    if report.get("left_out"):
        out.append("A --quick smoke run (shorter runs, fewer rows: not figures to quote); left "
                   "out: %s." % ", ".join(report["left_out"]))
        out.append("")
    for name, sec in report["sections"].items():
        out.append("## %s" % sec["title"])
        out.append("")
        if sec.get("error"):
            out.append("Section failed: `%s`" % sec["error"])
            out.append("")
            continue
        out.append(sec["markdown"].rstrip())
        out.append("")
    targets = report["targets"]
    if targets:
        out.append("## Targets")
        out.append("")
        out.append("| | target | holdfast | |")
        out.append("| --- | --- | --- | --- |")
        for t in targets:
            out.append("| %s | %s | %s | **%s** |" % (t["name"], t["goal"], t["value"], _verdict(t)))
        out.append("")
    out.extend([
        "## Running it", "",
        "`make bench` runs every section (about 10 minutes on 2 CPUs, half of it the pipeline's 4M records) and writes "
        "build/bench/results/latest.md and latest.json; `make bench BENCH_ARGS=--quick` is the "
        "smoke run (about a minute and a half on 2 busy CPUs: short runs, the client table's "
        "main rows, no pipeline or ingest), `--only footprint` one section, "
        "`--peers holdfast,floor,umqtt_simple` limits the "
        "client table's columns, `--docs` also rewrites this file. Each section is a "
        "tools/bench/<name>.py with a run(ctx), listed in SECTIONS in tools/bench/__main__.py. The "
        "peers are downloaded with pip into build/peers/ at bench time and never committed. "
        "tools/fleet/proxy.py (latency, jitter, random resets, black-hole partitions; a class and a "
        "CLI) is the same proxy the fault-injection tests use.", ""])
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    names = [n for n, _ in SECTIONS]
    ap.add_argument("--only", default="", help="comma-separated sections to run (%s)" % ",".join(names))
    ap.add_argument("--skip", default="", help="comma-separated sections to skip")
    ap.add_argument("--quick", action="store_true", help="shorter runs (a smoke test, not figures)")
    ap.add_argument("--peers", default="", help="client section: comma-separated rows to run")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "results"))
    ap.add_argument("--docs", action="store_true", help="also write docs/bench.md")
    # Binaries the user built from MicroPython's source (docs/footprint.md); a
    # column whose binary is not given is left out, the reason printed.
    ap.add_argument("--frozen-unix", default=os.environ.get("FROZEN_UNIX") or None, metavar="PATH",
                    help="footprint: a unix port with tools/bench/mp/manifest.py frozen in "
                         "(default: $FROZEN_UNIX)")
    ap.add_argument("--unix32", default=os.environ.get("UNIX32") or None, metavar="PATH",
                    help="footprint, board: the unix port built 32-bit (default: $UNIX32)")
    args = ap.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    skip = [s for s in args.skip.split(",") if s]
    for s in only + skip:
        if s not in names:
            ap.error("unknown section %r (have: %s)" % (s, ", ".join(names)))
    started = time.monotonic()
    ctx = Context(args, started)
    report = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": machine(),
              "commit": git_rev(), "sections": {}, "targets": [], "load": [_load()],
              "left_out": []}
    ctx.log("machine: %d CPUs, %s" % (report["machine"]["nproc"], report["machine"]["cpu"]))
    for name, modname in SECTIONS:
        if (only and name not in only) or name in skip:
            continue
        if args.quick and not only and name in NOT_QUICK:
            ctx.log("--quick: %s left out (--only %s --quick runs it)" % (name, name))
            report["left_out"].append(name)
            continue
        mod = importlib.import_module(modname)
        ctx.section = name
        ctx.log("start: %s" % mod.TITLE)
        t0 = time.monotonic()
        try:
            res = mod.run(ctx)
            sec = {"title": mod.TITLE, "markdown": res["markdown"], "data": res.get("data"),
                   "duration_s": round(time.monotonic() - t0, 1)}
            for t in res.get("targets", []):
                report["targets"].append(dict(t, section=name))
        except Exception as e:  # one broken section does not hide the others
            traceback.print_exc()
            sec = {"title": mod.TITLE, "error": "%s: %s" % (e.__class__.__name__, e),
                   "duration_s": round(time.monotonic() - t0, 1)}
        report["sections"][name] = sec
        ctx.log("done in %.0f s" % sec["duration_s"])
        ctx.section = ""
    report["duration_s"] = round(time.monotonic() - started, 1)
    report["load"].append(_load())
    md = render(report)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "latest.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    if args.docs:
        with open(os.path.join(ROOT, "docs", "bench.md"), "w") as f:
            f.write(md)
    print()
    print(md)
    ctx.log("wrote %s (%.0f s in all)" % (os.path.relpath(os.path.join(args.out, "latest.md"), ROOT),
                                          report["duration_s"]))
    for t in report["targets"]:
        print("%s  %s: %s (target %s)" % (_verdict(t), t["name"], t["value"], t["goal"]))
    return 1 if any(s.get("error") for s in report["sections"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())

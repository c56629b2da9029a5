"""The Markdown report: summary, per QoS, latency, per device, rejected lines,
the collector's quarantine (the plots are drawn by plots.py)."""

import os
import re
import time

REPORT_DEVICE_ROWS = 50
REPORT_GAP_RANGES = 8


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.0f" % v if abs(v) >= 10 else "%.1f" % v
    return str(v)


def _visible(text):
    """Control and line-breaking characters as escapes: device text never
    starts a line of its own."""
    return "".join(c if c.isprintable() else "\\u%04x" % ord(c) if ord(c) < 0x10000
                   else c for c in str(text))


def text(v):
    """Device-made text (a name, a reason, a cell) as plain Markdown text:
    every character that Markdown or HTML could read as markup in the middle
    of a line escaped (it never starts one), so a backtick, a `<script>`, a
    `[link](javascript:...)`, a `$math$` or a `|` read as the characters
    they are."""
    out = []
    for c in _visible(_fmt(v)):
        if c in "&<>":
            out.append("&%s;" % {"&": "amp", "<": "lt", ">": "gt"}[c])
        elif c in "\\`*_[]|~$":
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


_CODE_SAFE = re.compile(r"[A-Za-z0-9 _.:/=,;+()'\"{}%@#!?-]*")


def code(v):
    """Device-made text in a code span when it holds nothing a renderer
    could take for markup or HTML there (what passes the contract at the
    door always does), else as escaped text()."""
    v = str(v)
    return "`%s`" % v if _CODE_SAFE.fullmatch(v) else text(v)


def _gap_text(ranges, limit=REPORT_GAP_RANGES):
    if not ranges:
        return ""
    parts = [str(r["lo"]) if r["lo"] == r["hi"] else "%d-%d" % (r["lo"],
                                                               r["hi"])
             for r in ranges[:limit]]
    more = len(ranges) - limit
    return ", ".join(parts) + (" ... (+%d more)" % more if more > 0 else "")


def _md_table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(text(c) for c in r) + " |")
    return "\n".join(out)


def write_report(path, summary, health_rows, qos_rows, rejected_reasons,
                 rejected_examples, quarantine_reasons, no_w_devices,
                 latency_png, delivery_png, timeline_png=None, qos2_rows=()):
    s = summary
    lines = ["# holdfast telemetry report", ""]
    lines.append("Generated %s UTC by tools/pipeline (%s mode) from %s."
                 % (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                    s["mode"], code(s["input"])))
    lines += ["", "## Summary", ""]
    lines.append(_md_table(
        ["landing lines", "valid", "rejected", "duplicates removed",
         "of them QoS 2 (promise broken)", "readings", "devices",
         "quarantined by collector"],
        [[s["lines"], s["valid"], s["rejected"], s["duplicates"],
          s["qos2_duplicates"], s["readings"], s["devices"],
          _fmt(s["quarantined"])]]))
    lines.append("")
    if s["qos2_duplicates"]:
        lines.append("**QoS 2 exactly-once broken: %d duplicate cop%s of %d "
                     "reading(s)** (removed from the readings, counted here: "
                     "QoS 2 must deliver once; see docs/telemetry.md for "
                     "when it holds):" % (
                         s["qos2_duplicates"],
                         "y" if s["qos2_duplicates"] == 1 else "ies",
                         len(qos2_rows)))
        lines.append("")
        for r in qos2_rows[:20]:
            lines.append("- %s b=%d s=%d: %d copies, the last %d ms after "
                         "the first; %s." % (
                             code(r["device"]), r["boot"], r["seq"], r["copies"],
                             r["last_rx_ms"] - r["rx_ms"], r["cause"]))
        if len(qos2_rows) > 20:
            lines.append("- ... and %d more (the `qos2_duplicates` column of "
                         "the `health` table)" % (len(qos2_rows) - 20))
    else:
        lines.append("QoS 2 delivery: no reading delivered twice at QoS 2.")
    lines.append("")
    lossy = [r for r in health_rows if r["missing"] > 0
             and any(q in ("1", "2") for q in r["qos"].split(","))]
    if lossy:
        lines.append("**QoS 1/2 delivery: %d reading(s) lost on %d "
                     "device(s)** (QoS 1 and 2 must not lose):"
                     % (sum(r["missing"] for r in lossy), len(lossy)))
        lines.append("")
        for r in lossy[:20]:
            lines.append("- %s (QoS %s): %d missing: %s"
                         % (code(r["device"]), r["qos"], r["missing"],
                            _gap_text(r["gap_ranges"])))
        if len(lossy) > 20:
            lines.append("- ... and %d more device(s)" % (len(lossy) - 20))
    else:
        lines.append("QoS 1/2 delivery: no reading lost (every sequence "
                     "number between each device's first and last arrived).")
    collided = [r for r in health_rows if r.get("key_collisions")]
    if collided:
        lines.append("")
        lines.append("**Key collisions: %d key(s) (d, b, s) carry different readings, "
                     "%d reading(s) beside the one kept** (not duplicates: the board "
                     "used a boot and sequence number again, as one whose state file "
                     "was wiped does; readings/ keeps one row a key):"
                     % (sum(r["key_collisions"] for r in collided),
                        s.get("collided_readings") or 0))
        lines.append("")
        for r in collided[:20]:
            lines.append("- %s: %d key(s)" % (code(r["device"]), r["key_collisions"]))
        if len(collided) > 20:
            lines.append("- ... and %d more device(s)" % (len(collided) - 20))
    if timeline_png:
        lines += ["", "## Over time", "",
                  "Per device, readings taken on the board and readings "
                  "delivered to the collector, counted since the first "
                  "reading; the shaded gap is what waited in the device's "
                  "outbox. Dashed lines: the injected faults (a power cut "
                  "on its own device's row).", "",
                  "![timeline](%s)" % timeline_png]
    lines += ["", "## Per QoS", "",
              "Devices grouped by the QoS they published with; "
              "`mixed`: devices that used several (a lost reading has no "
              "QoS of its own). Readings are distinct readings.", ""]
    lines.append(_md_table(
        ["QoS", "devices", "readings", "expected", "missing",
         "devices with loss", "duplicates removed", "QoS 2 duplicates",
         "latency samples", "p50 ms", "p95 ms", "p99 ms"],
        [[r["qos"], r["devices"], r["readings"], r["expected"], r["missing"],
          r["devices_with_loss"], r["duplicates"], r["qos2_duplicates"],
          r["latency_samples"],
          r["latency_p50_ms"], r["latency_p95_ms"], r["latency_p99_ms"]]
         for r in qos_rows]))
    lines += ["", "## Latency", "",
              "End-to-end latency: from the moment the board took the "
              "reading (its own clock) to the moment the collector received "
              "it, for the earliest copy of each reading; percentiles are "
              "exact, interpolated. Readings without the board's clock "
              "(field `w`) have none."]
    if no_w_devices:
        lines.append("Not computed for %d reading(s) without `w`, from "
                     "%d device(s): %s."
                     % (s["no_w_readings"], len(no_w_devices),
                        ", ".join(code(d) for d in no_w_devices[:20])
                        + (" ..." if len(no_w_devices) > 20 else "")))
    if s.get("negative_latency"):
        lines.append("%d reading(s) have a negative latency (device clock "
                     "ahead of the collector's)." % s["negative_latency"])
    if latency_png:
        lines += ["", "![latency](%s)" % latency_png]
    else:
        lines += ["", "No reading carries `w`: no latency plot."]
    lines += ["", "## Per device", ""]
    shown = sorted(health_rows, key=lambda r: (-r["missing"],
                                               -r["duplicates"], r["device"]))
    if len(shown) > REPORT_DEVICE_ROWS:
        lines.append("The %d devices with the most missing, then duplicated, "
                     "readings of %d (all in the `health` table)."
                     % (REPORT_DEVICE_ROWS, len(shown)))
        lines.append("")
        shown = shown[:REPORT_DEVICE_ROWS]
    lines.append(_md_table(
        ["device", "QoS", "seq", "expected", "received", "missing", "gaps",
         "duplicates", "QoS 2 duplicates", "reboots", "p50/p95/p99 ms"],
        [[r["device"], r["qos"], "%d-%d" % (r["first_seq"], r["last_seq"]),
          r["expected"], r["received"], r["missing"],
          _gap_text(r["gap_ranges"]), r["duplicates"], r["qos2_duplicates"],
          r["reboots"],
          "/".join(_fmt(r[k]) for k in ("latency_p50_ms", "latency_p95_ms",
                                         "latency_p99_ms"))
          if r["latency_samples"] else "-"]
         for r in shown]))
    reused = [r for r in health_rows if r["reused_seq"]]
    if reused:
        lines.append("")
        lines.append("Sequence numbers seen under more than one boot (the "
                     "device re-used s after a reboot): %s."
                     % ", ".join("%s (%d)" % (code(r["device"]), r["reused_seq"])
                                 for r in reused[:20]))
    if delivery_png:
        lines += ["", "![delivery](%s)" % delivery_png]
    lines += ["", "## Rejected landing lines", ""]
    if rejected_reasons:
        lines.append("Lines that are not valid readings; they are in the "
                     "`rejected` table with the file, the line and the "
                     "reason.")
        lines.append("")
        lines.append(_md_table(["reason", "lines"], rejected_reasons))
        lines.append("")
        lines.append("Examples:")
        lines.append("")
        for r in rejected_examples:
            # The payload says more than the landing line around it, when
            # the landing record itself was fine.
            line = r["payload"] if r["payload"] is not None and \
                not r["reason"].startswith("landing") else r["line"]
            line = line or ""
            line = line if len(line) <= 120 else line[:117] + "..."
            lines.append("- %s: %s (%s)" % (
                text(r["reason"]), code(line), text(os.path.basename(r["file"] or "?"))))
    else:
        lines.append("None.")
    lines += ["", "## Collector quarantine", ""]
    if quarantine_reasons is None:
        lines.append("No quarantine files under the landing.")
    elif quarantine_reasons:
        lines.append("Messages the collector refused as readings (in "
                     "`quarantine/` of the landing, with their reason):")
        lines.append("")
        lines.append(_md_table(["reason", "messages"], quarantine_reasons))
    else:
        lines.append("Quarantine is empty.")
    lines += ["", "## Tables", "",
              "Under %s: `readings/` (Parquet, partitioned by `day` and "
              "`device`), `health/`, `qos/`, `rejected/`." % code(s["output"]), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))

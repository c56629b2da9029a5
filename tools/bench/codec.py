"""Bench section: heap bytes per codec operation on the unix port
(codec_alloc.py here, gc disabled, gc.mem_alloc() deltas)."""

import json
import os
import subprocess
import sys

TITLE = "Codec: heap bytes per operation (unix port)"


def run(ctx):
    exe = os.path.join(os.path.dirname(sys.executable), "micropython")
    ctx.log("measuring codec allocations under %s" % os.path.basename(exe))
    p = subprocess.run([exe, os.path.join(ctx.root, "tools", "bench", "codec_alloc.py")], capture_output=True,
                       text=True, timeout=120)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode or not lines:
        raise RuntimeError("codec_alloc.py failed: %s" % (p.stderr.strip() or p.stdout.strip()))
    r = json.loads(lines[-1])
    rows = [("PUBLISH (QoS 1, 64-byte payload) encoded into a preallocated buffer",
             r["encode_publish_qos1"], 0),
            ("PUBACK decoded", r["decode_puback"], 0),
            ("PUBLISH decoded, beyond the topic and payload views it hands out",
             r["decode_publish_beyond_views"], 0),
            ("PUBLISH decoded, the two views included", r["decode_publish_qos1"], None)]
    md = ["| operation | bytes | target |", "| --- | --- | --- |"]
    md += ["| %s | %s | %s |" % (n, v, "-" if g is None else g) for n, v, g in rows]
    targets = [{"name": "codec: " + n, "value": "%s B" % v, "goal": "%d B" % g, "pass": v <= g}
               for n, v, g in rows if g is not None]
    return {"markdown": "\n".join(md), "data": r, "targets": targets}

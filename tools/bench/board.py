"""Bench section: code size of the library by part (.mpy bytes, as deployed)
and the heap the sensor application needs: the smallest -X heapsize in which
the unix board runs 500 readings at QoS 1 with its outbox on flash and its
command topic subscribed; a command starts the readings. Measured with the
library and the app as .mpy files (`make deploy`: the target's figure) and
from a ROMFS image (`make deploy ROMFS=1`), on the 64-bit unix port and, when
one is given (make bench UNIX32=path), on a 32-bit one built from MicroPython's
source."""

import json
import os
import shutil
import tempfile
import threading
import time

from bench.footprint import given, m32_build
from board import deploy
from board.emulator import Emulator
from fleet.fleet import provision
from fleet.mosquitto import Mosquitto
from runtimes import mpyc

TITLE = "Board: library size and the application's heap"
READINGS = 500


def _runs_in(kb, broker, n, romfs=False, exe=None, tag="", timeout=90):
    """True if the app delivers readings 0..n-1 in a heap of kb KB. It is
    configured for one reading an hour: the 10 ms interval comes as a
    command, so the heap holds the subscription and the command's path too."""
    import paho.mqtt.client as paho

    dev = "heap%s-%d" % (tag, kb)  # a device (and client id) per variant and heap
    seen = set()
    done = threading.Event()

    def on_message(c, u, m):
        seen.add(json.loads(m.payload)["s"])
        if len(seen) >= n:
            done.set()

    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="bench-" + dev)
    sub.on_message = on_message
    sub.connect(broker.host, broker.port)
    sub.subscribe("holdfast/%s/telemetry" % dev, 1)
    sub.loop_start()
    work = tempfile.mkdtemp(prefix="hf-heap-")
    # With ROMFS the emulated board holds its image in a bytes object below
    # the heap it is given (emulator.py), as a board maps its partition.
    emu = Emulator(os.path.join(work, "flash"), run=True, heap="%dk" % kb, exe=exe)
    try:
        provision(emu.flash, {"broker": broker.host, "port": broker.port, "interval_ms": 3600000,
                              "qos": 1, "device": dev, "outbox_dir": "/outbox", "outbox_slots": 128},
                  romfs)
        emu.start()
        deadline = time.monotonic() + timeout
        cmd = "holdfast/%s/cmd" % dev
        while "commands on " + cmd not in emu.console_text():
            if time.monotonic() > deadline or not emu.running or "MemoryError" in emu.console_text():
                return False
            time.sleep(0.1)
        sub.publish(cmd, b'{"interval_ms": 10}', qos=1).wait_for_publish(10)
        while not done.wait(0.5):
            if time.monotonic() > deadline or not emu.running or "MemoryError" in emu.console_text():
                return False
        return True
    finally:
        emu.stop()
        sub.loop_stop()
        sub.disconnect()
        shutil.rmtree(work, ignore_errors=True)


def run(ctx):
    lines = deploy.sizes("esp32")
    md = ["`.mpy` bytes as `make deploy` puts them on an ESP32:", "", "```"] + lines + ["```", ""]
    n = 100 if ctx.quick else READINGS
    lo, top = 16, 160  # KB: the bisection's range
    m32 = m32_build(given(ctx, "unix32"))
    if m32 is None:
        ctx.log("no 32-bit unix port given (make bench UNIX32=path, docs/footprint.md): the app's "
                "32-bit heap is left out")
    # (label, ROMFS, the micropython to run, 32-bit): the .mpy one on the
    # 64-bit port is the target's figure.
    variants = [(".mpy files", False, None, False), ("ROMFS image", True, None, False)]
    if m32 is not None:
        variants += [(".mpy files", False, m32["exe"], True), ("ROMFS image", True, m32["exe"], True)]
    heaps = {}
    with Mosquitto() as broker:
        for label, romfs, exe, bits32 in variants:
            key = "%s, %s" % (label, "32-bit" if bits32 else "64-bit")
            ctx.log("application heap (%s): %d readings at QoS 1, FileStore outbox, commands "
                    "subscribed, bisecting %d..%d KB" % (key, n, lo, top))

            def runs(kb):
                ok = _runs_in(kb, broker, n, romfs, exe, "-%s%s" % ("rom" if romfs else "mpy",
                                                                    "32" if bits32 else ""))
                ctx.log("  %d KB: %s" % (kb, "runs" if ok else "fails"))
                return ok

            heaps[key] = mpyc.smallest_kb(runs, lo, top, 4)
    hi = heaps[".mpy files, 64-bit"]
    if hi is None:
        raise RuntimeError("the application does not run even in %d KB" % top)

    def cell(key):
        kb = heaps.get(key, "-")
        return "not in %d KB" % top if kb is None else kb if kb == "-" else "%d KB" % kb

    md.append("The sensor application (boards/unix, FileStore outbox, its command topic subscribed "
              "at QoS 1) delivers %d readings at QoS 1 in a heap of **%d KB**%s with the library "
              "and the app as .mpy files (unix port, 64-bit: pointers and GC blocks are twice a "
              "32-bit board's; code loaded from .mpy sits on the heap). It is configured for one "
              "reading an hour and a command sets the 10 ms interval, so the subscribe side, an "
              "inbound message and the command's path are in the heap too."
              % (n, hi, " and not in %d KB" % (hi - 4) if hi > lo else ""))
    md += ["", "The smallest heap by how the code is loaded (the emulated board's ROMFS image "
           "lies in a bytes object below the heap it is given, as a board maps its partition):", "",
           "| code loaded as | 64-bit unix port | 32-bit unix port |", "| --- | ---: | ---: |"]
    for label, how in ((".mpy files", "`make deploy`"), ("ROMFS image", "`make deploy ROMFS=1`")):
        md.append("| %s (%s) | %s | %s |" % (label, how, cell(label + ", 64-bit"), cell(label + ", 32-bit")))
    if m32 is None:
        md += ["", "The 32-bit column needs a unix port built 32-bit from MicroPython's source, "
               "given by path (`make bench UNIX32=path`; docs/footprint.md)."]
    else:
        md += ["", "32-bit: the unix port given (UNIX32), MicroPython %s built with gcc -m32."
               % m32["micropython"]]
    # The core's .mpy target is the footprint section's (measured as loaded).
    targets = [
        {"name": "sensor app heap (%d readings, FileStore outbox, commands subscribed)" % n,
         "value": "%d KB" % hi, "goal": "<= 56 KB", "pass": hi <= 56},
    ]
    return {"markdown": "\n".join(md), "data": {"sizes": lines, "app_heap_kb": hi, "app_heaps": heaps},
            "targets": targets}

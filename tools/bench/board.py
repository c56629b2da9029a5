"""Bench section: code size of the library by part (.mpy bytes, as deployed)
and the heap the sensor application needs: the smallest -X heapsize in which
the unix board runs 500 readings at QoS 1 with its outbox on flash and its
command topic subscribed; a command starts the readings."""

import json
import os
import shutil
import tempfile
import threading
import time

from board import deploy
from board.emulator import Emulator
from fleet.fleet import provision
from fleet.mosquitto import Mosquitto
from runtimes import mpyc

TITLE = "Board: library size and the application's heap"
READINGS = 500


def _runs_in(kb, broker, n, timeout=90):
    """True if the app delivers readings 0..n-1 in a heap of kb KB. It is
    configured for one reading an hour: the 10 ms interval comes as a
    command, so the heap holds the subscription and the command's path too."""
    import paho.mqtt.client as paho

    dev = "heap-%d" % kb
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
    emu = Emulator(os.path.join(work, "flash"), run=True, heap="%dk" % kb)
    try:
        provision(emu.flash, {"broker": broker.host, "port": broker.port, "interval_ms": 3600000,
                              "qos": 1, "device": dev, "outbox_dir": "/outbox", "outbox_slots": 128})
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
    lo, top = 32, 160  # KB: the bisection's range
    with Mosquitto() as broker:
        ctx.log("application heap: %d readings at QoS 1, FileStore outbox, commands subscribed, "
                "bisecting %d..%d KB" % (n, lo, top))

        def runs(kb):
            ok = _runs_in(kb, broker, n)
            ctx.log("  %d KB: %s" % (kb, "runs" if ok else "fails"))
            return ok

        hi = mpyc.smallest_kb(runs, lo, top, 4)
        if hi is None:
            raise RuntimeError("the application does not run even in %d KB" % top)
    md.append("The sensor application (boards/unix, library as .mpy, FileStore outbox, its command "
              "topic subscribed at QoS 1) delivers %d readings at QoS 1 in a heap of **%d KB**%s "
              "(unix port, 64-bit: pointers and GC blocks are twice a 32-bit board's; code loaded "
              "from .mpy sits on the heap, frozen code would not). It is configured for one reading "
              "an hour and a command sets the 10 ms interval, so the subscribe side, an inbound "
              "message and the command's path are in the heap too."
              % (n, hi, " and not in %d KB" % (hi - 4) if hi > lo else ""))
    # The core's .mpy target is the footprint section's (measured as loaded).
    targets = [
        {"name": "sensor app heap (%d readings, FileStore outbox, commands subscribed)" % n,
         "value": "%d KB" % hi, "goal": "<= 56 KB", "pass": hi <= 56},
    ]
    return {"markdown": "\n".join(md), "data": {"sizes": lines, "app_heap_kb": hi}, "targets": targets}

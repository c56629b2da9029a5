"""The rows of the client table: the libraries and holdfast variants run, what
each library does (read from its source), and the figures a row measured."""

import os
import statistics

from bench.mpy import FIRMWARE


def _default_window():
    # holdfast's own default, read from the firmware so the table cannot go stale.
    import inspect
    import sys
    sys.path.insert(0, os.path.dirname(FIRMWARE))
    from holdfast.client import MQTTClient
    return inspect.signature(MQTTClient).parameters["window"].default


DEFAULT_WINDOW = _default_window()

# Rows of the table. kind: floor / holdfast / peer. "only": the tests the row
# runs (None: all). Variants of holdfast show what a constructor argument does.
ROWS = [
    {"id": "floor", "lib": "floor", "label": "floor (no library)", "kind": "floor"},
    {"id": "holdfast", "lib": "holdfast", "label": "holdfast", "kind": "holdfast"},
    {"id": "umqtt_simple", "lib": "umqtt_simple", "kind": "peer", "peer": "umqtt_simple"},
    {"id": "umqtt_robust", "lib": "umqtt_robust", "kind": "peer", "peer": "umqtt_robust"},
    {"id": "umqtt_simple2", "lib": "umqtt_simple2", "kind": "peer", "peer": "umqtt_simple2"},
    {"id": "mqtt_async", "lib": "mqtt_async", "kind": "peer", "peer": "mqtt_async",
     "shim": True},
    {"id": "chumicro", "lib": "chumicro", "kind": "peer", "peer": "chumicro"},
    {"id": "holdfast_w32", "lib": "holdfast", "label": "holdfast window=32", "kind": "variant",
     "opts": {"window": "32"}, "only": ["tput1", "ptput1", "heap"]},
    {"id": "holdfast_nagle", "lib": "holdfast", "kind": "variant", "broker": "default",
     "label": "holdfast, mosquitto with its default set_tcp_nodelay false",
     "only": ["tput1", "ptput1"]},
    {"id": "holdfast_lean", "lib": "holdfast", "kind": "variant",
     "label": "holdfast lean (size=128, window=1, outbox MemoryStore(128, slots=1))",
     "opts": {"size": "128", "window": "1", "obsize": "128", "obslots": "1", "obheld": "1"},
     "only": ["heap", "minheap"]},
]
# What holdfast's constructor defaults preallocate, for the heap allowance:
# the send buffer until a packet needs more (session.py's _TX_FIRST; size
# bytes from the first larger packet), the receive buffer until messages can
# arrive (session.py's _RX_ACKS; size bytes once something is subscribed) and
# the default outbox's ring (MemoryStore(max(2048, 2 * size), 16)).
DEFAULT_SIZE = 1024
DEFAULT_TX = 256
DEFAULT_RX = 64
DEFAULT_RING = 2048
DEFAULT_BUFFERS = DEFAULT_TX + DEFAULT_RX + DEFAULT_RING

# Whether the library does it (static: from reading each library's source).
FEATURES = {
    "floor": ("-", "-", "-"),
    "holdfast": ("yes", "RAM outbox (default)", "yes, with backoff; "
                 "unacknowledged messages re-sent"),
    "umqtt_simple": ("no (asserts)", "no", "no"),
    "umqtt_robust": ("no (asserts)", "no", "yes: blocking retry loop, re-sends the message "
                     "being published"),
    "umqtt_simple2": ("no", "no", "no (umqtt.robust2 adds it)"),
    "mqtt_async": ("no", "no", "yes: keeps connected, re-sends the one unacknowledged message"),
    "chumicro": ("no (UnsupportedQoSError)", "no (RAM queue of 8 before connect)",
                 "yes: self-heal with backoff"),
}

PIPELINE_NOTE = {
    "floor": "stop-and-wait",
    "holdfast": "window of %d (default)" % DEFAULT_WINDOW,
    "holdfast_w32": "window of 32",
    "umqtt_simple": "stop-and-wait",
    "umqtt_robust": "stop-and-wait",
    "umqtt_simple2": "stop-and-wait",
    "mqtt_async": "stop-and-wait (publish(sync=True))",
    "chumicro": "pipelined, tx queue of 20",
}


def med(r, key):
    runs = r["res"].get(key)
    if not isinstance(runs, list) or not runs:
        return None
    return statistics.median(x["rate"] for x in runs)


def val(r, key, field):
    if r is None:
        return None
    v = r["res"].get(key)
    if not isinstance(v, dict) or field not in v:
        return None
    return v[field]

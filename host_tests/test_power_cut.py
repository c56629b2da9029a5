# Power cuts of a whole emulated board: the sensor app (unix port) publishes
# at QoS 1 and at QoS 2 through mosquitto, with its outbox on its flash, and
# is SIGKILLed at random moments many times, then powered on again on the
# same flash. A persistent QoS 2 subscriber must see every sequence number at
# least once (QoS 1) and exactly once (QoS 2).
import json
import os
import random
import re
import threading
import time

import paho.mqtt.client as paho
import pytest

from board.emulator import Emulator
from fleet.fleet import provision, DRAINED

CUTS = 12


def publish_marker(broker, topic, payload):
    """Publishes one QoS 2 message from a client of its own and waits until
    the broker has taken it."""
    m = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="marker-%d" % os.getpid())
    m.connect(broker.host, broker.port)
    m.loop_start()
    try:
        m.publish(topic, payload, 2).wait_for_publish(10)
    finally:
        m.loop_stop()
        m.disconnect()


@pytest.mark.parametrize("qos", [1, 2])
def test_sigkill_at_random_moments_loses_nothing(qos, mosquitto, tmp_path):
    dev = "cut-q%d-%d" % (qos, os.getpid())
    topic = "holdfast/%s/telemetry" % dev
    seen = []
    markers = []
    lock = threading.Lock()

    def on_message(c, u, m):
        p = json.loads(m.payload)
        with lock:
            if "marker" in p:
                markers.append(p["marker"])
            else:
                seen.append(p["s"])

    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="watch-" + dev, clean_session=False)
    sub.on_message = on_message
    sub.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, 2)
    subscribed = threading.Event()
    sub.on_subscribe = lambda c, u, mid, rc, p: subscribed.set()
    sub.connect(mosquitto.host, mosquitto.port)
    sub.loop_start()
    assert subscribed.wait(10), "the watcher did not subscribe"  # before the first reading
    flash = str(tmp_path / "flash")
    provision(flash, {"broker": mosquitto.host, "port": mosquitto.port, "interval_ms": 20, "qos": qos,
                      "keepalive": 5, "clean_session": False, "device": dev, "outbox_dir": "/outbox",
                      "outbox_slots": 256})
    emu = Emulator(flash, run=True)
    rng = random.Random(qos)
    booted = r"holdfast: device %s boot \d+" % re.escape(dev)
    try:
        emu.start()
        for _ in range(CUTS):
            # Each cut after the boot line (a cut before it would be a boot
            # the count below misses), at any moment after: mid-publish,
            # mid-write, mid-ack.
            emu.wait_console(booted, timeout=30)
            time.sleep(rng.uniform(0.3, 1.5))
            emu.kill()
            emu.start()
        emu.wait_console(booted, timeout=30)
        open(os.path.join(flash, "hf_drain"), "w").close()
        emu.wait_console(DRAINED.pattern, timeout=60)
        last = int(DRAINED.search(emu.console_text()).group(1))
        # The board has drained: the broker took every reading. A later
        # message from another client: once it is here, every reading and
        # any duplicate of one is too.
        publish_marker(mosquitto, topic, json.dumps({"marker": dev}))
        deadline = time.time() + 20
        while time.time() < deadline:
            with lock:
                if markers:
                    break
            time.sleep(0.05)
        assert markers == [dev], "the marker did not arrive"
    finally:
        emu.stop()
        sub.loop_stop()
        sub.disconnect()
    boots = emu.console_text(since_start=False).count("holdfast: device %s boot" % dev)
    assert boots == CUTS + 1, "the board did not boot after every cut"
    with lock:
        got = list(seen)
    assert last > 50, "too few readings to mean anything: %d" % last
    missing = sorted(set(range(last + 1)) - set(got))
    assert not missing, "lost after power cuts: %s" % missing
    if qos == 2:
        twice = sorted(s for s in set(got) if got.count(s) > 1)
        assert not twice, "QoS 2 readings delivered more than once: %s" % twice

# Power cuts of a whole emulated board: the sensor app (unix port) publishes
# at QoS 1 and at QoS 2 through mosquitto, with its outbox on its flash, and
# is SIGKILLed at random moments many times, then powered on again on the
# same flash. A persistent QoS 2 subscriber must see every sequence number at
# least once (QoS 1) and exactly once (QoS 2).
import json
import os
import random
import threading
import time

import paho.mqtt.client as paho
import pytest

from board.emulator import Emulator
from fleet.fleet import provision, DRAINED

CUTS = 12


@pytest.mark.parametrize("qos", [1, 2])
def test_sigkill_at_random_moments_loses_nothing(qos, mosquitto, tmp_path):
    dev = "cut-q%d-%d" % (qos, os.getpid())
    topic = "holdfast/%s/telemetry" % dev
    seen = []
    lock = threading.Lock()

    def on_message(c, u, m):
        with lock:
            seen.append(json.loads(m.payload)["s"])

    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="watch-" + dev, clean_session=False)
    sub.on_message = on_message
    sub.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, 2)
    sub.connect(mosquitto.host, mosquitto.port)
    sub.loop_start()
    flash = str(tmp_path / "flash")
    provision(flash, {"broker": mosquitto.host, "port": mosquitto.port, "interval_ms": 20, "qos": qos,
                      "keepalive": 5, "clean_session": False, "device": dev, "outbox_dir": "/outbox",
                      "outbox_slots": 256})
    emu = Emulator(flash, run=True)
    rng = random.Random(qos)
    try:
        emu.start()
        for _ in range(CUTS):
            time.sleep(rng.uniform(0.3, 1.5))  # at any moment: mid-publish, mid-write, mid-ack
            emu.kill()
            emu.start()
        open(os.path.join(flash, "hf_drain"), "w").close()
        emu.wait_console(DRAINED.pattern, timeout=60)
        last = int(DRAINED.search(emu.console_text()).group(1))
        deadline = time.time() + 10
        while time.time() < deadline:
            with lock:
                if set(range(last + 1)) <= set(seen):
                    break
            time.sleep(0.1)
        time.sleep(0.5)  # late duplicates, if any, would arrive now
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

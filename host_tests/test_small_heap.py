# A new user's board (issue 30, E15): the unix port with a 64 KB heap, the
# client loaded from .mpy at the default size, subscribed; messages of 6, 10
# and 15 KB arrive, then small ones. The large ones are passed over and
# counted (client.oversized) without the heap they would take (no module
# loads, no exception worded for them), and the client stays up, receives
# the small ones and acknowledges them. Against a real mosquitto.
import json
import os
import subprocess
import sys
import time

import paho.mqtt.client as paho

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from runtimes import mpyc  # noqa: E402

SCRIPT = os.path.join(ROOT, "host_tests", "small_heap_client.py")
PUBLISHER = os.path.join(ROOT, "host_tests", "small_heap_publisher.py")
HEAP = "64k"
PUB_HEAP = "54k"  # the publish-only client's smallest heap (make bench, .mpy)
SMALL = ["s%d" % i for i in range(4)]
WAIT = 60  # s: a bound on each wait for evidence, not a measured time


def test_large_messages_to_a_small_heap_client_from_mpy_are_counted_and_it_keeps_receiving(mosquitto):
    mpy = os.path.join(mpyc.build(), "firmware")
    cid = "hf-small-heap"
    proc = subprocess.Popen([mpyc.micropython_exe(), "-X", "heapsize=" + HEAP, SCRIPT, mpy,
                             str(mosquitto.port), cid, str(len(SMALL))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert first.strip() == "READY", first + proc.stdout.read()
        pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=cid + "-pub")
        pub.connect(mosquitto.host, mosquitto.port)
        pub.loop_start()
        try:
            topic = "hf/sh/" + cid + "/m"
            for kb, qos in ((6, 1), (10, 0), (15, 2), (6, 0), (10, 1)):
                pub.publish(topic, b"L" * (kb * 1024), qos=qos).wait_for_publish(WAIT)
            for m in SMALL:
                pub.publish(topic, m, qos=1).wait_for_publish(WAIT)
        finally:
            pub.loop_stop()
            pub.disconnect()
        out, _ = proc.communicate(timeout=4 * WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out
    r = json.loads(lines[-1][7:])
    # Every large one counted, the small ones in order on the same link, and
    # none sent again on the next link: each was acknowledged.
    assert r == {"small": SMALL, "oversized": 5, "connected": True, "after": ["end"]}, (r, out)


def test_a_publisher_in_its_smallest_heap_rides_out_broker_restarts(mosquitto):
    # A publish-only board at the smallest heap the bench gives for it: the
    # broker restarts twice mid-run (sessions kept). The first lost link loads
    # the link's error words; a reconnect that then found no heap raised
    # MemoryError out of every call and never came back (54k, before
    # shell.LINK_ERRORS took MemoryError). Every reading arrives.
    n = 60
    cid = "hf-small-pub"
    got = set()
    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=cid + "-sub", clean_session=False)
    sub.reconnect_delay_set(0.1, 0.5)
    sub.on_message = lambda c, u, m: got.add(int(m.payload))
    sub.on_connect = lambda c, u, f, rc, p=None: c.subscribe("hf/shp/" + cid, 1)
    sub.connect(mosquitto.host, mosquitto.port)
    sub.loop_start()
    mpy = os.path.join(mpyc.build(), "firmware")
    proc = subprocess.Popen([mpyc.micropython_exe(), "-X", "heapsize=" + PUB_HEAP, PUBLISHER, mpy,
                             str(mosquitto.port), cid, str(n)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        first = proc.stdout.readline()
        assert first.strip() == "READY", first + proc.stdout.read()
        for at in ("AT 20", "AT 40"):  # a restart once the client is that far
            for line in proc.stdout:
                seen.append(line)
                if line.strip() == at:
                    break
            assert seen and seen[-1].strip() == at, "".join(seen)
            mosquitto.restart()
        out = "".join(seen) + proc.stdout.read()
        proc.wait(WAIT)
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, out
        r = json.loads(lines[-1][7:])
        assert r["sent"] == n and r["flushed"] and r["pending"] == 0, r
        assert r["attempts"] >= 3, r  # the first link, then one at least per restart
        for _ in range(WAIT * 10):  # evidence, bounded: the subscriber has them all
            if len(got) == n:
                break
            time.sleep(0.1)
        assert got == set(range(n)), sorted(set(range(n)) - got)
    finally:
        sub.loop_stop()
        sub.disconnect()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

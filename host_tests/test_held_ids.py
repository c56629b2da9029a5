# Inbound QoS 2 against the real mosquitto [MQTT-4.3.3-2]: the broker has as
# many QoS 2 messages in flight to the client as it allows (20, mosquitto's
# default max_inflight_messages), the client delivers them all, and the link
# is cut before any PUBREC reaches the broker. Back with the same session,
# the broker sends all 20 again with DUP; the client holds every one of
# their ids, so each message is delivered exactly once. The subscriber runs
# under CPython and under the MicroPython unix port (held_scenario.py).
import json
import os
import queue
import subprocess
import sys
import threading
import time

import paho.mqtt.client as paho
import pytest

from fleet.mosquitto import Mosquitto
from fleet.proxy import Proxy

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(HERE, "held_scenario.py")
BIN = os.path.dirname(sys.executable)
RUNTIMES = {"cpython": [sys.executable, "-u"], "micropython": [os.path.join(BIN, "micropython")]}
INFLIGHT = 20
WAIT = 30  # seconds: bound on every wait for evidence (never a pass/fail figure)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Mosquitto(workdir=str(tmp_path_factory.mktemp("mosquitto-held")),
                  extra_conf="max_inflight_messages %d" % INFLIGHT)
    b.start()
    try:
        yield b
    finally:
        b.close()


class Sub:
    """The subscriber process, read line by line without blocking the test."""

    def __init__(self, runtime, port, cid, topic):
        self.p = subprocess.Popen(RUNTIMES[runtime] + [SCEN, "127.0.0.1", str(port), cid, topic, str(INFLIGHT)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        self.lines = queue.Queue()
        self.out = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.out.append(line)
            self.lines.put(line.strip())
        self.lines.put(None)

    def expect(self, prefix):
        while True:
            try:
                line = self.lines.get(timeout=WAIT)
            except queue.Empty:
                line = None
            if line is None:
                self.p.kill()
                raise AssertionError("no %r from the subscriber:\n%s" % (prefix, "".join(self.out)))
            if line.startswith(prefix):
                return line[len(prefix):]

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()


def _wait(cond, what, out=None):
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, "waited %d s for %s %s" % (WAIT, what, out or "")
        time.sleep(0.01)


def _publish(pub, topic, payload):
    info = pub.publish(topic, payload, qos=2)
    info.wait_for_publish(WAIT)
    assert info.is_published(), payload


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_qos2_messages_in_flight_up_to_the_brokers_limit_are_delivered_once_across_a_cut(runtime, broker):
    tag = "%s-%d" % (runtime, os.getpid())
    cid = "held-" + tag
    topic = "held/" + tag
    payloads = ["m%02d" % i for i in range(INFLIGHT)]
    pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="held-pub-" + tag)
    pub.connect(broker.host, broker.port)
    pub.loop_start()
    with Proxy(0, (broker.host, broker.port)) as proxy:
        sub = Sub(runtime, proxy.port, cid, topic)
        try:
            sub.expect("READY")
            for p in payloads:
                _publish(pub, topic, p)
            # All 20 PUBLISHes have passed the proxy into the subscriber's
            # socket (CONNACK 4 bytes, SUBACK 5, then each PUBLISH); only then
            # is the link black-holed, so its PUBRECs cannot get out.
            size = 4 + 5 + INFLIGHT * (2 + 2 + len(topic) + 2 + 3)
            _wait(lambda: proxy.stats["down_bytes"] >= size, "the PUBLISHes to reach the subscriber",
                  proxy.stats)
            proxy.set_blackhole(True)
            sub.go()
            assert sub.expect("DELIVERED ") == str(INFLIGHT)
            proxy.reset_all()  # the PUBRECs die in the proxy with the link
            proxy.set_blackhole(False)
            _publish(pub, topic, "end")  # queued behind the 20 re-sends
            sub.go()
            r = json.loads(sub.expect("RESULT "))
            sub.p.wait(WAIT)
        finally:
            if sub.p.poll() is None:
                sub.p.kill()
    pub.loop_stop()
    pub.disconnect()
    # The broker did send all 20 again: none of their PUBRECs had reached it.
    resent = [ln for ln in broker.log().splitlines()
              if "Sending PUBLISH to %s (d1, q2" % cid in ln]
    assert len(resent) == INFLIGHT, (len(resent), resent)
    assert r["links"] == 2, r
    assert r["held_evicted"] == 0, r
    dup = sorted(set(p for p in r["got"] if r["got"].count(p) > 1))
    assert not dup, "delivered more than once: %s (%s)" % (dup, r)
    assert sorted(r["got"]) == sorted(payloads + ["end"]), r

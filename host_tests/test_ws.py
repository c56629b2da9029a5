# MQTT over WebSockets (ws:// and wss://), under CPython and the MicroPython
# unix port, against real brokers: aedes (npm, ws and wss) with paho's
# websockets transport as the reference client on it, amqtt (PyPI) as a
# second broker, and the scripted server of wsserver.py for what no broker
# does (hostile handshakes and frames). Each client run is its own process
# (ws_scenarios.py). README "MQTT over WebSockets" says what is tested.
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import paho.mqtt.client as paho
import pytest

from fleet.wsbroker import Aedes, Amqtt, make_pki
from wsserver import WSServer

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(HERE, "ws_scenarios.py")
BIN = os.path.dirname(sys.executable)
RUNTIMES = {"cpython": sys.executable, "micropython": os.path.join(BIN, "micropython")}
runtimes = pytest.mark.parametrize("runtime", sorted(RUNTIMES))


def run(runtime, name, args, timeout=120, wait=True):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(args, f)
    p = subprocess.Popen([RUNTIMES[runtime], SCEN, name, f.name], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if not wait:
        return p, f.name
    return result(p, f.name, timeout)


def result(p, path, timeout=120):
    try:
        out, _ = p.communicate(timeout=timeout)
    finally:
        os.remove(path)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise AssertionError("scenario printed no result (exit %s):\n%s" % (p.returncode, out))


# -- brokers -----------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    key, cert, cafile = make_pki(str(tmp_path_factory.mktemp("ws-pki")))
    return {"key": key, "cert": cert, "cafile": cafile}


@pytest.fixture(scope="module")
def brokers(request, pki):
    """brokers(name): the real broker of that name ("aedes", "aedes_tls",
    "amqtt", "amqtt_tls"), started on first use, stopped with the module."""
    made = {}

    def get(name):
        if name not in made:
            tls = (pki["key"], pki["cert"]) if name.endswith("_tls") else None
            b = (Aedes if name.startswith("aedes") else Amqtt)(tls=tls)
            request.addfinalizer(b.stop)
            made[name] = b.start()
        return made[name]

    return get


@pytest.fixture
def hostile():  # one per test: each case misbehaves on its first connection only
    s = WSServer()
    yield s
    s.close()


class Paho:
    """paho-mqtt over its websockets transport: the reference client."""

    def __init__(self, port, cid, tls=None):
        self.got = []
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, cid, transport="websockets")
        if tls:
            self.c.tls_set(ca_certs=tls)
        self.c.on_message = lambda c, u, m: self.got.append((m.topic, m.payload.decode(), m.qos))
        self.c.connect("127.0.0.1", port, 30)
        self.c.loop_start()

    def subscribe(self, topic):
        done = threading.Event()
        self.c.on_subscribe = lambda *a: done.set()
        self.c.subscribe(topic, 2)
        assert done.wait(10)

    def publish(self, topic, payload, qos=1, retain=False):
        self.c.publish(topic, payload, qos, retain).wait_for_publish(10)

    def wait(self, n, timeout=15):
        end = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < end:
            time.sleep(0.02)
        return self.got

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()


# -- real brokers: QoS 0/1/2 both ways, blocking and asyncio ------------------


def expect(runtime, prefix=""):
    return [[None, "%s %sq%d" % ({"cpython": "cpython", "micropython": "micropython"}[runtime], prefix, q), q]
            for q in (0, 1, 2)]


@runtimes
def test_ws_publish_and_receive_through_aedes_with_paho_as_reference(runtime, brokers):
    aedes = brokers("aedes")
    topic = "ws/%s/rt" % runtime
    ref = Paho(aedes.port, "ref-" + runtime)
    try:
        ref.subscribe(topic)
        ref.publish("ws/%s/retained" % runtime, "from paho", 1, retain=True)
        r = run(runtime, "roundtrip", {"id": "rt-" + runtime, "url": "ws://127.0.0.1:%d/" % aedes.port,
                                       "topic": topic, "retained": "ws/%s/retained" % runtime, "big": 300})
        seen = ref.wait(4)
    finally:
        ref.close()
    got = sorted(r["got"])
    # Our own three, each at the QoS it was sent with, the 300-byte one, and paho's retained message.
    assert got == sorted([[topic, m, q] for _, m, q in expect(runtime)] + [[topic, "B*300", 1]]
                         + [["ws/%s/retained" % runtime, "from paho", 1]]), r
    assert r["flushed"] is True and r["pids"][0] is None and all(r["pids"][1:]), r
    # The reference client saw the same messages through the broker.
    assert sorted(m for t, m, q in seen) == sorted([m for _, m, _ in expect(runtime)] + ["B" * 300]), seen


@runtimes
def test_wss_publish_and_receive_through_aedes(runtime, brokers, pki):
    aedes_tls = brokers("aedes_tls")
    topic = "wss/%s/rt" % runtime
    ref = Paho(aedes_tls.port, "wref-" + runtime, tls=pki["cafile"])
    try:
        ref.subscribe(topic)
        r = run(runtime, "roundtrip", {"id": "wrt-" + runtime, "url": "wss://localhost:%d/mqtt" % aedes_tls.port,
                                       "topic": topic, "ssl_params": {"cafile": pki["cafile"]}})
        seen = ref.wait(3)
    finally:
        ref.close()
    assert sorted(r["got"]) == sorted([topic, m, q] for _, m, q in expect(runtime)), r
    assert sorted(m for t, m, q in seen) == sorted(m for _, m, _ in expect(runtime)), seen


@runtimes
@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_publish_and_receive_through_amqtt(runtime, scheme, brokers, pki):
    b = brokers("amqtt" if scheme == "ws" else "amqtt_tls")
    topic = "am/%s/%s" % (scheme, runtime)
    r = run(runtime, "roundtrip", {"id": "am-%s-%s" % (scheme, runtime), "topic": topic, "big": 300,
                                   "url": "%s://localhost:%d/" % (scheme, b.port),
                                   "ssl_params": {"cafile": pki["cafile"]} if scheme == "wss" else None})
    # amqtt 0.12.1 delivers at the subscription's QoS (2), not the lesser of
    # the two as MQTT 3.1.1 section 3.8.4 says: the QoS is not compared.
    assert sorted(g[:2] for g in r["got"]) == sorted([[topic, m] for _, m, q in expect(runtime)]
                                                     + [[topic, "B*300"]]), r
    assert r["flushed"] is True, r


@runtimes
@pytest.mark.parametrize("broker", ["aedes", "amqtt", "aedes_tls"])
def test_asyncio_client(runtime, broker, brokers, pki):
    b = brokers(broker)
    tls = broker.endswith("_tls")
    topic = "as/%s/%s" % (broker, runtime)
    r = run(runtime, "aroundtrip", {"id": "as-%s-%s" % (broker, runtime), "topic": topic,
                                    "url": "%s://localhost:%d/" % ("wss" if tls else "ws", b.port),
                                    "ssl_params": {"cafile": pki["cafile"]} if tls else None})
    n = 2 if broker == "amqtt" else 3  # amqtt: the QoS is the subscription's (above)
    assert sorted(g[:n] for g in r["got"]) == sorted([topic, m, q][:n] for _, m, q in expect(runtime, "async ")), r
    assert r["flushed"] is True, r


@runtimes
@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_broker_restart_loses_nothing_accepted_at_qos_1_and_2(runtime, scheme, pki):
    n = 40
    b = Aedes(tls=(pki["key"], pki["cert"]) if scheme == "wss" else None, log=True).start()
    try:
        topic = "restart/%s/%s" % (scheme, runtime)
        args = {"id": "rs-%s-%s" % (scheme, runtime), "url": "%s://localhost:%d/" % (scheme, b.port),
                "topic": topic, "n": n, "gap_ms": 20}
        if scheme == "wss":
            args["ssl_params"] = {"cafile": pki["cafile"]}
        p, path = run(runtime, "restart", args, wait=False)
        end = time.monotonic() + 30
        while len(b.published()) < 10 and time.monotonic() < end:
            time.sleep(0.01)
        assert len(b.published()) >= 10, b.published()
        b.kill()  # a crash: the broker's sessions and unanswered packets are gone
        time.sleep(0.3)
        b.start()
        r = result(p, path)
        got = {m for t, m, q in b.published() if t == topic}
    finally:
        b.stop()
    assert r["flushed"] is True and r["pending"] == 0 and r["links"] >= 2, r
    assert got == {"m%d" % i for i in range(n)}, sorted(set("m%d" % i for i in range(n)) - got)


# -- the hostile cases: a named error, or the right behaviour; nothing lost ---

REFUSED = {  # case: (reason, words in the message, the HTTP status)
    "status401": ("status", "401 Unauthorized", 401),
    "status200": ("status", "200 OK", 200),
    "redirect": ("status", "Location: ws://elsewhere.example/mqtt", 301),
    "badaccept": ("accept", "Sec-WebSocket-Accept", 101),
    "noproto": ("subprotocol", "mqtt subprotocol", 101),
    "wrongproto": ("subprotocol", "mqttv3.1", 101),
}
BROKEN = {  # case: (reason, words)
    "text": ("text", "a text frame"),
    "masked": ("masked", "masked frame from the server"),
    "reserved": ("reserved", "reserved bits 0x40"),
    "overlong": ("length", "1 GiB or more"),
    "fragping": ("fragmented", "fragmented control frame"),
    "orphan": ("continuation", "continuation frame"),
    "bigping": ("control", "control frame of 200 bytes"),
}
FINE = ["pingbytes", "onebyte", "long64", "multi", "closemid"]


@runtimes
def test_hostile_websocket_servers(runtime, hostile):
    cases = sorted(REFUSED) + sorted(BROKEN) + FINE + ["silent", "headers"]
    r = run(runtime, "hostile", {"port": hostile.port, "cases": cases,
                                 "headers": {"Authorization": "Bearer t0ken", "X-Board": "b1"}}, timeout=240)
    pub = hostile.record["published"]
    for case in cases:
        got = r[case]
        # Whatever the first link did, the three QoS 1 messages the outbox
        # accepted arrive on a later one.
        assert got["flushed"] is True and got["pending"] == 0, (case, got)
        assert {m for c, _, _, m, _ in pub if c == case} == {"%s-%d" % (case, i) for i in range(3)}, (case, pub)
        if case in REFUSED:
            reason, words, code = REFUSED[case]
            assert got["error"] == "WebSocketRefused" and got["reason"] == reason, (case, got)
            assert words in got["msg"], (case, got)
            assert got["code"] == code and got["status"].startswith("HTTP/1.1 %d " % code), (case, got)
        elif case in BROKEN:
            reason, words = BROKEN[case]
            assert got["error"] == "WebSocketError" and got["reason"] == reason, (case, got)
            assert words in got["msg"], (case, got)
        elif case == "silent":
            assert got["error"] == "MQTTTimeout" and "WebSocket handshake" in got["msg"], got
        else:
            assert got.get("connected") is True, (case, got)
    assert r["closemid"]["last_error"]["error"] == "LinkDown", r["closemid"]
    assert "code 1001: going away" in r["closemid"]["last_error"]["msg"], r["closemid"]
    # On the link that was lost mid-packet only the first two were sent.
    assert sorted(m for c, n, _, m, _ in pub if c == "closemid" and n == 1) == ["closemid-0", "closemid-1"], pub
    # A pong for every ping, with the ping's data, in order.
    pongs = hostile.record["pongs"]
    assert pongs[:4] == [b"p0", b"p1", b"p2", b"p3"], pongs[:10]
    # Every client frame masked, each with its own key.
    keys = hostile.record["keys"]
    assert hostile.record["unmasked"] == 0 and len(keys) > 50, hostile.record["unmasked"]
    assert len(set(keys)) > 0.9 * len(keys), len(set(keys))
    # The handshake asked for the mqtt subprotocol and carried the extra headers.
    req = [f for c, n, line, f in hostile.record["requests"] if c == "headers"][0]
    assert req["sec-websocket-protocol"] == "mqtt" and req["sec-websocket-version"] == "13", req
    assert req["authorization"] == "Bearer t0ken" and req["x-board"] == "b1", req
    assert req["host"] == "127.0.0.1:%d" % hostile.port, req
    # The client's close frame (1000) at disconnect.
    assert b"\x03\xe8" in hostile.record["closes"], hostile.record["closes"][:5]

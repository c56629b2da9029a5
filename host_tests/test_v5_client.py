"""MQTTClient(level=5) and AsyncClient(level=5): the clients speaking MQTT 5,
in a process of their own under CPython and the MicroPython unix port.

Against a peer this test plays byte by byte (what a broker says in CONNACK,
reason codes, aliases, a DISCONNECT with a reason: nothing mosquitto can be
made to send on cue), against mosquitto (its normal listener speaks MQTT 5)
and against mqttools' broker (a second MQTT 5 broker, QoS 0 only)."""

import json
import os
import socket
import subprocess
import sys

import pytest
from paho.mqtt.packettypes import PacketTypes as PT
from paho.mqtt.properties import Properties

from holdfast import codec as c
from holdfast import inbound
from holdfast.broker import feed
import consts as mq
from holdfast.mqtt5 import properties as pr, session as s5, subscriptions as sb5, wire as w5

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIMES = {"cpython": sys.executable,
            "micropython": os.path.join(os.path.dirname(sys.executable), "micropython")}
TIMEOUT = 60

PRELUDE = """\
import sys, json
sys.path.insert(0, %(fw)r)
from holdfast import MQTTClient
HOST = %(host)r
PORT = %(port)d
R = {}

def loaded():
    return sorted(m[9:] for m in sys.modules if m.startswith("holdfast."))

def done():
    print("RESULT " + json.dumps(R))
"""


def start(runtime, body, host="127.0.0.1", port=0):
    code = PRELUDE % {"fw": os.path.join(ROOT, "firmware"), "host": host, "port": port} + body
    return subprocess.Popen([RUNTIMES[runtime], "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def result(p):
    out, err = p.communicate(timeout=TIMEOUT)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert lines, (out, err)
    return json.loads(lines[-1][7:])


def run(runtime, body, **kw):
    return result(start(runtime, body, **kw))


class Peer:
    """The broker's side of a link, played by the test: one listening
    socket; packets read and written as raw bytes."""

    def __init__(self):
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(2)
        self.srv.settimeout(TIMEOUT)
        self.port = self.srv.getsockname()[1]
        self.sock = None

    def accept(self):
        if self.sock:
            self.sock.close()
        self.sock, _ = self.srv.accept()
        self.sock.settimeout(TIMEOUT)

    def read(self):
        """The next packet: (type, flags, body)."""
        first = self._exactly(1)[0]
        n = shift = 0
        while True:
            d = self._exactly(1)[0]
            n |= (d & 0x7F) << shift
            shift += 7
            if not d & 0x80:
                break
        return first >> 4, first & 15, self._exactly(n)

    def expect(self, type):
        t, f, body = self.read()
        assert t == type, (t, body)
        return f, body

    def send(self, first, body):
        assert len(body) < 128
        self.sock.sendall(bytes((first, len(body))) + body)

    def _exactly(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the client closed the link"
            data += chunk
        return data

    def close(self):
        if self.sock:
            self.sock.close()
        self.srv.close()


@pytest.fixture
def peer():
    p = Peer()
    yield p
    p.close()


def connect_body(body):
    """A CONNECT's level, flags, keepalive, properties (paho reads them),
    client id."""
    assert body[:6] == b"\x00\x04MQTT", body
    props = Properties(PT.CONNECT)
    _, n = props.unpack(body[10:])
    i = 10 + n
    cid = body[i + 2:i + 2 + (body[i] << 8 | body[i + 1])]
    return body[6], body[7], body[8] << 8 | body[9], props, cid


def props(*items, type=mq.CONNACK):
    """A property block: its length, then the items (mqtt5.properties' encoding,
    checked against paho's in test_v5_paho.py)."""
    buf = bytearray(256)
    return bytes(buf[:pr.props(buf, items, type)])


# -- (a) level 4 never loads MQTT 5 -------------------------------------------

LAZY = """
got = []
c = MQTTClient("v5-lazy-4", HOST, PORT, keepalive=30)
c.connect()
c.set_callback(lambda t, m: got.append(bytes(m)))
c.subscribe(b"v5lazy/in", 1)
c.publish(b"v5lazy/in", b"four", False, 1)
for i in range(20):
    if got:
        break
    c.wait_msg()
c.disconnect()
R["level4"] = loaded()
import asyncio
from holdfast import AsyncClient

async def main():
    a = AsyncClient("v5-lazy-4a", HOST, PORT)
    await a.connect()
    await a.publish(b"v5lazy/t", b"x", False, 1)
    await a.flush()
    await a.disconnect()
    R["async4"] = loaded()
    b = AsyncClient("v5-lazy-5a", HOST, PORT, level=5)
    seen = []
    b.set_callback(lambda t, m: seen.append(bytes(m)))
    await b.connect()
    await b.subscribe(b"v5lazy/in5", 2)
    await b.publish(b"v5lazy/in5", b"five", False, 2)
    for i in range(1000):  # a generous bound: the evidence ends the wait
        if seen:
            break
        await asyncio.sleep(0.02)
    await b.disconnect()
    R["async5"] = [m.decode() for m in seen]

asyncio.run(main())
c = MQTTClient("v5-lazy-5", HOST, PORT, keepalive=30, level=5)
c.connect()
c.set_callback(lambda t, m: got.append(bytes(m)))
c.subscribe(b"v5lazy/in", 1)
c.publish(b"v5lazy/in", b"five", False, 1)
for i in range(20):
    if len(got) > 1:
        break
    c.wait_msg()
c.disconnect()
R["got"] = [m.decode() for m in got]
R["level5"] = loaded()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_level4_clients_never_load_mqtt5(runtime, mosquitto):
    r = run(runtime, LAZY, port=mosquitto.port)
    for k in ("level4", "async4"):
        assert not [m for m in r[k] if m.startswith("mqtt5")], (k, r[k])
    assert r["got"] == ["four", "five"], r
    assert r["async5"] == ["five"], r
    # Level 5 loads mqtt5.session; its words only come with something to explain.
    assert "mqtt5.session" in r["level5"] and "mqtt5.reasons" not in r["level5"], r["level5"]


# -- (b), (c) CONNECT's properties, CONNACK's obeyed ---------------------------

LIMITS = """
from holdfast.memstore import MemoryStore
c = MQTTClient("", HOST, PORT, keepalive=30, level=5, size=600, outbox=MemoryStore(2048, 16, 12),
               reconnect=False)
R["present"] = c.connect()
R["window"] = c.session.window
R["keepalive"] = c.session.keepalive
R["client_id"] = c.session.client_id.decode()
try:
    c.publish(b"t", b"x" * 100, False, 1)
except ValueError as e:
    R["big"] = str(e)
c.publish(b"t", b"fits", False, 0)
c.publish(b"t", b"1", False, 1)
c.publish(b"t", b"2", False, 1)
R["inflight"] = c.session.inflight
R["open"] = c._ready(2, 0)  # shell._WINDOW
while c.session.inflight == 2:
    c.wait_msg()
R["after"] = c.session.inflight
c.disconnect()
try:
    c.connect(False)
except Exception as e:
    R["refused"] = [type(e).__name__, str(e), str(c.last_error)]
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_connect_offers_its_limits_and_obeys_the_brokers(runtime, peer):
    p = start(runtime, LIMITS, port=peer.port)
    peer.accept()
    level, flags, keepalive, cp, cid = connect_body(peer.expect(mq.CONNECT)[1])
    # Receive Maximum: the held-id table; Maximum Packet Size: the buffer.
    assert (level, flags, keepalive, cid) == (5, 2, 30, b"")
    assert (cp.ReceiveMaximum, cp.MaximumPacketSize, cp.TopicAliasMaximum) == (12, 600, 8)
    assert not hasattr(cp, "SessionExpiryInterval")  # clean: the session ends with the link
    peer.send(0x20, b"\x00\x00" + props((pr.ASSIGNED_CLIENT_ID, "given-1"), (pr.SERVER_KEEP_ALIVE, 7),
                                        (pr.RECEIVE_MAXIMUM, 2), (pr.MAXIMUM_PACKET_SIZE, 100)))
    f, body = peer.expect(mq.PUBLISH)
    assert (f, body) == (0, b"\x00\x01t\x00fits"), body
    assert peer.expect(mq.PUBLISH) == (2, b"\x00\x01t\x00\x01\x001")
    assert peer.expect(mq.PUBLISH) == (2, b"\x00\x01t\x00\x02\x002")
    peer.send(0x40, b"\x00\x01")
    peer.expect(mq.DISCONNECT)
    peer.accept()
    level, flags, keepalive, cp, cid = connect_body(peer.expect(mq.CONNECT)[1])
    assert (keepalive, cid) == (7, b"given-1")  # what the broker said, kept
    # Not clean: the session outlives the link, as in 3.1.1 (MQTT 5 would end it).
    assert (flags, cp.SessionExpiryInterval) == (0, 4294967295)
    peer.send(0x20, b"\x00\x87" + props((pr.REASON_STRING, "not on this broker")))
    r = result(p)
    assert r["present"] is False
    assert (r["window"], r["keepalive"], r["client_id"]) == (2, 7, "given-1"), r
    assert "larger than the broker takes (its Maximum Packet Size: 100)" in r["big"], r["big"]
    assert (r["inflight"], r["open"], r["after"]) == (2, False, 1), r
    words = "connection refused: not authorized (0x87): not on this broker"
    assert r["refused"] == ["ConnectError", words, words], r["refused"]


# -- (d) inbound PUBLISH: properties, topic aliases ----------------------------

INBOUND = """
got = []
c = MQTTClient("v5-in", HOST, PORT, level=5, reconnect=False)
c.set_callback(lambda t, m: got.append([bytes(t).decode(), bytes(m).decode(), c.qos]))
c.connect()
R["granted"] = c.subscribe(b"a/#", 2)
try:
    while True:
        c.wait_msg()
except Exception as e:
    R["error"] = [type(e).__name__, str(c.last_error), getattr(c.last_error, "code", None)]
R["got"] = got
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_inbound_properties_are_skipped_and_aliases_resolved(runtime, peer):
    p = start(runtime, INBOUND, port=peer.port)
    peer.accept()
    peer.expect(mq.CONNECT)
    peer.send(0x20, b"\x00\x00\x00")
    # SUBSCRIBE: packet id, no properties, the filter, options = QoS 2.
    assert peer.expect(mq.SUBSCRIBE) == (2, b"\x00\x01\x00\x00\x03a/#\x02")
    peer.send(0x90, b"\x00\x01\x00\x02")
    alias = ((pr.TOPIC_ALIAS, 1),)
    peer.send(0x32, b"\x00\x03a/b\x00\x07" + props(*alias + ((pr.CONTENT_TYPE, "text/plain"),
                                                           (pr.USER_PROPERTY, ("k", "v"))),
                                                 type=mq.PUBLISH) + b"one")
    assert peer.expect(mq.PUBACK) == (0, b"\x00\x07")
    peer.send(0x30, b"\x00\x00" + props(*alias, type=mq.PUBLISH) + b"two")  # the topic by its alias
    peer.send(0x34, b"\x00\x00\x00\x08" + props(*alias + ((pr.MESSAGE_EXPIRY, 5),), type=mq.PUBLISH)
              + b"three")
    assert peer.expect(mq.PUBREC) == (0, b"\x00\x08")
    peer.send(0x62, b"\x00\x08")
    assert peer.expect(mq.PUBCOMP) == (0, b"\x00\x08")
    peer.send(0x30, b"\x00\x01x" + props((pr.TOPIC_ALIAS, 9), type=mq.PUBLISH) + b"bad")
    r = result(p)
    assert r["granted"] == 2
    assert r["got"] == [["a/b", "one", 1], ["a/b", "two", 0], ["a/b", "three", 2]], r["got"]
    assert r["error"] == ["LinkDown", "topic alias invalid (0x94): PUBLISH with topic alias 9, "
                          "above the 8 this client offered", 0x94], r["error"]


# -- (e) Message Expiry Interval, counted down while stored --------------------

EXPIRY = """
import holdfast.mqtt5.wire as w5
c = MQTTClient("v5-exp", HOST, PORT, level=5, reconnect=False)
c.publish(b"t", b"stored", False, 1, expiry=60)  # offline: into the outbox
real = w5.wall
w5.wall = lambda: real() + 50  # it waits there 50 s
c.connect()
w5.wall = real
c.publish(b"t", b"direct", False, 1, expiry=30)
c.publish(b"t", b"never", False, 1)
R["flushed"] = c.flush()
c.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_message_expiry_goes_out_with_what_is_left(runtime, peer):
    p = start(runtime, EXPIRY, port=peer.port)
    peer.accept()
    peer.expect(mq.CONNECT)
    peer.send(0x20, b"\x00\x00\x00")
    got = []
    for pid in (1, 2, 3):
        f, body = peer.expect(mq.PUBLISH)
        r = c.Reader(len(body) + 8, 5)
        inbound.ready(r)  # it decodes PUBLISH and SUBACK
        feed(r, body)
        s5.parse(r, mq.PUBLISH, f, 0, len(body))
        got.append((bytes(r.payload), r.pid, w5.get(r.buf, pr.MESSAGE_EXPIRY, None, r.p0, r.p1)))
        peer.send(0x40, bytes((0, pid)))
    peer.expect(mq.DISCONNECT)
    assert result(p)["flushed"] is True
    (m1, p1, e1), (m2, p2, e2), (m3, p3, e3) = got
    assert (m1, m2, m3, p1, p2, p3) == (b"stored", b"direct", b"never", 1, 2, 3), got
    # Of 60 s, 50 passed in the outbox; a second may tick over meanwhile.
    assert 9 <= e1 <= 10 and 29 <= e2 <= 30 and e3 is None, got


# -- (f), (g) refusals in acks, a DISCONNECT with a reason --------------------

REJECT = """
seen = []
c = MQTTClient("v5-rej", HOST, PORT, level=5, reconnect=False)
c.on_rejected = lambda pid, code: seen.append([pid, code, str(c.last_error)])
c.set_delivered(lambda pid: seen.append([pid, "delivered"]))
c.connect()
c.publish(b"t", b"1", False, 1)
c.publish(b"t", b"2", False, 2)
c.publish(b"t", b"3", False, 1)
while len(seen) < 3:
    c.wait_msg()
R["seen"] = seen
R["rejected"] = c.rejected
R["pending"] = c.pending()
try:
    c.subscribe(b"secret/#", 1)
except Exception as e:
    R["sub"] = [type(e).__name__, str(e)]
try:
    while True:
        c.wait_msg()
except Exception as e:
    R["gone"] = [type(e).__name__, str(c.last_error)]
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_refusals_are_events_in_words_and_a_disconnect_says_why(runtime, peer):
    p = start(runtime, REJECT, port=peer.port)
    peer.accept()
    peer.expect(mq.CONNECT)
    peer.send(0x20, b"\x00\x00\x00")
    for pid in (1, 2, 3):
        assert peer.expect(mq.PUBLISH)[1][4] == pid
    peer.send(0x40, b"\x00\x01\x97" + props((pr.REASON_STRING, "over quota"), type=mq.PUBACK))
    peer.send(0x50, b"\x00\x02\x87")
    peer.send(0x40, b"\x00\x03")
    assert peer.expect(mq.SUBSCRIBE) == (2, b"\x00\x04\x00\x00\x08secret/#\x01")
    peer.send(0x90, b"\x00\x04\x00\x87")
    peer.send(0xE0, b"\x8b" + props((pr.REASON_STRING, "bye"), type=mq.DISCONNECT))
    rest = []
    try:
        while True:
            rest.append(peer.read()[0])
    except (AssertionError, OSError):
        pass  # the client closed the link
    r = result(p)
    assert mq.PUBREL not in rest, rest  # a refused PUBREC ends the flow
    assert r["seen"] == [[1, 0x97, "message 1 refused by the broker: quota exceeded (0x97): over quota"],
                         [2, 0x87, "message 2 refused by the broker: not authorized (0x87)"],
                         [3, "delivered"]], r["seen"]
    assert (r["rejected"], r["pending"]) == (2, 0), r
    assert r["sub"] == ["SubscribeError", "subscription to b'secret/#' refused by the broker: "
                        "not authorized (0x87)"], r["sub"]
    assert r["gone"] == ["LinkDown", "the broker closed the link: server shutting down (0x8b): bye"], r


# -- against the real brokers ---------------------------------------------------

ROUND_TRIP = """
got = []
c = MQTTClient("v5-round", HOST, PORT, level=5, keepalive=30)
c.set_callback(lambda t, m: got.append([bytes(t).decode(), bytes(m).decode()]))
R["present"] = c.connect()
R["granted"] = c.subscribe(b"v5rt/t", QOS)
c.publish(b"v5rt/t", b"there and back", False, QOS)
for i in range(50):
    if got:
        break
    c.wait_msg(5000)
c.disconnect()
R["got"] = got
R["error"] = str(c.last_error)
R["loaded"] = loaded()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
@pytest.mark.parametrize("name", ["mosquitto", "mqttools"])
def test_round_trip_through_both_brokers(runtime, name, request):
    b = request.getfixturevalue(name)
    qos = 1 if name == "mosquitto" else 0  # mqttools' CONNACK: Maximum QoS 0
    r = run(runtime, "QOS = %d\n" % qos + ROUND_TRIP, host=b.host, port=b.port)
    assert (r["present"], r["granted"]) == (False, qos), r
    assert r["got"] == [["v5rt/t", "there and back"]], r
    assert r["error"] == "None" and "mqtt5.reasons" not in r["loaded"], r


STORED = """
import holdfast.mqtt5.wire as w5
c = MQTTClient("v5-stored", HOST, PORT, level=5)
c.publish(b"v5exp/t", b"late", False, 1, expiry=60)
c.publish(b"v5exp/t", b"asked", False, 1, props=((8, "v5exp/answer"), (9, b"\\x00\\x07")))
real = w5.wall
w5.wall = lambda: real() + 50
c.connect()
R["flushed"] = c.flush()
c.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_mosquitto_passes_on_what_is_left_of_the_expiry(runtime, mosquitto):
    from test_v5_brokers import link, receive, send
    sub, _ = link(mosquitto, "v5-exp-sub")
    try:
        send(sub, sb5.subscribe, 1, (("v5exp/t", 1),))
        assert receive(sub).type == mq.SUBACK
        assert run(runtime, STORED, port=mosquitto.port)["flushed"] is True
        r = receive(sub)
        assert bytes(r.payload) == b"late"
        assert 9 <= w5.get(r.buf, pr.MESSAGE_EXPIRY, None, r.p0, r.p1) <= 10
        # Published offline with a Response Topic and Correlation Data:
        # stored with them, and mosquitto passes them on.
        r = receive(sub)
        assert bytes(r.payload) == b"asked"
        assert w5.get(r.buf, pr.RESPONSE_TOPIC, None, r.p0, r.p1) == b"v5exp/answer"
        assert w5.get(r.buf, pr.CORRELATION_DATA, None, r.p0, r.p1) == b"\x00\x07"
    finally:
        sub.close()



# -- the expiry of a stored message across a reboot ----------------------------

BOOT1 = """
from holdfast.durable import FileStore
c = MQTTClient("v5-boot", HOST, PORT, level=5, outbox=FileStore(DIR))
c.publish(b"t", b"kept", False, 1, expiry=60)  # offline, then the board reboots
c.publish(b"t", b"asked", False, 1, expiry=60, props=((1, 1), (8, "t/answer"), (9, b"\\x00#1")))
R["pending"] = c.pending()
done()
"""

BOOT2 = """
from holdfast.durable import FileStore
import holdfast.mqtt5.wire as w5
c = MQTTClient("v5-boot", HOST, PORT, level=5, outbox=FileStore(DIR), reconnect=False)
R["pending"] = c.pending()
real = w5.wall
w5.wall = lambda: real() + 50  # the reboot and the wait took 50 s
c.connect()
R["flushed"] = c.flush()
c.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_stored_messages_expiry_and_properties_last_across_a_reboot(runtime, peer, tmp_path):
    # The second message: Payload Format, Response Topic, Correlation Data.
    d = "DIR = %r\n" % str(tmp_path)
    assert run(runtime, d + BOOT1, port=peer.port)["pending"] == 2
    p = start(runtime, d + BOOT2, port=peer.port)
    peer.accept()
    peer.expect(mq.CONNECT)
    peer.send(0x20, b"\x00\x00\x00")
    got = []
    for pid in (1, 2):
        f, body = peer.expect(mq.PUBLISH)
        r = c.Reader(len(body) + 8, 5)
        inbound.ready(r)  # it decodes PUBLISH and SUBACK
        feed(r, body)
        s5.parse(r, mq.PUBLISH, f, 0, len(body))
        got.append((bytes(r.topic), bytes(r.payload), r.pid, 9 <= w5.get(r.buf, pr.MESSAGE_EXPIRY, None, r.p0, r.p1) <= 10,
                    w5.get(r.buf, pr.PAYLOAD_FORMAT, None, r.p0, r.p1),
                    w5.get(r.buf, pr.RESPONSE_TOPIC, None, r.p0, r.p1),
                    w5.get(r.buf, pr.CORRELATION_DATA, None, r.p0, r.p1)))
        peer.send(0x40, bytes((0, pid)))
    peer.expect(mq.DISCONNECT)
    assert result(p) == {"pending": 2, "flushed": True}
    assert got == [(b"t", b"kept", 1, True, None, None, None),
                   (b"t", b"asked", 2, True, 1, b"t/answer", b"\x00#1")], got


# -- outbound topic aliases, through mosquitto ---------------------------------

ALIASED = """
c = MQTTClient("v5-alias", HOST, PORT, level=5)
c.connect()
R["alias_max"] = c.session.alias_max
for i in range(3):
    c.publish(b"v5alias/t", b"q0-%d" % i, False, 0)
    c.publish(b"v5alias/t", b"q1-%d" % i, False, 1)
R["flushed"] = c.flush()
R["topics"] = [bytes(t).decode() for t in c.session.topics if t is not None]
c.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_mosquitto_resolves_the_aliases_a_client_sets(runtime, mosquitto):
    from test_v5_brokers import link, receive, send
    sub, _ = link(mosquitto, "v5-alias-sub")
    try:
        send(sub, sb5.subscribe, 1, (("v5alias/t", 0),))
        assert receive(sub).type == mq.SUBACK
        r = run(runtime, ALIASED, port=mosquitto.port)
        # mosquitto 2.0 takes 10 aliases; the client sets one, for its topic.
        assert (r["alias_max"], r["topics"], r["flushed"]) == (8, ["v5alias/t"], True), r
        got = []
        for _ in range(6):
            m = receive(sub)
            got.append((bytes(m.topic), bytes(m.payload)))
        assert got == [(b"v5alias/t", b"q%d-%d" % (q, i)) for i in range(3) for q in (0, 1)], got
    finally:
        sub.close()


MAX_QOS = """
c = MQTTClient("v5-maxqos", HOST, PORT, level=5)
c.connect()
try:
    c.publish(b"v5q/t", b"x", False, 1)
except ValueError as e:
    R["refused"] = str(e)
R["pending"] = c.pending()
c.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_publish_above_the_brokers_maximum_qos_is_a_named_error(runtime, mqttools):
    # mqttools' broker: Maximum QoS 0 in its CONNACK.
    r = run(runtime, MAX_QOS, host=mqttools.host, port=mqttools.port)
    assert r == {"refused": "a QoS 1 message, above the broker's Maximum QoS 0 (its CONNACK)",
                 "pending": 0}, r


# -- request/response: properties out with publish(props=...), in by mqtt5.properties.prop

REQUEST = """
from holdfast.mqtt5 import properties as pr
c = MQTTClient("v5-rr", HOST, PORT, level=5, keepalive=30)
got = []

def on(t, m):
    t = bytes(t)
    if t == b"v5rr/req":  # the responder: answers where the request says, with its correlation
        R["request"] = [[k.decode(), v.decode()] for k, v in pr.user(c)]
        c.publish(pr.prop(c, pr.RESPONSE_TOPIC), b"answer to " + bytes(m), False, 1,
                  props=((pr.CORRELATION_DATA, pr.prop(c, pr.CORRELATION_DATA)),
                         (pr.CONTENT_TYPE, "text/plain"), (pr.PAYLOAD_FORMAT, 1)))
    else:  # the requester
        got.append([t.decode(), bytes(m).decode(), list(pr.prop(c, pr.CORRELATION_DATA)),
                    pr.prop(c, pr.CONTENT_TYPE).decode(), pr.prop(c, pr.PAYLOAD_FORMAT),
                    pr.prop(c, pr.RESPONSE_TOPIC), [[k.decode(), v.decode()] for k, v in pr.user(c)]])

c.set_callback(on)
c.connect()
c.subscribe(b"v5rr/req", 1)
c.subscribe(b"v5rr/reply/1", 1)
c.publish(b"v5rr/req", b"q1", False, 1, props=((pr.RESPONSE_TOPIC, "v5rr/reply/1"),
                                              (pr.CORRELATION_DATA, b"\\x00\\x07"),
                                              (pr.USER_PROPERTY, ("from", "test"))))
for i in range(100):
    if got:
        break
    c.wait_msg(5000)
R["got"] = got
try:
    c.publish(b"v5rr/req", b"x", False, 1, props=((pr.TOPIC_ALIAS, 3),))
except ValueError as e:
    R["alias"] = str(e)
R["flushed"] = c.flush()  # the reply's PUBACK may still be on its way: pending() counts it
c.disconnect()
R["offline"] = [c.publish(b"v5rr/offline", b"waits", False, 1, props=((pr.RESPONSE_TOPIC, "v5rr/back"),
                                                                       (pr.CORRELATION_DATA, b"\\x01"))),
                c.pending()]
d = MQTTClient("v5-rr4", HOST, PORT)
try:
    d.publish(b"t", b"x", False, 0, props=((pr.CONTENT_TYPE, "a"),))
except ValueError as e:
    R["level4"] = str(e)
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_request_response_through_mosquitto(runtime, mosquitto):
    r = run(runtime, REQUEST, port=mosquitto.port)
    # The reply carries the request's correlation data back, with the
    # responder's content type; the request's response topic and user
    # property were the responder's to read, not the reply's.
    assert r["got"] == [["v5rr/reply/1", "answer to q1", [0, 7], "text/plain", 1, None, []]], r
    assert r["request"] == [["from", "test"]] and r["flushed"] is True, r
    assert "0x23 (topic alias) given twice" in r["alias"], r
    assert r["offline"][1] == 1, r  # stored, with its properties: offline is no refusal
    assert r["level4"] == "publish(props=...) is MQTT 5: make the client with level=5", r


# -- subscription options and identifiers, through mosquitto ---------------------

OPTIONS = """
from holdfast.mqtt5 import properties as pr
got = []
c = MQTTClient("v5-opts", HOST, PORT, level=5, keepalive=30)
c.set_callback(lambda t, m: got.append([bytes(t).decode(), bytes(m).decode(), c.retained,
                                        pr.prop(c, pr.SUBSCRIPTION_ID)]))
c.connect()
c.publish(b"v5o/r", b"kept", True, 1)
R["granted"] = [c.subscribe(b"v5o/own", 1, no_local=True, sub_id=7),
                c.subscribe(b"v5o/r", 1, retain_handling=2),
                c.subscribe(b"v5o/rap", 1, retain_as_published=True, sub_id=300)]
c.publish(b"v5o/own", b"mine", False, 1)  # No Local: not sent back to its publisher
c.publish(b"v5o/rap", b"flagged", True, 1)
c.publish(b"v5o/r", b"live", False, 1)
R["flushed"] = c.flush()
d = MQTTClient("v5-opts-other", HOST, PORT)
d.connect()
d.publish(b"v5o/own", b"other", False, 1)  # after "mine": the evidence that it never came
d.flush()
d.disconnect()
for i in range(100):
    if len(got) >= 3:
        break
    c.wait_msg(5000)
R["got"] = list(got)
for t in (b"v5o/r", b"v5o/rap"):
    c.publish(t, b"", True, 1)  # the retained messages go: the broker outlives this test
c.flush()
c.disconnect()
d = MQTTClient("v5-opts4", HOST, PORT)
d.connect()
try:
    d.subscribe(b"v5o/x", 0, no_local=True)
except ValueError as e:
    R["level4"] = str(e)
d.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_subscription_options_and_identifiers_through_mosquitto(runtime, mosquitto):
    r = run(runtime, OPTIONS, port=mosquitto.port)
    assert (r["granted"], r["flushed"]) == ([1, 1, 1], True), r
    # Retain Handling 2: no retained message at subscribe; Retain As
    # Published: the flag as the publisher set it; No Local: "mine" never
    # came back; each message with its filter's Subscription Identifier.
    assert r["got"] == [["v5o/rap", "flagged", True, 300], ["v5o/r", "live", False, None],
                        ["v5o/own", "other", False, 7]], r["got"]
    assert r["level4"].startswith("subscription options (no_local, retain_as_published, "
                                  "retain_handling, sub_id) are MQTT 5"), r


# -- a malformed packet: DISCONNECT with its reason code, then the link goes ------

MALFORMED = """
c = MQTTClient("v5-bad", HOST, PORT, level=5, reconnect=False)
c.connect()
try:
    while True:
        c.wait_msg()
except Exception as e:
    R["error"] = [type(e).__name__, str(c.last_error)]
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
@pytest.mark.parametrize("bad,code,words", [
    (b"\x40\x0c\x00\x01\x80\x08\x1f\x00\x01a\x1f\x00\x01b", 0x82,
     "protocol error (0x82): PUBACK: property 0x1f (reason string) appears more than once"),
    (b"\x40\x05\x00\x01\x00\x09\x1f", 0x81,
     "malformed packet (0x81): PUBACK: property length 9 runs past the packet"),
    (b"\xf0\x00", 0x81, "reserved packet type 15"),  # the 3.1.1 reader's error: malformed
])
def test_a_malformed_packet_is_answered_with_a_disconnect(runtime, peer, bad, code, words):
    p = start(runtime, MALFORMED, port=peer.port)
    peer.accept()
    peer.expect(mq.CONNECT)
    peer.send(0x20, b"\x00\x00\x00")
    peer.sock.sendall(bad)
    assert peer.expect(mq.DISCONNECT) == (0, bytes((code,)))
    r = result(p)
    assert r["error"] == ["LinkDown", words], r


ASYNC = """
import asyncio
from holdfast import AsyncClient
from holdfast.mqtt5 import properties as pr

async def main():
    a = AsyncClient("v5-async-rr", HOST, PORT, level=5)
    seen = []
    a.set_callback(lambda t, m: seen.append([bytes(m).decode(), pr.prop(a, pr.SUBSCRIPTION_ID),
                                             list(pr.prop(a, pr.CORRELATION_DATA))]))
    await a.connect()
    R["granted"] = await a.subscribe(b"v5async/t", 1, sub_id=42, no_local=False)
    await a.publish(b"v5async/t", b"hello", False, 1, props=((pr.CORRELATION_DATA, b"\\x05"),))
    for i in range(1000):  # a generous bound: the evidence ends the wait
        if seen:
            break
        await asyncio.sleep(0.02)
    await a.disconnect()
    R["seen"] = seen

asyncio.run(main())
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_asyncio_client_takes_props_and_subscription_options(runtime, mosquitto):
    r = run(runtime, ASYNC, port=mosquitto.port)
    assert r == {"granted": 1, "seen": [["hello", 42, [5]]]}, r


# -- the asyncio client's waits and checks, with no socket: the test writes -------

LINKED = """
import asyncio
from holdfast.aclient import AsyncClient
from holdfast.broker import feed


def linked(a, connack):
    # a's session connected, with no socket: nothing writes tx but the test.
    s = a.session
    s.start(0)
    s.sent(s.tx_end, 0)  # CONNECT
    feed(s.rx, connack)
    s.receive(0)
    return s

"""

SHELL = LINKED + """

async def room():
    # MQTT 5, QoS 0 with 26 bytes of properties, while the send buffer holds a
    # reading nobody has written: the room behind it fits the message's topic
    # and payload, not its properties. The socket, played here, takes a byte
    # each time the client has looked for room and waits again; the room
    # grows with each (the buffer is compacted).
    a = AsyncClient("v5-room", HOST, PORT, level=5, size=256, timeout_ms=600000)
    s = linked(a, b"\\x20\\x03\\x00\\x00\\x00")
    await a.publish(b"t/fill", b"f" * 200)
    filler = s.tx_end
    took = [0]
    done = []

    async def socket():
        while not done and s.tx_end > s.tx_start:
            if not a.progress.is_set():
                s.sent(1, 0)
                took[0] += 1
                a.progress.set()
            await asyncio.sleep(0)

    t = asyncio.create_task(socket())
    await a.publish(b"t/p", b"x", props=((38, ("k", "v" * 20)),))
    done.append(1)
    await t
    R["room"] = [a.dropped_qos0, repr(a.last_error), 0 < took[0] < filler,
                 b"v" * 20 in bytes(s.tx[s.tx_start:s.tx_end])]


async def level4():
    # publish(props=...) at level 4, offline and connected, QoS 0 and 1: the
    # named error, and nothing queued or counted.
    out = []
    for online in (False, True):
        for qos in (0, 1):
            a = AsyncClient("v5-l4", HOST, PORT)
            if online:
                linked(a, b"\\x20\\x02\\x00\\x00")
            try:
                await a.publish(b"t", b"x", False, qos, props=((3, "a"),))
                out.append("no error")
            except ValueError as e:
                out.append([str(e), a.pending(), a.dropped_qos0, a.session.tx_end, a.isconnected()])
    R["level4"] = out


asyncio.run(room())
asyncio.run(level4())
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_asyncio_client_waits_for_room_for_the_properties_and_checks_the_level(runtime):
    r = run(runtime, SHELL)
    # Queued, properties and all, once part of the reading was written; not dropped.
    assert r["room"] == [0, "None", True, True], r
    words = "publish(props=...) is MQTT 5: make the client with level=5"
    assert r["level4"] == [[words, 0, 0, 0, False]] * 2 + [[words, 0, 0, 0, True]] * 2, r


FIT = LINKED + """
async def fit():
    # MQTT 5, QoS 0 with 26 bytes of properties. Offline: one too large
    # with them (not without) refused, the largest that fits dropped. Online,
    # the send buffer emptied before each (the test plays the socket), each
    # one byte longer: queued, or refused at once; none waits for room tx
    # never has (timeout_ms=1: one that waited would be dropped, not hang).
    props = ((38, ("k", "v" * 20)),)
    a = AsyncClient("v5-fit", HOST, PORT, level=5, size=256, timeout_ms=1)
    out = []
    for k in (206, 205):
        try:
            await a.publish("t/p", b"x" * k, props=props)
            out.append(["dropped", a.dropped_qos0])
        except ValueError as e:
            out.append([str(e), a.dropped_qos0])
    s = linked(a, b"\\x20\\x03\\x00\\x00\\x00")
    sizes = []
    for k in range(199, 207):
        try:
            await a.publish("t/p", b"x" * k, props=props)
        except ValueError as e:
            out.append([str(e), k])
            break
        sizes.append(s.tx_end - s.tx_start)
        s.sent(s.tx_end - s.tx_start, 0)
    R["fit"] = [out, sizes, a.dropped_qos0, repr(a.last_error)]


asyncio.run(fit())
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_asyncio_client_sends_or_refuses_a_qos0_message_with_properties_at_the_limit(runtime):
    r = run(runtime, FIT)
    words = ("a 241-byte packet does not fit the 256-byte send buffer (size=): it takes packets "
             "of up to 240 bytes, 16 are kept for acknowledgements")
    assert r["fit"] == [[[words, 0], ["dropped", 1], [words, 206]], list(range(234, 241)), 1, "None"], r

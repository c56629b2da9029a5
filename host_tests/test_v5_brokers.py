"""MQTT 5 packets built by holdfast/mqtt5/, over raw sockets, against two
brokers neither of which we wrote: mosquitto (its normal listener speaks
MQTT 5 too) and mqttools' broker (tools/fleet/v5broker.py). Their answers
are decoded by mqtt5.session.parse. CPython only."""

import socket

import pytest

from holdfast import codec as c
from holdfast import inbound
from holdfast.broker import feed
import consts as mq
from holdfast.mqtt5 import packets as pk, properties as pr, reasons as rs5, session as s5, subscriptions as sb5, wire as w5

TIMEOUT = 10


@pytest.fixture(params=["mosquitto", "mqttools"])
def broker(request):
    return request.getfixturevalue(request.param)


def send(s, build, *args, **kw):
    buf = bytearray(1024)
    s.sendall(bytes(buf[:build(buf, *args, **kw)]))


def receive(s):
    """The next packet from socket s, decoded by s5.parse."""
    head = _exactly(s, 2)
    n = head[1] & 0x7F
    more = head[1] & 0x80
    shift = 7
    while more:
        d = _exactly(s, 1)[0]
        n |= (d & 0x7F) << shift
        more = d & 0x80
        shift += 7
    body = _exactly(s, n)
    r = c.Reader(n + 8, 5)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    feed(r, body)
    r.type = head[0] >> 4
    s5.parse(r, r.type, head[0] & 15, 0, n)
    return r


def _exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


def link(b, client_id, **kw):
    s = socket.create_connection((b.host, b.port), timeout=TIMEOUT)
    send(s, pk.connect, client_id, **kw)
    r = receive(s)
    assert r.type == mq.CONNACK, r.type
    return s, r


def test_v5_connect_gets_a_connack_both_brokers_accept(broker):
    s, r = link(broker, "hf-v5-connack", keepalive=30,
                props=((pr.SESSION_EXPIRY, 0), (pr.RECEIVE_MAXIMUM, 8),
                       (pr.TOPIC_ALIAS_MAXIMUM, 4), (pr.MAXIMUM_PACKET_SIZE, 4096)))
    try:
        assert (r.code, r.session_present) == (0, False), rs5.words(r.code)
        if broker.__class__.__name__ == "Mqttools":
            # Its CONNACK says what it cannot do (its broker.py).
            assert w5.get(r.buf, pr.MAXIMUM_QOS, None, r.p0, r.p1) == 0
            assert w5.get(r.buf, pr.WILDCARD_AVAILABLE, None, r.p0, r.p1) == 0
        send(s, pk.disconnect)
    finally:
        s.close()


def test_mosquitto_assigns_a_client_id_and_tells_its_limits(mosquitto):
    s, r = link(mosquitto, "", keepalive=30)
    try:
        assigned = w5.get(r.buf, pr.ASSIGNED_CLIENT_ID, None, r.p0, r.p1)
        assert r.code == 0 and assigned and assigned.startswith(b"auto-"), (r.code, assigned)
        # mosquitto.conf(5): max_topic_alias defaults to 10.
        assert w5.get(r.buf, pr.TOPIC_ALIAS_MAXIMUM, None, r.p0, r.p1) == 10
    finally:
        s.close()


def test_mqttools_refuses_a_password_with_a_reason_code(mqttools):
    s, r = link(mqttools, "hf-v5-pw", user="u", password="p")
    s.close()
    assert r.code == 0x86 and rs5.words(r.code) == "bad user name or password (0x86)", hex(r.code)


def test_publish_properties_travel_through_the_broker(broker):
    sub, _ = link(broker, "hf-v5-sub")
    pub, _ = link(broker, "hf-v5-pub")
    try:
        send(sub, sb5.subscribe, 1, (("v5/props", sb5.options(0)),))
        r = receive(sub)
        assert (r.type, r.pid, bytes(r.payload)) == (mq.SUBACK, 1, b"\x00")
        props = ((pr.PAYLOAD_FORMAT, 1), (pr.CONTENT_TYPE, "text/plain"), (pr.RESPONSE_TOPIC, "v5/reply"),
                 (pr.CORRELATION_DATA, b"\x00\x07"))
        user = ((pr.USER_PROPERTY, ("unit", "C")), (pr.USER_PROPERTY, ("unit", "K")))
        mosquitto = broker.__class__.__name__ == "Mosquitto"
        if mosquitto:
            # mqttools 0.50 reads a user property as one string, not the
            # pair MQTT 5.0 defines, and drops the link as malformed.
            props += user
        send(pub, pk.publish, "v5/props", b"21.5", expiry=60, props=props)
        r = receive(sub)
        assert (r.type, bytes(r.topic), bytes(r.payload)) == (mq.PUBLISH, b"v5/props", b"21.5")
        got = [w5.get(r.buf, p, None, r.p0, r.p1) for p in (pr.PAYLOAD_FORMAT, pr.CONTENT_TYPE,
                                                            pr.RESPONSE_TOPIC, pr.CORRELATION_DATA)]
        assert got == [1, b"text/plain", b"v5/reply", b"\x00\x07"], got
        expiry = w5.get(r.buf, pr.MESSAGE_EXPIRY, None, r.p0, r.p1)
        assert expiry is not None and 0 < expiry <= 60, expiry  # what is left of it
        if mosquitto:
            assert pr.pairs(r.buf, r.p0, r.p1) == [(b"unit", b"C"), (b"unit", b"K")]
        send(sub, sb5.unsubscribe, 2, ("v5/props",))
        r = receive(sub)
        assert (r.type, r.pid, bytes(r.payload)) == (mq.UNSUBACK, 2, b"\x00")
    finally:
        sub.close()
        pub.close()

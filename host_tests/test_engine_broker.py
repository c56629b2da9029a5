# The engine's edges against the real mosquitto (issue "Engine, round 2",
# defects 3, 8 and 13), the client in this process (CPython): a broker that
# lost our QoS 2 flow, a retained message racing its SUBACK, a broker that
# stops reading. Each waits for evidence (counters, deliveries), bounded by
# a number of rounds, never by the clock.
import os
import signal
import threading

import paho.mqtt.client as paho
import pytest

from fleet.mosquitto import Mosquitto
from holdfast import MQTTClient
from holdfast.sockets import read_into


@pytest.fixture
def broker(tmp_path):
    m = Mosquitto(workdir=str(tmp_path))
    m.start()
    try:
        yield m
    finally:
        if m.running:
            os.kill(m.pid, signal.SIGCONT)
        m.close()


class Listener:
    """A paho subscriber that records what arrives."""

    def __init__(self, broker, topic, qos):
        self.got = []
        self.ready = threading.Event()
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="listener-%d" % os.getpid())
        self.c.on_message = lambda c, u, m: self.got.append(m.payload.decode())
        self.c.on_subscribe = lambda *a: self.ready.set()
        self.c.connect(broker.host, broker.port)
        self.c.loop_start()
        self.c.subscribe(topic, qos)
        assert self.ready.wait(30), "no SUBACK for the listener"

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()


def until(client, cond, rounds=3000):
    for _ in range(rounds):
        if cond():
            return True
        client.wait_msg(20)
    return cond()


def test_a_qos2_message_past_pubrec_arrives_after_the_broker_lost_its_session(broker):
    # Defect 3: PUBREL to a broker that lost the session got PUBCOMP for a
    # message it never had; set_delivered fired and the message was lost.
    pub = MQTTClient("qos2-lost-pub", broker.host, broker.port, backoff_ms=(100, 200), timeout_ms=5000)
    pub.connect(clean_session=False)
    delivered = []
    pub.set_delivered(delivered.append)
    pub.publish(b"lost/q2", b"exactly-this", qos=2)
    s = pub.session
    key = s.store.next(-1)
    # Read the PUBREC, but never write the PUBREL it queues: the broker holds
    # the message half way when it crashes.
    for _ in range(1000):
        if s.store.qos(key) == 3:  # released
            break
        pub._io_wait(20)
        if read_into(pub.sock, s):
            s.receive(0)
    assert s.store.qos(key) == 3
    broker.kill()  # a crash: the session and the message are gone
    broker.start()
    listener = Listener(broker, "lost/q2", 2)
    try:
        assert until(pub, lambda: delivered and listener.got), (delivered, listener.got, pub.last_error)
        assert listener.got == ["exactly-this"] and pub.republished == 1
    finally:
        listener.close()
        pub.disconnect()


def test_a_filter_handler_gets_the_retained_message_that_races_its_suback(broker):
    # Defect 8: the handler was registered only once SUBACK was handled, and
    # a retained message read with it reached only the global callback.
    p = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="retainer-%d" % os.getpid())
    p.connect(broker.host, broker.port)
    p.loop_start()
    for i in range(10):
        p.publish("cfg/%d/rate" % i, "r%d" % i, qos=1, retain=True).wait_for_publish(30)
    p.loop_stop()
    p.disconnect()
    c = MQTTClient("handler-race", broker.host, broker.port, timeout_ms=5000)
    c.connect()
    got = []
    try:
        for i in range(10):
            c.subscribe("cfg/%d/#" % i, 1, lambda t, m, r: got.append((m.decode(), r)))
        assert until(c, lambda: len(got) >= 10), got
        assert sorted(got) == sorted(("r%d" % i, True) for i in range(10)), got
    finally:
        c.disconnect()


def test_a_broker_that_stops_reading_is_found_dead_and_the_link_made_again(broker):
    # Defect 13: with the send buffer full, PINGREQ was never queued and the
    # client stayed "connected" for ten minutes.
    c = MQTTClient("stall", broker.host, broker.port, keepalive=2, timeout_ms=200,
                   backoff_ms=(100, 200))
    c.connect()
    os.kill(broker.pid, signal.SIGSTOP)  # reads nothing, answers nothing
    try:
        for _ in range(200000):
            if not c.isconnected():
                break
            c.publish(b"stall/t", b"x" * 900)  # fills the socket's buffers, then ours
        assert not c.isconnected(), "still connected to a broker that reads nothing"
        why = repr(c.last_error)
        assert "took no bytes" in why or "nothing from the broker" in why, why
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    assert until(c, lambda: c.isconnected() and c.links == 2), (c.links, c.last_error)
    c.disconnect()

# The client against a real mosquitto, under CPython and under the MicroPython
# unix port: each scenario runs in its own process (host_tests/scenarios.py).
import json
import os
import subprocess
import sys
import threading
import time

import paho.mqtt.client as paho
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(HERE, "scenarios.py")
BIN = os.path.dirname(sys.executable)
RUNTIMES = {"cpython": sys.executable, "micropython": os.path.join(BIN, "micropython")}


def start(runtime, name, broker, *args):
    return subprocess.Popen([RUNTIMES[runtime], SCEN, name, broker.host, str(broker.port)] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc, timeout=120):
    out, _ = proc.communicate(timeout=timeout)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise AssertionError("scenario printed no result (exit %s):\n%s" % (proc.returncode, out))


def run(runtime, name, broker, *args):
    return finish(start(runtime, name, broker, *args))


runtimes = pytest.mark.parametrize("runtime", sorted(RUNTIMES))


@runtimes
def test_every_qos_pairing_delivers_at_the_lower_qos(runtime, mosquitto):
    got = run(runtime, "qos_matrix", mosquitto)
    want = sorted([["m/%s-qos_matrix/s%d" % (runtime, sq), "p%d" % pq, min(sq, pq)]
                   for sq in (0, 1, 2) for pq in (0, 1, 2)])
    assert sorted(got) == want


@runtimes
def test_restore_of_more_filters_than_one_packet_holds(runtime, mosquitto):
    r = run(runtime, "restore_many", mosquitto)
    assert r["links"] == 2 and r["got"] and r["n"] == 30, r


@runtimes
def test_new_qos2_message_after_a_lost_flow_and_a_clean_session_is_delivered(runtime, mosquitto):
    r = run(runtime, "qos2_new_session", mosquitto)
    assert r["got"] == ["one", "two"] and r["links"] == 2, r


@runtimes
def test_retained_message_is_flagged_live_one_is_not(runtime, mosquitto):
    assert run(runtime, "retained", mosquitto) == [["last-known", True], ["live", False]]


@runtimes
def test_mqtt_31_and_empty_client_id(runtime, mosquitto):
    assert run(runtime, "protocol_variants", mosquitto) == ["from-3.1", "from-anonymous"]


def test_host_name_is_resolved_again_on_every_reconnect(mosquitto, monkeypatch):
    from holdfast import MQTTClient, sockets

    calls = []
    real = sockets.socket.getaddrinfo

    def counting(host, *a):
        calls.append(host)
        return real(host, *a)

    monkeypatch.setattr(sockets.socket, "getaddrinfo", counting)
    c = MQTTClient("resolve-" + str(os.getpid()), "localhost", mosquitto.port, keepalive=5,
                   backoff_ms=(100, 200), timeout_ms=2000)
    c.connect()
    mosquitto.restart()
    deadline = time.time() + 10
    while c.links < 2 and time.time() < deadline:
        c.wait_msg(50)
    c.disconnect()
    assert c.links >= 2 and calls.count("localhost") == c.links


@runtimes
def test_will_on_abrupt_close_not_on_clean_disconnect(runtime, mosquitto):
    assert run(runtime, "will", mosquitto) == ["gone-abrupt"]


@runtimes
def test_persistent_session_receives_messages_queued_while_offline(runtime, mosquitto):
    r = run(runtime, "offline_queue", mosquitto)
    assert r["present"] is True
    assert sorted(r["got"]) == ["0", "1", "2", "3", "4"]


@runtimes
def test_outbox_drops_expired_replaced_and_oldest_while_offline(runtime, mosquitto, tmp_path):
    r = run(runtime, "outbox_policies", mosquitto, str(tmp_path / "outbox"))
    assert r["got"] == ["o2", "o3", "o4", "s2", "fresh", "o5", "o6", "end"], r["got"]
    assert (r["overflowed"], r["expired"], r["replaced"]) == (2, 1, 1), r
    assert r["pending_offline"] == 7 and r["flushed"] is True, r


@runtimes
def test_asyncio_client_pubsub_at_every_qos(runtime, mosquitto):
    r = run(runtime, "async_pubsub", mosquitto)
    assert r["flushed"] and sorted(r["got"]) == [["q0", 0], ["q1", 1], ["q2", 2]]


def publish_marker(broker, topic, payload, qos=2):
    """Publishes one message from a client of its own and waits until the
    broker has taken it."""
    m = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="marker-%d" % os.getpid())
    m.connect(broker.host, broker.port)
    m.loop_start()
    try:
        m.publish(topic, payload, qos).wait_for_publish(10)
    finally:
        m.loop_stop()
        m.disconnect()


def wait_until(cond, timeout, what):
    """Polls cond() until true; fails naming what did not happen."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.02)


@runtimes
@pytest.mark.parametrize("api", ["blocking", "asyncio"])
def test_broker_restart_while_publishing_loses_nothing(runtime, api, mosquitto):
    n = 200
    topic = "x/%s-publish_through_restart" % runtime
    seen = []
    lock = threading.Lock()
    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="restart-watch-%s-%s" % (runtime, api),
                      clean_session=False)

    def on_message(c, u, m):
        with lock:
            seen.append((int(m.payload), m.qos))

    subscribed = threading.Event()
    sub.on_message = on_message
    sub.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, 2)
    sub.on_subscribe = lambda c, u, mid, rc, p: subscribed.set()
    sub.reconnect_delay_set(0.1, 0.5)
    sub.connect(mosquitto.host, mosquitto.port)
    sub.loop_start()
    try:
        assert subscribed.wait(10), "the watcher did not subscribe"
        name = "publish_through_restart" if api == "blocking" else "async_publish_through_restart"
        proc = start(runtime, name, mosquitto, str(n))
        # The publisher holds its second half until its link has gone down:
        # this restart lands while it publishes.
        wait_until(lambda: len(seen) >= n // 4, 30, "%d messages before the restart" % (n // 4))
        mosquitto.restart()
        r = finish(proc)
        # A later message from another client, taken by the broker after the
        # publisher flushed: once it is here, every message of the publisher
        # the broker took is too, and any duplicate of one.
        publish_marker(mosquitto, topic, "-1")
        wait_until(lambda: (-1, 2) in seen, 20, "the marker")
    finally:
        sub.loop_stop()
        sub.disconnect()
    assert r["flushed"] and r["pending"] == 0
    assert r["links"] >= 2, "the restart did not break the publisher's connection"
    with lock:
        numbers = [s for s, _ in seen if s >= 0]
    missing = sorted(set(range(n)) - set(numbers))
    assert not missing, "lost: %s" % missing
    dup2 = [s for s in set(numbers) if s % 2 == 1 and numbers.count(s) > 1]
    assert not dup2, "QoS 2 messages delivered twice: %s" % dup2

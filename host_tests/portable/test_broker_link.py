# Against a real MQTT broker over the runtime's own sockets: on a board, its
# own network stack (`make board-test` starts mosquitto on the host and
# gives the board its address). Skipped, with the reason, when no broker is
# given (the WebAssembly port has no sockets).
import binascii
import os

import hostbroker

from holdfast import MQTTClient

NEEDS_BROKER = True  # conftest.py gives pytest's mosquitto to this module
ROUNDS = 40  # wait_msg(250) calls at most before a missing message fails the test


def _tag():
    # Topics of their own: the broker may be shared with other runs.
    return binascii.hexlify(os.urandom(4))


def _client(broker, name):
    return MQTTClient(name, broker[0], port=broker[1], keepalive=30)


def _until(c, got, n):
    for _ in range(ROUNDS):
        if len(got) >= n:
            return
        c.wait_msg(250)


def test_each_qos_comes_back_from_the_broker():
    broker = hostbroker.address()  # first: skips where there is none
    tag = _tag()
    topic = b"hf-board-test/" + tag
    got = []
    c = _client(broker, b"hf-bt-" + tag)
    c.set_callback(lambda t, m: got.append((bytes(t), bytes(m), c.qos)))
    c.connect()
    try:
        assert c.subscribe(topic + b"/#", qos=2) == 2
        for q in (0, 1, 2):
            c.publish(topic + b"/q" + str(q).encode(), b"reading " + str(q).encode(), qos=q)
        c.flush(10000)
        _until(c, got, 3)
    finally:
        c.disconnect()
    got.sort()
    assert got == [(topic + b"/q0", b"reading 0", 0), (topic + b"/q1", b"reading 1", 1),
                   (topic + b"/q2", b"reading 2", 2)], got


def test_a_kept_session_gets_what_came_while_offline():
    broker = hostbroker.address()
    tag = _tag()
    topic = b"hf-board-test/" + tag + b"/cmd"
    name = b"hf-bt-" + tag
    got = []
    c = _client(broker, name)
    c.set_callback(lambda t, m: got.append(bytes(m)))
    c.connect(clean_session=False)
    c.subscribe(topic, qos=1)
    c.disconnect()
    other = _client(broker, name + b"-pub")
    other.connect()
    for i in range(3):
        other.publish(topic, b"while offline " + str(i).encode(), qos=1)
    other.flush(10000)
    other.disconnect()
    try:
        assert c.connect(clean_session=False), "the broker did not keep the session"
        _until(c, got, 3)
    finally:
        c.disconnect()
        # Leave no session behind on the broker.
        c.connect(clean_session=True)
        c.disconnect()
    assert got == [b"while offline 0", b"while offline 1", b"while offline 2"], got

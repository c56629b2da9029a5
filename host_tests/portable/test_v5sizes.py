# MQTT 5's sizes (docs/engine.md "Limits"): the broker's Maximum Packet
# Size for messages stored before it was known and of 9 bytes or less, the
# receive buffer for CONNACK and acks with long properties, the expiry at
# every QoS. The session without a socket. Apart from test_sizes.py for the
# heap guard of test_micropython.py. Runs on CPython and MicroPython.
import consts as mq
from holdfast import codec
from holdfast.mqtt5 import packets as pk, properties as pr, session as s5, wire as w5
from holdfast.session import wall
from holdfast.mqtt5.session import Reader5
from fakebroker import reads
from support import raises


def _connack5(props):
    # A CONNACK at level 5 with these properties ((identifier, value) pairs).
    buf = bytearray(400)
    n = pr.props(buf, props, mq.CONNACK)
    return wire5(b"\x00\x00" + bytes(buf[:n]), 0x20)


def wire5(body, first):
    out = bytearray(4)
    return bytes((first,)) + bytes(out[1:codec.put_length(out, 1, len(body))]) + body


def _session5(size=256, clean=True):
    s = s5.Session5(b"dev", clean, 0, 5, size, 4)
    s.start(0)
    s.sent(s.tx_end, 0)
    return s


def test_v5_stored_messages_over_the_brokers_maximum_packet_size_are_dropped_unsent():
    # Stored offline, before the broker said its limit: at send time the
    # 200-byte one is refused (counted), the outbox moves on, the rest go.
    s = _session5(size=512)
    s.lost()
    for payload in (b"a", b"z" * 200, b"b"):
        s.publish(b"t", payload, 1, False, 0)
    s.start(0)
    s.sent(s.tx_end, 0)
    assert reads(s, _connack5(((pr.MAXIMUM_PACKET_SIZE, 100),))) == [] and s.state == 3
    out = [bytes(r.payload) for r in _read5(bytes(s.tx[s.tx_start:s.tx_end]))]
    assert out == [b"a", b"b"] and s.unsendable == 1 and len(s.store) == 2, (out, s.unsendable)
    # publish() itself refuses one over the limit, with the words.
    e = raises(ValueError, s.publish, b"t", b"z" * 200, 1, False, 0)
    assert "Maximum Packet Size" in str(e) or "maximum" in str(e), str(e)


def test_v5_a_maximum_packet_size_of_9_or_less_refuses_every_message():
    for most in (1, 9):
        s = _session5()
        assert reads(s, _connack5(((pr.MAXIMUM_PACKET_SIZE, most),))) == [] and s.state == 3
        for qos in (0, 1):
            raises(ValueError, s.publish, b"t", b"", qos, False, 0)
        assert len(s.store) == 0 and s.tx_end == s.tx_start, most


def test_v5_connack_and_puback_with_long_properties_fit_the_receive_buffer():
    # clean_session and no subscription: the receive buffer still holds what
    # the broker may send at level 5, up to the size CONNECT offered.
    s = _session5()
    long_id = b"assigned-" + b"i" * 80
    got = reads(s, _connack5(((pr.ASSIGNED_CLIENT_ID, long_id), (pr.USER_PROPERTY, (b"k", b"v" * 60)))))
    assert got == [] and s.state == 3 and s.client_id == long_id, (s.state, s.client_id)
    pid = s.publish(b"t", b"m", 1, False, 0)
    s.sent(s.tx_end - s.tx_start, 0)
    why = b"quota: " + b"q" * 90
    buf = bytearray(200)
    n = pk.ack(buf, mq.PUBACK, pid, 0x97, ((pr.REASON_STRING, why),))
    # A refusal keeps its words: REJECTED, the code, the reason string.
    assert reads(s, bytes(buf[:n])) == [4] and s.rx.code == 0x97 and s.done_pid == pid
    assert w5.get(s.rx.buf, pr.REASON_STRING, None, s.rx.p0, s.rx.p1) == why
    assert s.state == 3 and len(s.store) == 0


def _read5(data):
    # The MQTT 5 PUBLISH packets in data, one Reader5 each (its fields).
    out = []
    while data:
        r = Reader5(len(data), 5)
        r.tail()[:len(data)] = data
        r.end = len(data)
        assert r.next() == mq.PUBLISH, data
        out.append(r)
        data = data[r.start:]
    return out


def _expiry(data):
    # The Message Expiry Interval of the one MQTT 5 PUBLISH in data (None: none).
    r, = _read5(data)
    return w5.get(r.buf, pr.MESSAGE_EXPIRY, None, r.p0, r.p1)


def test_v5_expiry_goes_with_the_message_at_every_qos():
    # At level 5 expiry= is the message's expiry whatever its QoS (QoS 0
    # went without it).
    s = _session5()
    reads(s, _connack5(()))
    for qos in (0, 1, 2):
        s.publish(b"t", b"m", qos, False, 0, wall() + 60)
        got = _expiry(bytes(s.tx[s.tx_start:s.tx_end]))
        s.sent(s.tx_end - s.tx_start, 0)
        assert got is not None and 58 <= got <= 60, (qos, got)
    s.publish(b"t", b"m", 0, False, 0)
    assert _expiry(bytes(s.tx[s.tx_start:s.tx_end])) is None

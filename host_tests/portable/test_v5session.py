# The session at MQTT 5 (holdfast/mqtt5/session.py's Session5), without a socket: the
# broker's CONNACK written into its receive buffer as a socket read would,
# what it sends read out of its send buffer. Its CONNECT, topic aliases,
# publish(props=...), what CONNACK allows, subscription identifiers, and
# no allocation per publish. Runs on CPython and MicroPython (the clients
# against real brokers: host_tests/test_v5_client.py).
import sys
import time

from holdfast.mqtt5 import packets as pk, properties as pr, session as s5, subscriptions as sb5
from holdfast.broker import feed
from holdfast.subscriptions import request
from support import raises


def connected(connack, size=256):
    """A Session5 without a socket, past CONNECT and the broker's CONNACK
    (written into the receive buffer as a socket read would)."""
    s = s5.Session5(b"alloc", True, 0, 5, size, 4)
    s.start(0)
    s.sent(s.tx_end, 0)
    r = s.rx
    for k, x in enumerate(connack):
        r.tail()[k] = x
    r.end += len(connack)
    assert s.receive(0) == 0 and s.state == 3, s.state  # session.CONNECTED
    return s


def test_level5_session_publish_and_puback_allocate_nothing():
    # The engine of MQTTClient(level=5) without a socket: publish QoS 1, the
    # broker's PUBACK, DELIVERED; and QoS 0; with no topic alias, and with
    # one (the broker's CONNACK: Topic Alias Maximum 4). On MicroPython
    # under heap_lock, so any allocation fails the test; elsewhere the same
    # steps, unlocked.
    for connack in (b"\x20\x03\x00\x00\x00", b"\x20\x06\x00\x00\x03\x22\x00\x04"):
        s = connected(connack)
        r = s.rx
        events = []

        def one():
            pid = s.publish(b"sensors/t", b"21.5", 1, False, 0)
            s.sent(s.tx_end - s.tx_start, 0)
            room = r.tail()  # all read: the whole buffer, not a new view
            room[0] = 0x40
            room[1] = 2
            room[2] = pid >> 8
            room[3] = pid & 0xFF
            r.end += 4
            events.append(s.receive(0))
            s.publish(b"sensors/t", b"21.5", 0, False, 0)
            s.sent(s.tx_end - s.tx_start, 0)

        one()  # warm
        for _ in range(8):  # the list grows now, not under the lock
            events.append(0)
        del events[:]
        if sys.implementation.name == "micropython":
            import micropython
            micropython.heap_lock()
        try:
            for _ in range(5):
                one()
        finally:
            if sys.implementation.name == "micropython":
                micropython.heap_unlock()
        assert events == [2] * 5, events  # session.DELIVERED each time


def sent(s, *args):
    """The bytes s.publish(*args) puts on the wire."""
    t0 = s.tx_end
    s.publish(*args)
    out = bytes(s.tx[t0:s.tx_end])
    s.sent(s.tx_end - s.tx_start, 0)
    return out


def test_a_topic_goes_out_once_a_link_then_by_its_alias():
    topic = b"sensors/livingroom/temperature"
    s = connected(b"\x20\x06\x00\x00\x03\x22\x00\x02")  # Topic Alias Maximum 2
    # The first PUBLISH of a topic sets alias 1; the next send it alone.
    assert sent(s, topic, b"21.5", 0, False, 0) == b"\x30\x28\x00\x1e" + topic + b"\x03\x23\x00\x01" + b"21.5"
    by_alias = b"\x30\x0a\x00\x00\x03\x23\x00\x01" + b"21.5"
    assert sent(s, topic, b"21.5", 0, False, 0) == by_alias
    assert sent(s, topic, b"21.6", 1, True, 0) == b"\x33\x0c\x00\x00\x00\x01\x03\x23\x00\x01" + b"21.6"
    # Each topic its own, as many as the broker takes; then none.
    assert sent(s, "b", b"x", 0, False, 0) == b"\x30\x08\x00\x01b\x03\x23\x00\x02x"
    assert sent(s, b"c", b"x", 0, False, 0) == b"\x30\x05\x00\x01c\x00x"
    assert sent(s, b"b", b"y", 0, False, 0) == b"\x30\x07\x00\x00\x03\x23\x00\x02y"
    # With an expiry, both properties.
    got = sent(s, topic, b"1", 1, False, 0, int(time.time()) + 60)
    assert got[:6] == b"\x32\x0e\x00\x00\x00\x02" and got[6:8] == b"\x08\x02", got
    assert got[12:] == b"\x23\x00\x011", got
    # A new link: the broker knows no alias of ours; this one takes none.
    s.lost()
    s.start(0)
    s.sent(s.tx_end, 0)
    for k, x in enumerate(b"\x20\x03\x00\x00\x00"):
        s.rx.tail()[k] = x
    s.rx.end += 5
    assert s.receive(0) == 0
    assert sent(s, topic, b"21.5", 0, False, 0) == b"\x30\x25\x00\x1e" + topic + b"\x00" + b"21.5"
    # Another link that takes aliases: the topic is set again before it goes by alias.
    s.lost()
    s.start(0)
    s.sent(s.tx_end, 0)
    feed(s.rx, b"\x20\x06\x00\x00\x03\x22\x00\x02")
    assert s.receive(0) == 0
    assert sent(s, topic, b"21.5", 0, False, 0) == b"\x30\x28\x00\x1e" + topic + b"\x03\x23\x00\x01" + b"21.5"
    assert sent(s, topic, b"21.5", 0, False, 0) == by_alias
    # Bytes on the wire per QoS 0 reading of 4 bytes to a 30-byte topic:
    # 39 without an alias (38 at level 4), 12 by its alias (42 the first
    # time on a link).


def test_the_sessions_connect_is_the_codecs():
    # Session5 writes its CONNECT from codec.py's 3.1.1 one, its properties
    # moved in (s5.start); the bytes are those of packets.connect, the
    # general encoder, with every field the session can set.
    from holdfast.memstore import MemoryStore
    cases = ((b"c1", True, None, None, None), (b"", False, None, None, None),
             (b"dev", False, (b"w/t", b"bye", 1, True), b"u", b"pw"),
             (b"dev", True, (b"w/" + b"x" * 120, b"m" * 200, 0, False), b"u", None))
    for cid, clean, will, user, pw in cases:
        s = s5.Session5(cid, clean, 30, 5, 600, 4, MemoryStore(2048, 16, 12))
        s.will = will
        s.user = user
        s.password = pw
        s.start(0)
        props = ((pr.RECEIVE_MAXIMUM, 12), (pr.TOPIC_ALIAS_MAXIMUM, 8), (pr.MAXIMUM_PACKET_SIZE, 600))
        if not clean:
            props = ((pr.SESSION_EXPIRY, 4294967295),) + props
        buf = bytearray(600)
        w = will or (None, b"", 0, False)
        n = pk.connect(buf, cid, clean, 30, w[0], w[1], w[2], w[3], user, pw, props)
        assert bytes(s.tx[:s.tx_end]) == bytes(buf[:n]), (cid, bytes(s.tx[:s.tx_end]), bytes(buf[:n]))


def test_connacks_maximum_qos_and_retain_available_are_obeyed():
    # CONNACK: Maximum QoS 1, Retain Available 0.
    s = connected(b"\x20\x07\x00\x00\x04\x24\x01\x25\x00")
    e = raises(ValueError, s.publish, b"t", b"x", 2, False, 0)
    assert str(e) == "a QoS 2 message, above the broker's Maximum QoS 1 (its CONNACK)", str(e)
    e = raises(ValueError, s.publish, b"t", b"x", 0, True, 0)
    assert "a retained message, and the broker takes none (Retain Available 0" in str(e), str(e)
    assert len(s.store) == 0 and s.tx_end == 0  # nothing stored or sent
    assert s.publish(b"t", b"x", 1, False, 0) == 1
    # A CONNACK that says neither: QoS 2 and retained messages go.
    s = connected(b"\x20\x03\x00\x00\x00")
    assert s.publish(b"t", b"x", 2, True, 0) == 1


def test_publish_props_go_out_from_the_outbox_at_once_or_later():
    s = connected(b"\x20\x06\x00\x00\x03\x22\x00\x02")
    s.props = ((pr.CORRELATION_DATA, b"\x01\x02"), (pr.USER_PROPERTY, (b"k", b"v")))
    want = (b"\x32\x13\x00\x01t\x00\x01\x0c\x09\x00\x02\x01\x02"
            b"\x26\x00\x01k\x00\x01vx")
    got = sent(s, b"t", b"x", 1, False, 0)
    assert got == want, got  # from the outbox: the topic in full, no alias
    # Offline it waits in the outbox with its properties, and goes out
    # with them once the link is back (DUP: the first had gone out once).
    s.lost()
    assert s.publish(b"t", b"y", 1, False, 0) == 2 and len(s.store) == 2
    s.props = None
    assert s.publish(b"t", b"z", 1, False, 0) == 3 and len(s.store) == 3
    s.start(0)
    s.sent(s.tx_end, 0)
    feed(s.rx, b"\x20\x03\x00\x00\x00")
    t0 = s.tx_end
    assert s.receive(0) == 0
    assert bytes(s.tx[t0:s.tx_end]) == (b"\x3a" + want[1:2] + b"\x00\x01t\x00\x01" + want[7:-1] + b"x"
                                    + want[:2] + b"\x00\x01t\x00\x02" + want[7:-1] + b"y"
                                    + b"\x32\x07\x00\x01t\x00\x03\x00z"), bytes(s.tx[t0:s.tx_end])


def test_one_subscription_identifier_a_subscribe():
    # Filters queued together go out in one SUBSCRIBE while they share a
    # Subscription Identifier (none counts as one), in another when not.
    s = s5.Session5(b"subs", True, 0, 5, 256, 4)
    for flt, o in ((b"a", sb5.sub_options(1, no_local=True, sub_id=5)), (b"b", sb5.sub_options(0, sub_id=5)),
                   (b"c", sb5.sub_options(2, retain_handling=1)), (b"d", 1)):
        request(s, flt, o)  # before the link: queued
    s.start(0)
    s.sent(s.tx_end, 0)
    feed(s.rx, b"\x20\x03\x00\x00\x00")
    t0 = s.tx_end
    assert s.receive(0) == 0
    assert bytes(s.tx[t0:s.tx_end]) == (b"\x82\x0d\x00\x01\x02\x0b\x05\x00\x01a\x05\x00\x01b\x00"
                                    b"\x82\x0b\x00\x02\x00\x00\x01c\x12\x00\x01d\x01"), bytes(s.tx[t0:s.tx_end])
    e = raises(ValueError, sb5.sub_options, 0, sub_id=1 << 28)
    assert "subscription identifier): 268435456 is outside 1..268435455" in str(e), str(e)
    raises(ValueError, sb5.sub_options, 0, retain_handling=3)


def test_a_level5_connect_that_is_wrong_not_large_says_why():
    # As at level 4 (test_engine_ledger.py): a CONNECT refused for what it
    # says raises its own words, not the fit's, though it is also too large
    # for the first send buffer.
    s = s5.Session5(b"d", True, 70000, 5)
    s.user = b"u" * 300
    e = raises(ValueError, s.start, 0)
    assert "keepalive 70000" in str(e), str(e)

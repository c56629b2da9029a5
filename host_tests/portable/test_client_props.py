# The blocking client's shell with MQTT 5's props= (level 5) and without
# (level 4), with a scripted socket and a fake clock (Rig, from
# test_client_mock). Apart from test_client_edges.py so that each module
# stays within the heap guard of test_micropython.py.
import consts as mq
from support import raises
from rig import Rig, CONNACK


def _publishes(data):
    # The PUBLISH packets in what the client wrote: (topic, whole packet).
    out = []
    i = 0
    while i < len(data):
        t = data[i] >> 4
        n = shift = 0
        j = i + 1
        while True:
            b = data[j]
            n |= (b & 0x7F) << shift
            shift += 7
            j += 1
            if not b & 0x80:
                break
        if t == mq.PUBLISH:
            out.append((data[j + 2:j + 2 + (data[j] << 8 | data[j + 1])], data[i:j + n]))
        i = j + n
    return out


def test_a_publish_that_waits_keeps_its_properties_when_a_callback_publishes_meanwhile():
    # MQTT 5: publish(props=...) waits for a window slot; meanwhile a
    # message arrives and the callback publishes with properties of its own.
    # The waiting message must still go out with its own properties.
    connack5 = b"\x20\x03\x00\x00\x00"
    with Rig([connack5]) as rig:
        cl = rig.client(level=5, window=1)

        def cb(t, m):
            cl.publish(b"t/cb", b"c", False, 0, props=((3, "cb"),))  # content type

        cl.set_callback(cb)
        cl.connect()
        sock = rig.socks[0]
        cl.publish(b"t/1", b"a", False, 1, props=((3, "first"),))
        # Read while publish() below waits for the window: a message, then
        # the PUBACK that frees the slot.
        sock.push(b"\x30\x08\x00\x04t/in\x00x")
        sock.push(b"\x40\x02\x00\x01")
        cl.publish(b"t/2", b"b", False, 1, props=((3, "second"),))
        cl.check_msg()
        got = dict(_publishes(sock.written))
        assert set(got) == {b"t/1", b"t/cb", b"t/2"}, got
        assert b"\x03\x00\x06second" in got[b"t/2"] and b"\x03\x00\x02cb" not in got[b"t/2"], got
        assert b"\x03\x00\x02cb" in got[b"t/cb"], got


def test_a_qos0_message_with_properties_waits_for_the_room_they_take():
    # MQTT 5: a QoS 0 message waits for room for all of its bytes, its
    # property block included. The send buffer holds a reading the socket
    # has not taken, with room behind it for the message's topic and payload
    # but not for its 26 bytes of properties; the socket then takes a byte a
    # write, and the room grows with each (the buffer is compacted). The
    # message must wait for its room, not be dropped once the room would
    # hold it without its properties, or some of them.
    connack5 = b"\x20\x03\x00\x00\x00"
    with Rig([connack5]) as rig:
        cl = rig.client(level=5, size=256, timeout_ms=10 ** 6)  # the clock never ends the wait
        cl.connect()
        sock = rig.socks[0]
        sock.written = b""  # CONNECT
        sock.write_limit = 0
        cl.publish(b"t/fill", b"f" * 200)  # 212 of the 256 bytes, unwritten
        sock.write_limit = 1
        props = ((38, ("k", "v" * 20)),)  # a user property
        cl.publish(b"t/p", b"x", props=props)
        sock.write_limit = None
        cl.check_msg()
        assert cl.dropped_qos0 == 0 and cl.last_error is None, (cl.dropped_qos0, cl.last_error)
        got = dict(_publishes(sock.written))
        assert set(got) == {b"t/fill", b"t/p"} and b"\x00\x01k\x00\x14" + b"v" * 20 in got[b"t/p"], got


def test_a_qos0_message_with_properties_goes_out_or_is_refused_at_once_never_dropped():
    # MQTT 5, QoS 0 with 26 bytes of properties, the send buffer empty before
    # each message, each one byte longer: it goes out, or is refused at once
    # with the send buffer's words; none passes the size check only to wait
    # for room the buffer can never have, and be dropped. The largest that
    # goes out takes all of the buffer but the 16 bytes kept for
    # acknowledgements; with topic aliases (the second CONNACK: Topic Alias
    # Maximum 8) that includes the 3 bytes of a topic's first alias (each
    # message has a topic of its own).
    props = ((38, ("k", "v" * 20)),)
    for connack5 in (b"\x20\x03\x00\x00\x00", b"\x20\x06\x00\x00\x03\x22\x00\x08"):
        with Rig([connack5]) as rig:
            cl = rig.client(level=5, size=256)
            cl.connect()
            sock = rig.socks[0]
            sock.written = b""  # CONNECT
            sent = []
            words = None
            for k in range(199, 207):
                try:
                    cl.publish("t/%d" % (k % 10), b"x" * k, props=props)
                except ValueError as e:
                    words = str(e)
                    break
                sent.append(k)
            assert cl.dropped_qos0 == 0 and cl.last_error is None, (connack5, cl.dropped_qos0, cl.last_error)
            got = [len(p) for t, p in _publishes(sock.written)]
            assert len(got) == len(sent) and max(got) == 240, (connack5, sent, got)
            assert words == ("a 241-byte packet does not fit the 256-byte send buffer (size=): it takes "
                             "packets of up to 240 bytes, 16 are kept for acknowledgements"), (connack5, words)


def test_offline_a_qos0_message_with_properties_is_checked_as_online():
    # MQTT 5, QoS 0 offline (before the first link, and once it is lost):
    # dropped and counted, nothing queued, the send buffer not grown for it
    # (it holds 256 bytes until a larger packet goes out), unless it could
    # never go out; then the ValueError it raises online, its properties
    # counted, and nothing dropped: one that fits without its properties but
    # not with them, one with a property the client sets itself (Topic Alias).
    props = ((38, ("k", "v" * 20)),)
    bad = (("t/p", b"x" * 974, props), ("t/p", b"x", ((35, 1),)))
    with Rig([b"\x20\x03\x00\x00\x00"]) as rig:
        cl = rig.client(level=5, size=1024, backoff_ms=(100000, 100000))
        said = []
        for phase in ("offline", "online", "lost"):
            if phase == "online":
                cl.connect()
            elif phase == "lost":
                rig.socks[0].eof = True
                cl.check_msg()
            said.append([str(raises(ValueError, cl.publish, t, m, props=p)) for t, m, p in bad])
            if phase != "online":
                cl.publish("t/p", b"x" * 973, props=props)  # the largest that fits: dropped
                cl.publish("t/p", b"x")  # and one without properties
                s = cl.session
                assert not cl.isconnected() and s.tx_end == 0 and len(s.tx) in (0, 256), (phase, len(s.tx))
        assert cl.dropped_qos0 == 4, cl.dropped_qos0
        assert said[0] == said[1] == said[2] and "1009-byte packet" in said[0][0], said


def test_properties_at_level_4_are_a_named_error_and_nothing_goes_out():
    # Connected, QoS 0 (the blocking client's own fast path) and 1: the
    # error before anything is queued, sent or counted.
    with Rig([CONNACK]) as rig:
        cl = rig.client()
        cl.connect()
        rig.socks[0].take()
        for qos in (0, 1):
            e = raises(ValueError, cl.publish, b"t", b"x", False, qos, props=((3, "a"),))
            assert str(e) == "publish(props=...) is MQTT 5: make the client with level=5", str(e)
        cl.check_msg()
        assert rig.socks[0].take() == [] and cl.pending() == 0 and cl.dropped_qos0 == 0


def test_an_mqtt5_connect_too_large_for_size_is_refused_before_any_link():
    # Issue 30 (suspected, real), at level 5: the CONNECT's properties count.
    with Rig([b"\x20\x03\x00\x00\x00"]) as rig:
        e = raises(ValueError, rig.client, level=5, user="u" * 1100)
        assert "send buffer" in str(e), str(e)
        cl = rig.client(level=5)
        e = raises(ValueError, cl.set_last_will, "t/will", "w" * 980)  # fits at level 4, not with properties
        assert "send buffer" in str(e), str(e)
        assert cl.session.will is None and rig.socks == []
        cl.set_last_will("t/will", "w" * 900)
        cl.connect()
        assert rig.socks[0].written[0] >> 4 == mq.CONNECT


def test_level5_expiry_goes_with_a_qos0_message_too():
    # At MQTT 5 expiry= is the message's Message Expiry Interval at every
    # QoS, as paho and mqtt_as send it (QoS 0 went without one).
    with Rig([b"\x20\x03\x00\x00\x00"]) as rig:
        cl = rig.client(level=5)
        cl.connect()
        cl.publish(b"t/e", b"m", False, 0, expiry=60)
        cl.publish(b"t/n", b"m", False, 0)
        got = dict(_publishes(rig.socks[0].written))
        p = got[b"t/e"]
        at = 2 + 2 + 3  # fixed header, topic length, topic: the property length, then the properties
        assert p[at] == 5 and p[at + 1] == 2, p  # Message Expiry Interval (0x02), 4 bytes
        left = p[at + 2] << 24 | p[at + 3] << 16 | p[at + 4] << 8 | p[at + 5]
        assert 58 <= left <= 60, (left, p)
        assert got[b"t/n"][at] == 0 or got[b"t/n"][at + 1] != 2, got[b"t/n"]


def test_level5_counters_of_what_the_link_cannot_carry():
    # oversized and unsendable read 0 first; a message stored offline that
    # the broker's Maximum Packet Size (100) then rules out is dropped
    # unsent and counted, the next one goes; a PUBLISH larger than size
    # from the broker is skipped, acknowledged and counted.
    connack5 = b"\x20\x08\x00\x00\x05\x27\x00\x00\x00\x64"
    big_in = b"\x32\x82\x03\x00\x01b\x00\x07" + b"z" * 381  # 386 bytes, QoS 1, id 7
    with Rig([connack5 + big_in]) as rig:
        cl = rig.client(level=5, size=256, backoff_ms=(100000, 100000))
        assert cl.oversized == 0 and cl.unsendable == 0
        cl.publish(b"t/big", b"x" * 200, False, 1)  # offline: stored
        cl.publish(b"t/ok", b"y", False, 1)
        cl.connect()
        cl.check_msg()
        got = dict(_publishes(rig.socks[0].written))
        assert set(got) == {b"t/ok"} and cl.unsendable == 1 and cl.pending() == 1, (got, cl.unsendable)
        assert cl.oversized == 1 and b"\x40\x02\x00\x07" in rig.socks[0].written, cl.oversized

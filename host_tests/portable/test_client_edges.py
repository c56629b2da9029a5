# The blocking client's shell at the edges of issue "Engine, round 2", with
# a scripted socket and a fake clock (Rig, from test_client_mock).
import consts as mq
from holdfast.errors import MQTTError, LinkDown
from fakebroker import wire
from support import raises
from rig import Rig, CONNACK

MSG1 = wire((mq.PUBLISH, b"cmd", b"go", 1, False, False, 4))


def test_calls_that_wait_refuse_inside_a_callback_before_any_side_effect():
    # Defect 7: subscribe() sent SUBSCRIBE and then raised; connect() replaced
    # the live link.
    with Rig([CONNACK, MSG1]) as rig:
        cl = rig.client()
        cl.connect()
        rig.socks[0].take()
        errors = []

        def cb(t, m):
            for call in (lambda: cl.subscribe(b"x", 1), lambda: cl.unsubscribe(b"x"),
                         lambda: cl.connect(), lambda: cl.flush(100)):
                try:
                    call()
                except MQTTError as e:
                    errors.append(str(e))

        cl.set_callback(cb)
        cl.check_msg()
        assert len(errors) == 4 and all("not from inside a callback" in e for e in errors), errors
        assert len(rig.socks) == 1 and cl.isconnected()
        assert rig.socks[0].take() == [(mq.PUBACK, 4)]  # nothing else went out
        assert cl.session.subs is None


def test_disconnect_inside_a_callback_leaves_a_working_client():
    # Defect 9: the ack was queued after the link was gone, and the next
    # check_msg() raised AttributeError.
    with Rig([CONNACK, MSG1]) as rig:
        cl = rig.client()
        cl.connect()
        cl.set_callback(lambda t, m: cl.disconnect())
        cl.check_msg()
        assert not cl.isconnected()
        cl.check_msg()
        assert rig.socks[0].take()[-1] == (mq.DISCONNECT,)  # no PUBACK after it


def test_wait_msg_raises_linkdown_when_no_link_can_come():
    # Defect 16: wait_msg() spun forever after disconnect(), or with
    # reconnect=False once the link was lost.
    with Rig([CONNACK]) as rig:
        cl = rig.client()
        cl.connect()
        cl.disconnect()
        e = raises(LinkDown, cl.wait_msg)
        assert "disconnect()" in str(e), str(e)
    with Rig([CONNACK]) as rig:
        cl = rig.client(reconnect=False)
        cl.connect()
        rig.socks[0].eof = True
        e = raises(LinkDown, cl.wait_msg)
        assert "connection closed by the broker" in str(e), str(e)
        assert cl.links == 1


def test_a_reset_before_connack_says_the_port_may_expect_tls():
    class Reset(Rig):
        def opener(self, host, port, timeout_ms):
            s = Rig.opener(self, host, port, timeout_ms)

            def boom(buf, n=None):
                raise OSError(104, "ECONNRESET")
            s.readinto = s.recv_into = boom
            return s

    with Reset([]) as rig:
        cl = rig.client(reconnect=False)
        e = raises(LinkDown, cl.connect)
        assert "before CONNACK" in str(e) and "may expect TLS" in str(e), str(e)


def test_a_qos0_message_waits_for_room_and_is_sent():
    # Defect 11: QoS 0 messages larger than 64 bytes were dropped without
    # waiting when the send buffer was busy.
    with Rig([CONNACK]) as rig:
        cl = rig.client(size=256)
        cl.connect()
        rig.socks[0].write_limit = 0  # the socket takes nothing for now
        cl.publish(b"t", b"a" * 150)

        def later(*a):
            rig.socks[0].write_limit = None  # the socket drains while we wait
            return True
        cl._io_wait = later
        cl.publish(b"t", b"b" * 150)
        cl.check_msg()
        got = [p[2] for p in rig.socks[0].take() if p[0] == mq.PUBLISH]
        assert got == [b"a" * 150, b"b" * 150] and cl.dropped_qos0 == 0, (len(got), cl.dropped_qos0)


def test_the_client_counts_held_ids_its_outbox_had_to_forget():
    from holdfast.store import MemoryStore
    q2 = wire((mq.PUBLISH, b"t", b"a", 2, False, False, 1), (mq.PUBLISH, b"t", b"b", 2, False, False, 2))
    with Rig([CONNACK, q2]) as rig:
        cl = rig.client(outbox=MemoryStore(held=1))
        cl.connect()
        cl.check_msg()
        assert cl.held_evicted == 1
        assert [p for p in rig.socks[0].take() if p[0] == mq.PUBREC] == [(mq.PUBREC, 1), (mq.PUBREC, 2)]


def test_set_next_pid_sets_the_id_the_next_qos1_publish_tries():
    # README's set_next_pid(pid), for tests of id wrap-around: read through
    # the client (policy.py, loaded on first use), not a session method.
    with Rig([CONNACK]) as rig:
        cl = rig.client()
        cl.connect()
        cl.set_next_pid(65535)
        assert cl.publish(b"t", b"a", qos=1) == 65535
        assert cl.publish(b"t", b"b", qos=1) == 1  # wrapped, 0 skipped
        raises(ValueError, cl.set_next_pid, 0)
        raises(ValueError, cl.set_next_pid, 65536)
        assert [p[6] for p in rig.socks[0].take() if p[0] == mq.PUBLISH] == [65535, 1]


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


def test_the_last_will_goes_out_in_connect_as_given_str_or_bytes():
    # set_last_will keeps topic and message as given; CONNECT encodes them.
    for topic, msg in (("dev/status", "gone"), (b"dev/status", b"gone")):
        with Rig([CONNACK]) as rig:
            cl = rig.client()
            cl.set_last_will(topic, msg, retain=True, qos=1)
            cl.connect()
            p = rig.socks[0].take()[0]
            assert p[0] == mq.CONNECT and p[5:9] == (b"dev/status", b"gone", 1, True), p

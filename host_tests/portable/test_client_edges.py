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
    from holdfast.memstore import MemoryStore
    q2 = wire((mq.PUBLISH, b"t", b"a", 2, False, False, 1), (mq.PUBLISH, b"t", b"b", 2, False, False, 2))
    with Rig([CONNACK, q2]) as rig:
        cl = rig.client(outbox=MemoryStore(held=1))
        cl.connect()
        cl.check_msg()
        assert cl.held_evicted == 1
        assert [p for p in rig.socks[0].take() if p[0] == mq.PUBREC] == [(mq.PUBREC, 1), (mq.PUBREC, 2)]


def test_set_next_pid_sets_the_id_the_next_qos1_publish_tries():
    # README's set_next_pid(pid), for tests of id wrap-around: read through
    # the client (policies.py, loaded on first use), not a session method.
    with Rig([CONNACK]) as rig:
        cl = rig.client()
        cl.connect()
        cl.set_next_pid(65535)
        assert cl.publish(b"t", b"a", qos=1) == 65535
        assert cl.publish(b"t", b"b", qos=1) == 1  # wrapped, 0 skipped
        raises(ValueError, cl.set_next_pid, 0)
        raises(ValueError, cl.set_next_pid, 65536)
        assert [p[6] for p in rig.socks[0].take() if p[0] == mq.PUBLISH] == [65535, 1]


def test_the_last_will_goes_out_in_connect_as_given_str_or_bytes():
    # set_last_will keeps topic and message as given; CONNECT encodes them.
    for topic, msg in (("dev/status", "gone"), (b"dev/status", b"gone")):
        with Rig([CONNACK]) as rig:
            cl = rig.client()
            cl.set_last_will(topic, msg, retain=True, qos=1)
            cl.connect()
            p = rig.socks[0].take()[0]
            assert p[0] == mq.CONNECT and p[5:9] == (b"dev/status", b"gone", 1, True), p


def test_a_connect_too_large_for_size_is_refused_before_any_link():
    # Issue 30 (suspected, real): a will, user or password too large for size
    # made connect() raise ValueError with the socket left open, and every
    # automatic reconnect after it raised ValueError out of check_msg().
    # (MQTT 5's CONNECT: test_client_props.py.)
    with Rig([CONNACK]) as rig:
        for kw in ({"user": "u" * 1100}, {"user": "u", "password": b"p" * 1100}):
            e = raises(ValueError, rig.client, **kw)
            assert "send buffer" in str(e), str(e)
        cl = rig.client()
        e = raises(ValueError, cl.set_last_will, "t/will", "w" * 1100)
        assert "send buffer" in str(e), str(e)
        raises(ValueError, cl.set_last_will, "t/#", "w")  # a wrong will topic, named now too
        assert cl.session.will is None and rig.socks == []  # kept as it was; nothing opened
        cl.set_last_will("t/will", "w" * 900)  # fits 1024 bytes, less the 16 kept for acks
        cl.connect()
        assert rig.socks[0].take()[0][0] == mq.CONNECT


def test_a_reconnect_that_finds_no_heap_is_a_failed_attempt_and_a_later_one_connects():
    # On a board with a short heap, a reconnect after a broker restart could
    # not load the words of its Unreachable: the MemoryError came out of every
    # publish() and check_msg(), no attempt was ever counted as failed, and
    # the client stayed offline for good (a 54 KB heap, the unix port). A
    # MemoryError in the link's steps is a link failure: backoff, then a
    # new attempt; the outbox keeps what was published meanwhile.
    with Rig([CONNACK], [CONNACK]) as rig:
        cl = rig.client(backoff_ms=(100, 100))
        cl.connect()
        short = [2]  # the next two connects find no heap
        opener = rig.opener

        def starved(host, port, ms):
            if short[0]:
                short[0] -= 1
                raise MemoryError("memory allocation failed, allocating 72 bytes")
            return opener(host, port, ms)
        rig.opener = starved
        rig.socks[0].eof = True  # the broker went away
        cl.check_msg()
        assert not cl.isconnected()
        pid = cl.publish(b"t", b"kept", False, 1)  # offline: into the outbox
        for _ in range(100):  # bounded: each round moves the rig's clock past the backoff
            if cl.isconnected():
                break
            cl.check_msg()
            rig.sleep(200)
        assert cl.isconnected() and short == [0] and cl.attempts == 4, (cl.attempts, short)
        assert isinstance(cl.last_error, MemoryError), cl.last_error  # the last failure, kept
        got = [(p[2], p[6]) for p in rig.socks[1].take() if p[0] == mq.PUBLISH]
        assert got == [(b"kept", pid)], got

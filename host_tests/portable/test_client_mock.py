# The blocking client's I/O shell against a scripted socket and a fake clock:
# byte-at-a-time reads, EAGAIN, partial writes, a broker that stalls, closes
# or talks garbage. Where a real broker cannot be steered.
import gc
from holdfast import client as hc
from holdfast import sockets
import consts as mq
from holdfast.errors import ConnectError, SubscribeError
from fakebroker import wire
from rig import Rig, Dial, CONNACK
from support import raises


def split(data, n=1):
    out = []
    for i in range(0, len(data), n):
        out.append(data[i:i + n])
        out.append(None)  # EAGAIN between every piece
    return out


def test_connack_one_byte_at_a_time_with_eagain():
    with Rig(split(CONNACK)) as rig:
        cl = rig.client()
        assert cl.connect() is False
        assert cl.isconnected()
        assert rig.socks[0].take()[0][0] == mq.CONNECT


def test_partial_writes_deliver_every_byte_in_order():
    with Rig([None] * 50 + [CONNACK], write_limit=3) as rig:
        cl = rig.client()
        cl.connect()
        rig.socks[0].take()
        pids = [cl.publish(b"t", b"payload-%d" % i, False, 1) for i in range(3)]
        for _ in range(20):
            cl.check_msg()
        got = rig.socks[0].take()
        assert [(p[2], p[6]) for p in got] == [(b"payload-0", pids[0]), (b"payload-1", pids[1]),
                                               (b"payload-2", pids[2])]


def test_check_msg_returns_while_a_packet_is_half_there():
    msg = wire((mq.PUBLISH, b"a/b", b"hello", 1, False, False, 3))
    with Rig([CONNACK, msg[:4]]) as rig:
        cl = rig.client()
        got = []
        cl.set_callback(lambda t, m: got.append(m))
        cl.connect()
        for _ in range(5):
            cl.check_msg()  # returns each time: the rest never comes
        assert got == []
        rig.socks[0].push(msg[4:])
        cl.check_msg()
        assert got == [b"hello"]
        assert (mq.PUBACK, 3) in rig.socks[0].take()


def test_broker_closing_mid_packet_reconnects_and_resends_with_dup():
    first = [CONNACK]
    with Rig(first, [CONNACK]) as rig:
        cl = rig.client(backoff_ms=(100, 1000))
        cl.connect()
        pid = cl.publish(b"t", b"keep me", False, 1)
        s0 = rig.socks[0]
        s0.push(wire((mq.PUBLISH, b"x", b"partial", 0, False, False, 0))[:5])
        s0.eof = True
        for _ in range(3):
            cl.check_msg()
        assert s0.closed and not cl.isconnected()
        assert "closed" in str(cl.last_error)
        assert cl.pending() == 1  # nothing lost
        rig.now += 1000  # past the backoff
        for _ in range(3):
            cl.check_msg()
        assert cl.isconnected()
        out = rig.socks[1].take()
        assert out[0][0] == mq.CONNECT
        assert out[1] == (mq.PUBLISH, b"t", b"keep me", 1, False, True, pid)


def test_reconnect_is_one_step_per_check_msg_and_gives_up_after_timeout():
    # The broker stopped answering: the TCP connect stays pending. Each
    # check_msg() steps it once and returns; after timeout_ms the attempt is
    # dropped and the next one follows the backoff.
    with Rig([CONNACK], [CONNACK]) as rig:
        cl = rig.client(backoff_ms=(100, 1000), timeout_ms=2000)
        cl.connect()
        dials = []
        real = sockets.dial

        def dial(host, port):
            d = real(host, port)
            dials.append(d[0])
            return d

        sockets.dial = dial
        rig.socks[0].eof = True
        cl.check_msg()
        assert not cl.isconnected()
        Dial.pending = 10 ** 6  # never connects
        rig.now += 1000
        for i in range(5):
            cl.check_msg()
            assert dials[0].steps == i + 1 and not cl.isconnected()
        assert not dials[0].closed and cl.attempts == 2
        rig.now += 2001
        cl.check_msg()
        assert dials[0].closed and "no TCP connection" in str(cl.last_error)
        Dial.pending = 0
        rig.now += 1001
        for _ in range(3):
            cl.check_msg()
        assert cl.isconnected() and cl.attempts == 3 and cl.links == 2


def test_callback_error_behind_connack_does_not_fail_connect():
    # A kept session's queued message arrives with CONNACK and the callback
    # raises: connect() still succeeds, the error is counted, the message
    # acknowledged.
    def boom(t, m):
        raise ValueError("the application's own bug")

    with Rig([CONNACK + wire((mq.PUBLISH, b"cmd", b"x", 1, False, False, 7))]) as rig:
        cl = rig.client()
        cl.set_callback(boom)
        cl.connect()
        assert cl.isconnected() and cl.callback_errors == 1
        assert [p for p in rig.socks[0].take() if p[0] == mq.PUBACK] == [(mq.PUBACK, 7)]


def test_garbage_from_broker_drops_link_keeps_outbox():
    with Rig([CONNACK], [CONNACK]) as rig:
        cl = rig.client(backoff_ms=(100, 1000))
        cl.connect()
        cl.publish(b"t", b"m", False, 2)
        rig.socks[0].push(b"\xf0\x00")
        cl.check_msg()
        assert not cl.isconnected()
        assert "reserved packet type" in str(cl.last_error)
        assert cl.pending() == 1


def test_refused_connect_raises_named_error():
    with Rig([wire((mq.CONNACK, False, 4))]) as rig:
        cl = rig.client()
        e = raises(ConnectError, cl.connect)
        assert e.code == 4 and "bad user name or password" in str(e)


def test_refusal_on_reconnect_backs_off_to_the_longest_delay():
    with Rig([CONNACK], [wire((mq.CONNACK, False, 5))]) as rig:
        cl = rig.client(backoff_ms=(100, 60000))
        cl.connect()
        rig.socks[0].eof = True
        cl.check_msg()
        rig.now += 200
        cl.check_msg()  # reconnects, is refused
        cl.check_msg()
        assert "not authorized" in str(cl.last_error)
        opened = len(rig.socks)
        rig.now += 30000
        for _ in range(10):
            cl.check_msg()
        assert len(rig.socks) == opened  # no tight retry loop


def test_reconnect_backoff_grows_and_is_capped():
    with Rig([CONNACK]) as rig:
        cl = rig.client(backoff_ms=(1000, 8000))
        cl.connect()
        rig.socks[0].eof = True
        cl.check_msg()
        delays = []
        for _ in range(6):
            delays.append(cl.backoff)
            rig.now = cl.retry_at + 1
            cl.check_msg()  # the opener refuses: no scripts left
        assert delays == [1000, 2000, 4000, 8000, 8000, 8000], delays


def test_qos0_while_offline_is_dropped_and_counted_qos1_is_queued():
    with Rig([CONNACK]) as rig:
        cl = rig.client(backoff_ms=(100000, 100000))
        cl.connect()
        rig.socks[0].eof = True
        cl.check_msg()
        assert cl.publish(b"t", b"a", False, 0) is None
        assert cl.dropped_qos0 == 1
        assert cl.publish(b"t", b"b", False, 1) > 0
        assert cl.pending() == 1


def test_failed_first_connect_still_reconnects_later():
    with Rig([CONNACK]) as rig:
        rig.now = (1 << 29) + 1000  # tick counter in the upper half of its range
        real = rig.opener
        calls = []

        def refuse_once(*a):
            calls.append(1)
            if len(calls) == 1:
                raise OSError(113, "no route to host")
            return real(*a)

        rig.opener = refuse_once
        cl = rig.client(backoff_ms=(100, 1000))
        raises(OSError, cl.connect)
        rig.now += 200
        for _ in range(3):
            cl.check_msg()
        assert cl.isconnected() and len(calls) == 2


def test_subscription_refused_by_the_broker_is_a_named_error():
    with Rig([CONNACK, wire((mq.SUBACK, 1, (0x80,)))]) as rig:
        cl = rig.client()
        cl.connect()
        e = raises(SubscribeError, cl.subscribe, b"forbidden/#", 1)
        assert "refused" in str(e)
        assert cl.session.subs.list == []  # not routed to, not restored on reconnect


def test_a_subscribe_with_a_bad_qos_is_refused_and_sends_nothing():
    # -1 is no QoS: refused like 3, never taken for an UNSUBSCRIBE.
    with Rig([CONNACK, wire((mq.SUBACK, 1, (1,)))]) as rig:
        cl = rig.client()
        cl.connect()
        rig.socks[0].take()
        assert cl.subscribe(b"kept", 1) == 1
        for bad in (-1, 3):
            e = raises(ValueError, cl.subscribe, b"kept", bad)
            assert repr(bad) in str(e), str(e)
        assert [e[0] for e in cl.session.subs.list] == [b"kept"] and cl.session.subs.gone == []
        assert [p[0] for p in rig.socks[0].take()] == [mq.SUBSCRIBE]


def test_full_receive_buffer_and_blocked_send_is_not_the_end_of_the_stream():
    # The socket takes no bytes, so acknowledgements pile up in tx until the
    # engine stops taking packets and rx fills: nothing to read into, which is
    # not EOF. Once the socket drains, every message is acknowledged.
    msgs = [wire((mq.PUBLISH, b"t", b"x" * 20, 1, False, False, i)) for i in range(1, 61)]
    with Rig([CONNACK] + msgs) as rig:
        cl = rig.client(size=128)
        got = []
        cl.set_callback(lambda t, m: got.append(m))
        cl.connect()
        sock = rig.socks[0]
        sock.write_limit = 0
        for _ in range(100):
            cl.check_msg()
        assert cl.isconnected(), cl.last_error
        assert len(got) < 60  # the engine did stop for want of tx room
        sock.write_limit = None
        for _ in range(300):
            cl.check_msg()
        assert cl.isconnected(), cl.last_error
        assert len(got) == 60
        del msgs, got
        gc.collect()  # the parser take() builds needs 4 KB in one piece
        assert [p[1] for p in sock.take() if p[0] == mq.PUBACK] == list(range(1, 61))


def test_a_qos1_publish_waits_for_room_in_the_window():
    # window=1: the second publish() waits (reading) until the first one's
    # PUBACK frees the window, and its message is on the wire when it
    # returns; without the wait it would sit in the outbox until the next
    # check_msg().
    with Rig([CONNACK, None, None, wire((mq.PUBACK, 1))]) as rig:
        cl = rig.client(window=1)
        cl.connect()
        assert cl.publish(b"t", b"first", False, 1) == 1
        assert [p[6] for p in rig.socks[0].take() if p[0] == mq.PUBLISH] == [1]
        assert cl.publish(b"t", b"second", False, 1) == 2
        assert cl.pending() == 1  # the first acknowledged, the second in flight
        assert [(p[2], p[6]) for p in rig.socks[0].take() if p[0] == mq.PUBLISH] == [(b"second", 2)]


def test_a_publishing_clients_session_keeps_its_attribute_table_small():
    # The Session's instance attributes once a client with a last will has
    # connected and published at QoS 0 and 1, set by the engine and the
    # shells: at most 47, where MicroPython's attribute table grows from 47
    # slots to 59 (192 B on a 64-bit board). What only a subscriber (or
    # QoS 2) sets is a class default in session.py.
    with Rig([CONNACK, None, None, wire((mq.PUBACK, 1))]) as rig:
        cl = rig.client(keepalive=30)
        cl.set_last_will(b"dev/status", b"gone", True, 1)
        cl.connect()
        got = []
        cl.set_delivered(got.append)
        cl.publish(b"t", b"0")
        pid = cl.publish(b"t", b"1", False, 1)
        for _ in range(5):
            cl.check_msg()
        assert got == [pid] == [1], got
        names = sorted(cl.session.__dict__)
        assert len(names) <= 47, (len(names), names)

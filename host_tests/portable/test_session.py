# The sans-I/O session engine, in exact bytes, with a fake clock.
import consts as mq
from holdfast.session import Session
from holdfast import broker
from consts import CONNECTED
from holdfast.subscriptions import match, request
from holdfast.errors import ConnectError, MQTTProtocolError, LinkDown, OutboxFull
from holdfast.memstore import MemoryStore
from holdfast.held import Held
from fakebroker import session, sent, feed, grant
from support import raises

PUB = mq.PUBLISH


def test_connect_packet_carries_will_user_password_keepalive():
    s = Session(b"dev-1", clean=False, keepalive=30)
    s.will = (b"dev/status", b"gone", 1, True)
    s.user = b"u"
    s.password = b"p"
    s.start(0)
    assert sent(s) == [(mq.CONNECT, 4, b"dev-1", False, 30, b"dev/status", b"gone", 1, True, b"u", b"p")]


def test_connect_31_uses_mqisdp():
    s = Session(b"dev-1", level=3)
    s.start(0)
    assert sent(s)[0][1] == 3


def test_connack_refusals_are_named_with_reasons():
    reasons = {1: "unacceptable protocol version", 2: "identifier rejected", 3: "server unavailable",
               4: "bad user name or password", 5: "not authorized"}
    for code in range(1, 6):
        s = Session(b"d")
        s.start(0)
        sent(s)
        e = raises(ConnectError, feed, s, (mq.CONNACK, False, code))
        assert e.code == code and reasons[code] in str(e), str(e)
        assert s.state != CONNECTED


def test_qos0_publish_exact_bytes():
    s = session()
    assert s.publish(b"a/b", b"hi", 0, True, 0) == 0  # queued
    assert sent(s) == [(PUB, b"a/b", b"hi", 0, True, False, 0)]
    assert len(s.store) == 0


def test_qos1_publish_returns_id_and_completes_on_puback():
    s = session()
    done = []
    s.on_delivered = done.append
    pid = s.publish(b"a/b", b"x", 1, False, 0)
    assert pid == 1
    assert sent(s) == [(PUB, b"a/b", b"x", 1, False, False, 1)]
    assert len(s.store) == 1 and s.inflight == 1
    feed(s, (mq.PUBACK, 1))
    assert done == [1] and len(s.store) == 0 and s.inflight == 0


def test_qos2_outgoing_full_flow():
    s = session()
    done = []
    s.on_delivered = done.append
    pid = s.publish(b"t", b"x", 2, False, 0)
    assert sent(s) == [(PUB, b"t", b"x", 2, False, False, pid)]
    feed(s, (mq.PUBREC, pid))
    assert sent(s) == [(mq.PUBREL, pid)]
    assert s.store.qos(s.store.next(-1)) == 3  # released
    assert done == []
    feed(s, (mq.PUBCOMP, pid))
    assert done == [pid] and len(s.store) == 0


def test_acks_find_their_message_by_id_and_by_what_it_waits_for():
    # A PUBREC repeated (the broker did not get our PUBREL) gets PUBREL again;
    # an ack of the wrong type, or for an id not in flight, changes nothing.
    s = session()
    done = []
    s.on_delivered = done.append
    p1 = s.publish(b"t", b"one", 1, False, 0)
    p2 = s.publish(b"t", b"two", 2, False, 0)
    sent(s)
    feed(s, (mq.PUBREC, p1), (mq.PUBCOMP, p2), (mq.PUBACK, p2), (mq.PUBACK, 999))
    assert sent(s) == [] and done == [] and s.inflight == 2
    feed(s, (mq.PUBREC, p2))
    assert sent(s) == [(mq.PUBREL, p2)]
    feed(s, (mq.PUBREC, p2))
    assert sent(s) == [(mq.PUBREL, p2)] and done == []
    feed(s, (mq.PUBACK, p1), (mq.PUBCOMP, p2))
    assert done == [p1, p2] and len(s.store) == 0 and s.inflight == 0
    feed(s, (mq.PUBREC, p2))  # for a flow that is over: no PUBREL
    assert sent(s) == []


def test_an_unanswered_pingreq_ends_the_link_after_a_keepalive_or_30_s():
    s = session()  # keepalive 0: ping() still works, and waits 30 s
    s.ping(1000)
    s.tick(30999)
    assert s.state == CONNECTED
    e = raises(LinkDown, s.tick, 31000)
    assert "30000 ms after PINGREQ" in str(e) and s.state != CONNECTED, str(e)
    s = session(keepalive=10)  # before the 15 s of silence that end it too
    s.ping(1000)
    s.tick(10999)
    assert s.state == CONNECTED
    e = raises(LinkDown, s.tick, 11000)
    assert "10000 ms after PINGREQ" in str(e), str(e)


def test_retry_after_interval_resends_with_dup_and_same_id():
    s = session(retry_ms=5000)
    pid = s.publish(b"t", b"x", 1, False, 0)
    sent(s)
    s.tick(4999)
    assert sent(s) == []
    s.tick(5000)
    assert sent(s) == [(PUB, b"t", b"x", 1, False, True, pid)]
    s.tick(9999)
    assert sent(s) == []
    s.tick(10000)
    assert sent(s) == [(PUB, b"t", b"x", 1, False, True, pid)]


def test_retry_of_qos2_past_pubrec_is_pubrel():
    s = session(retry_ms=1000)
    pid = s.publish(b"t", b"x", 2, False, 0)
    sent(s)
    feed(s, (mq.PUBREC, pid), now=10)
    sent(s)
    s.tick(1010)
    assert sent(s) == [(mq.PUBREL, pid)]


def test_no_in_session_retry_by_default():
    s = session()
    s.publish(b"t", b"x", 1, False, 0)
    sent(s)
    s.tick(10 ** 6)
    assert sent(s) == []


def reconnect(s, now=0, present=True):
    s.lost()
    s.start(now)
    out = sent(s)
    assert out[0][0] == mq.CONNECT
    feed(s, (mq.CONNACK, present, 0), now=now)
    return sent(s)


def test_reconnect_after_publish_resends_publish_with_dup():
    for qos in (1, 2):
        s = session(clean=False)
        pid = s.publish(b"t", b"x", qos, False, 0)
        sent(s)
        assert reconnect(s) == [(PUB, b"t", b"x", qos, False, True, pid)]


def test_reconnect_after_pubrec_resumes_with_pubrel_not_publish():
    s = session(clean=False)
    pid = s.publish(b"t", b"x", 2, False, 0)
    sent(s)
    feed(s, (mq.PUBREC, pid))
    assert sent(s) == [(mq.PUBREL, pid)]  # PUBREL sent, then the link drops
    assert reconnect(s) == [(mq.PUBREL, pid)]
    feed(s, (mq.PUBCOMP, pid))
    assert len(s.store) == 0


def test_reconnect_before_pubrel_was_sent_also_resumes_with_pubrel():
    s = session(clean=False)
    pid = s.publish(b"t", b"x", 2, False, 0)
    sent(s)
    feed(s, (mq.PUBREC, pid))
    s.tx_start = s.tx_end = 0  # PUBREL queued but never written
    assert reconnect(s) == [(mq.PUBREL, pid)]


def test_reconnect_resends_in_original_order_then_new_messages():
    s = session(clean=False, window=2)
    p1 = s.publish(b"t", b"1", 1, False, 0)
    p2 = s.publish(b"t", b"2", 1, False, 0)
    p3 = s.publish(b"t", b"3", 1, False, 0)  # window full: queued
    assert [p[2] for p in sent(s)] == [b"1", b"2"]
    out = reconnect(s)
    assert [(p[2], p[5], p[6]) for p in out] == [(b"1", True, p1), (b"2", True, p2)]
    feed(s, (mq.PUBACK, p1))
    assert sent(s) == [(PUB, b"t", b"3", 1, False, False, p3)]  # never sent before: no DUP


def test_offline_queue_flows_on_connect():
    s = Session(b"d")
    pids = [s.publish(b"t", b"%d" % i, 1, False, 0) for i in range(3)]
    s.start(0)
    sent(s)
    feed(s, (mq.CONNACK, False, 0))
    assert [(p[2], p[6]) for p in sent(s)] == [(b"0", pids[0]), (b"1", pids[1]), (b"2", pids[2])]


def test_window_limits_inflight_and_ack_releases_next():
    s = session(window=2)
    for i in range(4):
        s.publish(b"t", b"%d" % i, 1, False, 0)
    assert [p[2] for p in sent(s)] == [b"0", b"1"]
    feed(s, (mq.PUBACK, 2))
    assert [p[2] for p in sent(s)] == [b"2"]
    feed(s, (mq.PUBACK, 1), (mq.PUBACK, 3))
    assert [p[2] for p in sent(s)] == [b"3"]


def test_packet_ids_wrap_and_skip_ids_in_flight():
    s = session(window=4)
    s.next_pid = 65534
    a = s.publish(b"t", b"a", 1, False, 0)
    b = s.publish(b"t", b"b", 1, False, 0)
    assert (a, b) == (65534, 65535)
    s.next_pid = 65534  # force a wrap onto ids still in flight
    d = s.publish(b"t", b"d", 1, False, 0)
    assert d == 1
    s.next_pid = 65535
    feed(s, (mq.PUBACK, 65534))
    assert s.publish(b"t", b"e", 1, False, 0) == 2  # 65535 and 1 still in flight
    assert s.publish(b"t", b"f", 1, False, 0) == 3


def test_incoming_qos0_qos1_and_retained_flag():
    s = session()
    got = []
    s.on_message = lambda t, m: got.append((t, m, s.retained, s.qos))
    feed(s, (PUB, b"a", b"zero", 0, True, False, 0), (PUB, b"a", b"one", 1, False, False, 7))
    assert got == [(b"a", b"zero", True, 0), (b"a", b"one", False, 1)]
    assert sent(s) == [(mq.PUBACK, 7)]


def test_incoming_qos2_exactly_once_despite_dup_resend():
    s = session()
    got = []
    s.on_message = lambda t, m: got.append(m)
    feed(s, (PUB, b"a", b"m", 2, False, False, 9))
    assert sent(s) == [(mq.PUBREC, 9)]
    feed(s, (PUB, b"a", b"m", 2, False, True, 9))  # broker missed our PUBREC
    assert sent(s) == [(mq.PUBREC, 9)]
    assert got == [b"m"]
    feed(s, (mq.PUBREL, 9))
    assert sent(s) == [(mq.PUBCOMP, 9)]
    feed(s, (PUB, b"a", b"n", 2, False, False, 9))  # id reused for a new message
    assert got == [b"m", b"n"]


def test_incoming_qos2_reconnect_before_pubrel_keeps_exactly_once():
    s = session(clean=False)
    got = []
    s.on_message = lambda t, m: got.append(m)
    feed(s, (PUB, b"a", b"m", 2, False, False, 4))
    sent(s)
    reconnect(s)
    feed(s, (PUB, b"a", b"m", 2, False, True, 4))
    assert sent(s) == [(mq.PUBREC, 4)]
    feed(s, (mq.PUBREL, 4))
    assert sent(s) == [(mq.PUBCOMP, 4)]
    assert got == [b"m"]


def test_incoming_pubrel_after_reconnect_gets_pubcomp():
    s = session(clean=False)
    feed(s, (PUB, b"a", b"m", 2, False, False, 4))
    sent(s)
    reconnect(s)
    feed(s, (mq.PUBREL, 4))
    assert sent(s) == [(mq.PUBCOMP, 4)]


def test_keepalive_pings_when_nothing_was_sent_or_heard_and_detects_dead_link():
    s = session(keepalive=10)
    s.tick(9999)
    assert sent(s) == []
    s.tick(10000)
    assert sent(s, 10000) == [(mq.PINGREQ,)]  # nothing sent or heard for 10 s
    s.tick(11000)
    assert sent(s) == []  # one PINGREQ outstanding at a time
    feed(s, (mq.PINGRESP,), now=12000)
    s.publish(b"t", b"x", 0, False, 0)
    assert sent(s, 15000) == [(PUB, b"t", b"x", 0, False, False, 0)]
    s.tick(21999)
    assert sent(s) == []
    # Sent 7 s ago, but heard nothing for 10 s: a client that only
    # publishes still finds out whether the broker is there.
    s.tick(22000)
    assert sent(s, 22000) == [(mq.PINGREQ,)]
    s.tick(26999)
    e = raises(LinkDown, s.tick, 27000)  # 1.5 keepalives of silence
    assert "nothing from the broker for 15000 ms" in str(e), str(e)


def subscribed(s, *filters):
    """Subscribes (filter, qos, handler) each and lets the broker grant them."""
    for f, q, h in filters:
        request(s, f, q, h)
    grant(s)


def test_subscriptions_route_to_filter_handlers_and_global_callback():
    s = session()
    seen = []
    s.on_message = lambda t, m: seen.append(("all", t))
    subscribed(s, (b"a/+/temp", 1, lambda t, m, r: seen.append(("temp", t))),
               (b"a/#", 1, lambda t, m, r: seen.append(("a", t))))
    feed(s, (PUB, b"a/x/temp", b"1", 0, False, False, 0), (PUB, b"b", b"2", 0, False, False, 0))
    assert seen == [("temp", b"a/x/temp"), ("a", b"a/x/temp"), ("all", b"a/x/temp"), ("all", b"b")]


def test_topic_filter_matching():
    yes = ((b"#", b"a/b"), (b"a/#", b"a"), (b"a/#", b"a/b/c"), (b"a/+", b"a/b"), (b"+/+", b"a/b"),
           (b"a/+/c", b"a/b/c"), (b"+", b"a"), (b"a/+", b"a/"), (b"+/#", b"a"), (b"a/b", b"a/b"))
    no = ((b"a/+", b"a/b/c"), (b"a/b", b"a"), (b"a", b"a/b"), (b"+", b"a/b"), (b"#", b"$SYS/x"),
          (b"+/x", b"$SYS/x"), (b"a/#", b"ab"), (b"a/b/c", b"a/b"))
    for f, t in yes:
        assert match(f, t), (f, t)
    for f, t in no:
        assert not match(f, t), (f, t)


def test_resubscribes_when_broker_has_no_session():
    s = session()
    subscribed(s, (b"a/#", 1, None), (b"b", 2, None))
    out = reconnect(s, present=False)
    assert out == [(mq.SUBSCRIBE, out[0][1], ((b"a/#", 1), (b"b", 2)))]
    s2 = session()
    subscribed(s2, (b"a/#", 1, None))
    assert reconnect(s2, present=True) == []


def test_suback_result_is_recorded_in_the_request_and_a_refused_filter_goes():
    s = session()
    e = request(s, b"a", 2)
    pid = e[3]
    assert sent(s) == [(mq.SUBSCRIBE, pid, ((b"a", 2),))]
    assert e[4] == -1  # no answer yet
    feed(s, (mq.SUBACK, pid, (0x80,)))
    assert e[4] == 0x80 and s.subs.list == []


def test_broker_garbage_and_unexpected_packets_are_protocol_errors():
    s = session()
    broker.feed(s.rx, b"\xf0\x00")
    raises(MQTTProtocolError, s.receive, 0)
    s = session()
    broker.feed(s.rx, b"\x82\x06\x00\x01\x00\x01a\x00")  # SUBSCRIBE from a broker
    raises(MQTTProtocolError, s.receive, 0)
    s = session()
    raises(MQTTProtocolError, feed, s, (mq.PINGREQ,))
    s = session()
    raises(MQTTProtocolError, feed, s, (mq.CONNACK, False, 0))
    s = Session(b"d")
    s.start(0)
    sent(s)
    raises(MQTTProtocolError, feed, s, (PUB, b"a", b"m", 0, False, False, 0))


def test_inbound_packet_larger_than_buffer_is_dropped_counted_and_acked():
    s = session(size=128)
    got = []
    s.on_message = lambda t, m: got.append(m)
    feed(s, (PUB, b"big", b"z" * 300, 1, False, False, 5), (PUB, b"ok", b"small", 0, False, False, 0))
    assert s.dropped == 1
    assert got == [b"small"]
    assert sent(s) == [(mq.PUBACK, 5)]


def test_views_mode_hands_memoryviews():
    s = session(views=True)
    got = []
    s.on_message = lambda t, m: got.append((type(t), bytes(m)))
    feed(s, (PUB, b"a", b"v", 0, False, False, 0))
    assert got == [(memoryview, b"v")]


def test_publish_too_large_for_send_buffer_is_refused_and_not_stored():
    s = session(size=128)
    raises(ValueError, s.publish, b"t", b"x" * 200, 1, False, 0)
    assert len(s.store) == 0


def test_ping_with_keepalive_off_waits_for_its_answer():
    s = session()  # keepalive 0, as umqtt.simple's default
    s.ping(0)
    assert sent(s) == [(mq.PINGREQ,)]
    s.tick(1000)  # not dead yet
    feed(s, (mq.PINGRESP,), now=1500)
    s.tick(10 ** 6)
    s.ping(2000)
    sent(s)
    raises(LinkDown, s.tick, 2000 + 30000)


class _FullOnAck(MemoryStore):
    """A store whose flash is full for the acknowledgement records while full."""
    full = True

    def release(self, key):
        if self.full:
            raise OutboxFull("flash full")
        MemoryStore.release(self, key)


class _FullOnUnhold(Held):
    """Its held ids: the record that an id's hold ended finds no room while full."""

    def unhold(self, pid):
        if self.store.full:
            raise OutboxFull("flash full")
        Held.unhold(self, pid)


def _relink(s):
    # The shell's reconnect: the link is gone, a new one gets CONNACK (session kept).
    s.lost()
    s.start(0)
    assert sent(s)[0][0] == mq.CONNECT
    return feed(s, (mq.CONNACK, True, 0))


def test_full_flash_on_pubrec_or_pubrel_drops_the_link_and_the_next_one_finishes_the_flow():
    # Brokers repeat PUBREC / PUBREL only on the next link: an answer the
    # store cannot record must end this one, not wait for a repeat that
    # never comes within it (with window=1 the whole outbox would be stuck).
    s = session(store=_FullOnAck(), clean=False, window=1)
    pid = s.publish(b"t", b"x", 2, False, 0)
    sent(s)
    e = raises(OutboxFull, feed, s, (mq.PUBREC, pid))
    assert "flash full" in str(e) and s.state == mq.FAILED and s.error is e
    assert sent(s) == []  # no PUBREL: nothing recorded
    assert s.store.qos(s.store.next(-1)) == 2  # not released
    s.store.full = False  # room came: the reconnect the shell makes finishes the flow
    _relink(s)
    assert sent(s) == [(PUB, b"t", b"x", 2, False, True, pid)]  # DUP: the broker answers PUBREC again
    feed(s, (mq.PUBREC, pid))
    assert sent(s) == [(mq.PUBREL, pid)] and s.store.qos(s.store.next(-1)) == 3
    feed(s, (mq.PUBCOMP, pid))
    assert len(s.store) == 0 and s.inflight == 0
    # Inbound: the PUBREL whose end of hold cannot be recorded.
    s.store.full = True
    h = s.store.held_ids = _FullOnUnhold(s.store)
    h.hold(5)
    raises(OutboxFull, feed, s, (mq.PUBREL, 5))
    assert sent(s) == [] and h.held(5) and s.state == mq.FAILED  # no PUBCOMP, id still held
    s.store.full = False
    _relink(s)  # session kept: the id is still held, the broker sends PUBREL again
    assert h.held(5)
    feed(s, (mq.PUBREL, 5))
    assert sent(s) == [(mq.PUBCOMP, 5)] and not h.held(5)


def test_a_qos1_message_with_no_room_in_tx_yet_is_stored_and_goes_out_later():
    # Window open and nothing queued before it, but the send buffer is full
    # of QoS 0 messages the socket has not taken: publish() still stores it
    # and returns its id (QoS 0 alone returns the room it needs then); the
    # next tick after the socket took the bytes sends it, not as a duplicate.
    s = session(size=128)
    n = 0
    while not s.publish(b"t", b"zero", 0, False, 0):
        n += 1
    assert n > 0
    pid = s.publish(b"t", b"one", 1, False, 0)
    assert pid == 1 and len(s.store) == 1, pid
    assert [p[0] for p in sent(s)] == [PUB] * n  # the QoS 0 ones only
    s.tick(0)
    got = sent(s)
    assert got == [(PUB, b"t", b"one", 1, False, False, 1)], got

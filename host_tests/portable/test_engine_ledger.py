# The engine's ledger per packet id and its one reconciliation at CONNACK,
# its link state and its timers, in exact bytes (issue "Engine, round 2":
# the defect each test guards is named in its comment).
from holdfast import codec as c
from holdfast import broker
import consts as mq
from holdfast.session import Session
from consts import MESSAGE, DELIVERED, REFUSED, CONNECTED, FAILED, CONNECTING, OFFLINE
from holdfast.memstore import MemoryStore
from holdfast.client import MQTTClient
from time import ticks_ms, ticks_add, ticks_diff  # CPython: holdfast puts them there
from holdfast.errors import MQTTProtocolError, LinkDown, MQTTTimeout, OutboxFull, ConnectError
from holdfast.subscriptions import request
from holdfast.inbound import handled
from fakebroker import session, sent, feed, grant, wire
from support import raises

PUB = mq.PUBLISH


def relink(s, present, now=0):
    s.lost()
    s.start(now)
    sent(s)
    feed(s, (mq.CONNACK, present, 0), now=now)
    return sent(s)


def test_qos2_past_pubrec_goes_out_again_as_publish_when_the_broker_lost_the_session():
    # Defect 3: a PUBREL to a broker that lost the session gets PUBCOMP for a
    # message it never had: reported delivered, never arrived.
    s = session(clean=False)
    pid = s.publish(b"t", b"x", 2, False, 0)
    sent(s)
    feed(s, (mq.PUBREC, pid))
    assert sent(s) == [(mq.PUBREL, pid)]
    assert relink(s, False) == [(PUB, b"t", b"x", 2, False, True, pid)]
    assert s.republished == 1
    # The link drops again before PUBREC: still a PUBLISH, even though the
    # broker now says it kept the (new) session.
    assert relink(s, True) == [(PUB, b"t", b"x", 2, False, True, pid)]
    assert s.republished == 2
    done = []
    s.on_delivered = done.append
    feed(s, (mq.PUBREC, pid))
    assert sent(s) == [(mq.PUBREL, pid)] and done == []
    # Past PUBREC on the current session: a kept session resumes with PUBREL.
    assert relink(s, True) == [(mq.PUBREL, pid)]
    feed(s, (mq.PUBCOMP, pid))
    assert done == [pid] and len(s.store) == 0


def test_restore_is_complete_only_when_every_filter_has_its_suback():
    # Defect 4: a drop in the middle of a restore lost the rest for good once
    # the next CONNACK said session present.
    s = session(size=64)
    filters = [("cmd/%d/set" % i).encode() for i in range(6)]
    for f in filters:
        request(s, f, 1)
    grant(s)
    out = relink(s, False)
    first = out[0]
    feed(s, (mq.SUBACK, first[1], tuple(1 for _ in first[2])))
    granted = [f for f, q in first[2]]
    assert len(granted) < 6
    # Link lost with the rest unanswered; the broker kept the new session.
    rest = grant(s, relink(s, True))
    assert granted + rest == filters, (granted, rest)


def test_two_requests_in_flight_each_get_their_own_answer():
    # Defect 6: one overwritable "last ack" value served every waiter.
    s = session()
    a = request(s, b"a", 1)
    b = request(s, b"b", 2)
    out = sent(s)
    assert [p[0] for p in out] == [mq.SUBSCRIBE, mq.SUBSCRIBE]
    feed(s, (mq.SUBACK, b[3], (2,)))
    assert b[4] == 2 and a[4] == -1
    feed(s, (mq.SUBACK, a[3], (0x80,)))
    assert a[4] == 0x80 and [e[0] for e in s.subs.list] == [b"b"]


def test_an_ack_of_the_wrong_kind_is_a_protocol_error():
    # Defect 6: an UNSUBACK carrying a subscribe's id raised IndexError.
    s = session()
    e = request(s, b"a", 1)
    sent(s)
    err = raises(MQTTProtocolError, feed, s, (mq.UNSUBACK, e[3]))
    assert "UNSUBACK for message id %d, which awaits SUBACK" % e[3] in str(err), str(err)
    assert s.state == FAILED
    # And a SUBACK carrying an unsubscribe's id.
    s = session()
    request(s, b"a", 1)
    grant(s)
    g = request(s, b"a", None)
    sent(s)
    err = raises(MQTTProtocolError, feed, s, (mq.SUBACK, g[3], (1,)))
    assert "SUBACK for message id %d, which awaits UNSUBACK" % g[3] in str(err), str(err)
    assert s.state == FAILED and g[4] == -1


def test_filters_refused_on_a_restore_are_reported_once():
    # An UNSUBACK after the SUBACK that refused a restored filter reported
    # the refusal again: the shell counted it twice in restore_refused.
    s = session(clean=False)
    request(s, b"a", 1)
    request(s, b"b", 1)
    grant(s)
    out = relink(s, False)  # a new session on the broker: both are restored
    assert [p[0] for p in out] == [mq.SUBSCRIBE], out

    def events(p):
        broker.feed(s.rx, wire(p))
        got = []
        e = s.receive(0)
        while e:
            got.append(e)
            e = s.receive(0)
        return got

    assert events((mq.SUBACK, out[0][1], (1, 0x80))) == [REFUSED]
    assert s.subs.nrefused == 1 and s.subs.refused == b"b"
    g = request(s, b"a", None)
    assert sent(s) == [(mq.UNSUBSCRIBE, g[3], (b"a",))]
    assert events((mq.UNSUBACK, g[3])) == [] and g[4] == 0


def test_an_id_whose_ack_is_still_due_is_not_reused():
    # A filter subscribed again before its SUBACK goes out with a new id; the
    # first id's SUBACK still comes, so that id stays taken until it does.
    s = session()
    first = request(s, b"a", 1)[3]
    e = request(s, b"a", 2)
    assert [p[1] for p in sent(s)] == [first, e[3]] and e[3] != first
    s.next_pid = first  # the ids wrapped around
    b = request(s, b"b", 1)
    assert b[3] not in (first, e[3]), (b[3], first, e[3])
    feed(s, (mq.SUBACK, first, (1,)))  # the old answer: nobody's now
    assert e[4] == -1 and b[4] == -1
    feed(s, (mq.SUBACK, e[3], (2,)), (mq.SUBACK, b[3], (1,)))
    assert e[4] == 2 and b[4] == 1


def test_unsubscribe_is_a_request_with_its_own_answer_and_survives_a_drop():
    s = session(clean=False)
    request(s, b"a", 1)
    grant(s)
    g = request(s, b"a", None)
    out = sent(s)
    assert out == [(mq.UNSUBSCRIBE, g[3], (b"a",))] and g[4] == -1
    out = relink(s, True)  # the broker kept the session: ask again
    assert out == [(mq.UNSUBSCRIBE, g[3], (b"a",))]
    feed(s, (mq.UNSUBACK, g[3]))
    assert g[4] == 0 and s.subs.gone == []
    # A new session has nothing to unsubscribe from.
    g = request(s, b"b", None)
    sent(s)
    assert relink(s, False) == [] and g[4] == 0


def test_a_handler_gets_messages_from_the_moment_its_subscribe_is_queued():
    # Defect 8: a retained message the broker sends before SUBACK reached only
    # the global callback.
    s = session()
    got = []
    request(s, b"cfg/#", 1, lambda t, m, r: got.append((bytes(t), bytes(m), r)))
    out = sent(s)
    feed(s, (PUB, b"cfg/rate", b"10", 1, True, False, 9))
    assert got == [(b"cfg/rate", b"10", True)]
    feed(s, (mq.SUBACK, out[0][1], (1,)))
    assert s.subs.list[0][4] == 1


def test_an_acknowledgement_belongs_to_the_link_it_was_made_on():
    # Defect 9: an ack queued after the link was gone was written to a closed
    # socket (or the next link).
    for qos in (1, 2):
        s = session(clean=False)
        broker.feed(s.rx, bytes(wire_publish(qos, 5)))
        assert s.receive(0) == MESSAGE
        s.lost()  # disconnect() from inside the callback, say
        s.start(0)
        sent(s)
        handled(s)
        assert sent(s) == []
        if qos == 2:  # the copy the broker sends again is not delivered twice
            assert s.store.held_ids.held(5)
            feed(s, (mq.CONNACK, True, 0))
            got = []
            s.on_message = lambda t, m: got.append(m)
            feed(s, (PUB, b"t", b"m", 2, False, True, 5))
            assert got == [] and sent(s) == [(mq.PUBREC, 5)]


def wire_publish(qos, pid):
    b = bytearray(32)
    n = c.publish(b, b"t", b"m", qos, False, False, pid)
    return b[:n]


def test_subscribe_waits_for_room_instead_of_failing():
    # Defect 10: a partly full send buffer made subscribe() raise ValueError.
    s = session(size=64)
    assert s.publish(b"t", b"x" * 30, 0, False, 0) == 0  # 35 of 48 usable bytes queued
    e = request(s, b"cmd/#", 1)
    assert [p[0] for p in sent(s)] == [PUB]  # SUBSCRIBE waits for room
    s.tick(1)
    assert sent(s) == [(mq.SUBSCRIBE, e[3], ((b"cmd/#", 1),))]


def test_too_big_for_the_send_buffer_raises_at_every_qos_and_says_the_usable_room():
    # Defect 11: QoS 0 was dropped silently, and the words hid the 16 bytes
    # kept for acknowledgements.
    for qos in (0, 1, 2):
        s = session(size=64)
        e = raises(ValueError, s.publish, b"t", b"x" * 60, qos, False, 0)
        assert "takes packets of up to 48 bytes, 16 are kept for acknowledgements" in str(e), str(e)
        assert len(s.store) == 0 and sent(s) == []


def test_latest_on_a_full_outbox_drops_nothing_when_the_new_message_is_refused():
    # Defect 12: the older value was dropped, then OutboxFull raised.
    s = Session(b"d", store=MemoryStore(size=4096, slots=2))
    s.publish(b"state", b"1", 1, False, 0)
    s.publish(b"other", b"2", 1, False, 0)
    raises(OutboxFull, s.publish, b"state", b"3", 1, False, 0, 0, True)
    assert len(s.store) == 2 and s.replaced == 0
    s.store.done(s.store.next(s.store.next(-1)))  # "other" acknowledged: room for one
    s.publish(b"state", b"4", 1, False, 0, 0, True)
    assert len(s.store) == 1 and s.replaced == 1


def test_a_broker_that_stops_reading_is_a_dead_link_whatever_the_room():
    # Defect 13: with the send buffer full of acknowledgements, PINGREQ was
    # never queued and the link stayed "connected" for good.
    s = session(keepalive=10, size=64)
    assert s.publish(b"t", b"x" * 40, 0, False, 0) == 0  # the socket takes none of it
    for t in range(1000, 15000, 1000):
        feed(s, (PUB, b"t", b"m", 0, False, False, 0), now=t)  # the broker still talks
        s.tick(t)
    e = raises(LinkDown, s.tick, 15000)
    assert "took no bytes for 15000 ms" in str(e), str(e)
    assert s.state == FAILED
    # A silent broker with a full send buffer: no room for PINGREQ, still found dead.
    s = session(keepalive=10, size=64)
    assert s.publish(b"t", b"x" * 43, 0, False, 0) == 0  # 48 bytes: the most that fits
    feed(s, (PUB, b"t", b"m", 1, False, False, 3))  # its PUBACK takes 4 of the last 16
    s.tick(10000)
    assert s.ping_at < 0  # no room to queue PINGREQ
    s.tick(14999)
    e = raises(LinkDown, s.tick, 15000)
    assert "nothing from the broker for 15000 ms" in str(e), str(e)


def test_connack_watchdog_is_the_engines():
    s = Session(b"d", connack_ms=3000)
    s.start(100)
    assert s.state == CONNECTING
    s.tick(3099)
    e = raises(MQTTTimeout, s.tick, 3100)
    assert "no CONNACK within 3000 ms" in str(e) and s.state == FAILED
    s.lost()
    assert s.state == OFFLINE and s.error is not None
    s.start(0)
    assert s.error is None


def test_a_broker_that_closes_instead_of_answering_connect_is_named():
    # Defect 21: a closed link was reported as a CONNACK timeout.
    # The level CONNECT asked for is named (its words stay in reasons.py,
    # which loads with the error).
    from holdfast.mqtt5.session import Session5
    for level in (3, 4, 5):
        s = (Session5 if level == 5 else Session)(b"d", True, 0, level)
        s.start(0)
        e = raises(LinkDown, s.eof)
        assert "closed the link instead of answering CONNECT" in str(e), str(e)
        assert "does it speak protocol level %d (3: MQTT 3.1, MQIsdp; 4: MQTT 3.1.1; 5: MQTT 5)?" % level in str(e), str(e)
    s = session()
    e = raises(LinkDown, s.eof)
    assert str(e) == "connection closed by the broker", str(e)


def test_backoff_resets_after_a_link_that_stayed_up_and_jitters_every_delay():
    # Defects 14 and 15. The delays are read against the clock the client
    # read at the failure (ticks_ms() before and after bound it).
    cl = MQTTClient(b"d", "127.0.0.1", keepalive=30, backoff_ms=(1000, 60000))
    lost = LinkDown("lost")
    for _ in range(6):
        cl._link_failed(lost)
    assert cl.backoff == 32000 and cl.last_error is lost
    cl.session.state = CONNECTED  # as after CONNACK: the link is up since s.since
    cl.session.since = ticks_add(ticks_ms(), -20000)
    cl._housekeep(ticks_ms())
    assert cl.backoff == 32000  # up 20 s of the keepalive's 30: not yet
    cl.session.since = ticks_add(ticks_ms(), -31000)
    assert cl._housekeep(ticks_ms()) == 0  # the attempt may start at once
    assert cl.backoff == 0

    def delay(err):
        t0 = ticks_ms()
        cl._link_failed(err)
        t1 = ticks_ms()
        return ticks_diff(cl.retry_at, t1), ticks_diff(cl.retry_at, t0)

    lo, hi = delay(lost)
    assert cl.backoff == 1000 and lo <= 1000 and hi >= 500, (lo, hi)
    now = ticks_ms()
    # _housekeep() returns the ms until the next attempt may start.
    assert cl._housekeep(ticks_add(cl.retry_at, -100)) == 100
    assert cl._housekeep(cl.retry_at) == 0 and cl._housekeep(ticks_add(now, 60000)) == 0
    seen = set()
    for _ in range(20):
        lo, hi = delay(ConnectError(5))  # refused: the longest delay, jittered
        assert lo <= 60000 and hi >= 30000, (lo, hi)
        seen.add(cl.retry_at)
    assert len(seen) > 1  # a refused fleet does not retry in lockstep


def test_subscribing_again_waits_for_the_new_answer():
    s = session()
    e = request(s, b"a", 1)
    grant(s)
    assert e[4] == 1
    again = request(s, b"a", 2)
    assert again is e and e[4] == -1  # not the previous SUBACK's answer
    out = sent(s)
    feed(s, (mq.SUBACK, out[0][1], (2,)))
    assert e[4] == 2 and len(s.subs.list) == 1


def test_an_invalid_filter_is_refused_before_it_is_registered_and_named():
    s = session()
    for bad in (b"a/#/b", b"a+", b""):
        e = raises(ValueError, request, s, bad, 1)
        assert bad == b"" or repr(bad) in str(e), str(e)
        raises(ValueError, request, s, bad, None)
    raises(ValueError, request, s, b"ok", 3)
    assert s.subs.list == [] and s.subs.gone == [] and sent(s) == []
    relink(s, False)  # nothing left behind to trip over
    assert s.state == CONNECTED


def test_the_receive_buffer_grows_to_size_once_messages_can_arrive():
    # Footprint: a client that only publishes gets acks and CONNACK, which
    # a small buffer holds; a subscription (or a kept session) brings
    # messages up to size bytes, so the buffer grows first.
    s = session(size=512)
    assert len(s.rx.buf) < 512
    pid = s.publish(b"t", b"x", 1, False, 0)
    sent(s)
    ack = wire((mq.PUBACK, pid))
    broker.feed(s.rx, ack[:3])  # half an ack is buffered when subscribe() comes
    e = request(s, b"in/#", 1)
    assert len(s.rx.buf) == 512
    assert sent(s)[0][0] == mq.SUBSCRIBE
    broker.feed(s.rx, ack[3:])
    assert s.receive(0) == DELIVERED and s.done_pid == pid
    feed(s, (mq.SUBACK, e[3], [1]))
    big = b"m" * 400
    feed(s, (PUB, b"in/a", big, 1, False, False, 9))
    assert s.msg == big  # a message larger than the small buffer, whole
    kept = session(size=512, clean=False)
    assert len(kept.rx.buf) == 512  # a kept session may bring messages at once


def test_the_send_buffer_is_made_after_the_first_handshake():
    # Footprint: on a board whose TLS allocates on the same heap, the
    # handshake's peak does not carry the send buffer too. An offline
    # publish is still checked against size.
    s = Session(b"d", size=300)
    assert len(s.tx) == 0
    assert s.publish(b"t", b"x" * 200, 1, False, 0)
    raises(ValueError, s.publish, b"t", b"x" * 290, 1, False, 0)
    s.start(0)
    assert len(s.tx) == 256 and sent(s)[0][0] == mq.CONNECT


def test_the_send_buffer_grows_to_size_for_the_first_packet_that_needs_it():
    # Footprint: a sensor's readings and the acks fit the 256 bytes a first
    # start() makes; a larger packet makes it size bytes, once, when it is
    # empty, and goes out whole.
    s = session(size=1024)
    assert len(s.tx) == 256
    assert s.publish(b"t", b"r" * 200, 0, False, 0) == 0
    assert len(s.tx) == 256
    big = b"b" * 600
    # No room behind the reading yet: not queued, and the room it needs said.
    assert s.publish(b"t", big, 0, False, 0) == c.publish_size(b"t", 600, 0) == 606
    assert len(s.tx) == 256
    assert sent(s) == [(mq.PUBLISH, b"t", b"r" * 200, 0, False, False, 0)]
    assert s.publish(b"t", big, 0, False, 0) == 0
    assert len(s.tx) == 1024
    assert sent(s) == [(mq.PUBLISH, b"t", big, 0, False, False, 0)]
    tx = s.tx
    pid = s.publish(b"t", big, 1, False, 0)
    assert s.tx is tx and sent(s) == [(mq.PUBLISH, b"t", big, 1, False, False, pid)]
    raises(ValueError, s.publish, b"t", b"x" * 1010, 0, False, 0)  # size is still the limit


def test_a_stored_message_too_large_for_the_first_send_buffer_goes_out_after_connect():
    s = Session(b"d", clean=False, size=1024)
    big = b"q" * 700
    pid = s.publish(b"t", big, 1, False, 0)  # offline: into the outbox only
    s.start(0)
    assert len(s.tx) == 256 and sent(s)[0][0] == mq.CONNECT
    assert not feed(s, (mq.CONNACK, True, 0))
    assert sent(s) == [(mq.PUBLISH, b"t", big, 1, False, False, pid)]
    assert len(s.tx) == 1024


def test_a_connect_too_large_for_the_first_send_buffer_goes_out_whole():
    s = Session(b"d", size=1024)
    s.will = (b"dev/gone", b"w" * 300, 1, False)
    s.user = b"u" * 100
    s.password = b"p" * 100
    s.start(0)
    assert len(s.tx) == 1024
    assert sent(s) == [(mq.CONNECT, 4, b"d", True, 0, b"dev/gone", b"w" * 300, 1, False, b"u" * 100,
                        b"p" * 100)]

def test_a_connect_that_is_wrong_not_large_says_why():
    # A CONNECT the codec refuses for what it says raises its own words, not
    # the fit's, from the first buffer or the grown one (MQTT 5's:
    # test_v5session.py).
    for s, words in ((Session(b"", level=3), "empty client id"),
                     (Session(b"d", keepalive=70000), "keepalive 70000")):
        s.user = b"u" * 300  # too large for the first buffer too: the fault is found first
        e = raises(ValueError, s.start, 0)
        assert words in str(e), str(e)
    s = Session(b"d", size=300)  # too large even for size: the buffer grows once, then the fit's words
    s.user = b"u" * 300
    e = raises(ValueError, s.start, 0)
    assert "does not fit" in str(e) and len(s.tx) == 300, (str(e), len(s.tx))


def test_a_subscribe_too_large_for_the_first_send_buffer_goes_out():
    s = session(size=1024)
    flt = b"f/" + b"x" * 400
    e = request(s, flt, 1)
    assert sent(s) == [(mq.SUBSCRIBE, e[3], ((flt, 1),))]
    e = request(s, flt, None)
    assert sent(s) == [(mq.UNSUBSCRIBE, e[3], (flt,))]


def test_the_default_outbox_holds_16_messages():
    s = Session(b"d")
    for i in range(16):
        s.publish(b"t", b"%d" % i, 1, False, 0)
    raises(OutboxFull, s.publish, b"t", b"16", 1, False, 0)
    assert len(s.store) == 16
    big = Session(b"d", size=4096)  # it holds two of the largest messages
    big.publish(b"t", b"x" * 4000, 1, False, 0)
    big.publish(b"t", b"y" * 4000, 1, False, 0)
    assert len(big.store) == 2

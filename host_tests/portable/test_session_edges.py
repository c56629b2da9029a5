# The engine at the edges a fleet meets every day, in exact bytes: a new
# session on the broker, packets larger than the buffer, restores that need
# several packets, one event at a time, and the sticky error state.
from holdfast import codec as c
from holdfast import broker
import consts as mq
from holdfast.session import Session
from consts import MESSAGE, CONNECTED, FAILED
from holdfast.memstore import MemoryStore
from holdfast.errors import MQTTProtocolError, LinkDown
from holdfast.subscriptions import request
from holdfast.inbound import handled
from holdfast.policies import next_pid
from fakebroker import session, sent, feed, grant
from drain import drain
from support import raises

PUB = mq.PUBLISH


def relink(s, present):
    s.lost()
    s.start(0)
    sent(s)
    feed(s, (mq.CONNACK, present, 0))
    return sent(s)


def test_new_session_forgets_held_qos2_ids():
    # PUBREC sent, then the link drops before PUBREL. The broker starts a new
    # session (clean, or session present 0) and gives id 1 to a new message:
    # it must be delivered, not taken for a re-sent copy.
    for clean, present in ((True, False), (False, False)):
        s = session(clean=clean)
        got = []
        s.on_message = lambda t, m: got.append(m)
        feed(s, (PUB, b"a", b"old", 2, False, False, 1))
        assert sent(s) == [(mq.PUBREC, 1)]
        relink(s, present)
        feed(s, (PUB, b"a", b"new", 2, False, False, 1))
        assert got == [b"old", b"new"], (clean, got)
        assert sent(s) == [(mq.PUBREC, 1)]


def test_kept_session_still_suppresses_the_resent_copy():
    s = session(clean=False)
    got = []
    s.on_message = lambda t, m: got.append(m)
    feed(s, (PUB, b"a", b"m", 2, False, False, 1))
    relink(s, True)
    feed(s, (PUB, b"a", b"m", 2, False, True, 1))
    assert got == [b"m"]


def test_mqtt31_persistent_session_keeps_held_ids():
    # 3.1 has no session-present flag: with clean_session=False the broker may
    # well have kept the flow, so the id stays held.
    s = session(clean=False, level=3)
    got = []
    s.on_message = lambda t, m: got.append(m)
    feed(s, (PUB, b"a", b"m", 2, False, False, 1))
    relink(s, False)
    feed(s, (PUB, b"a", b"m", 2, False, True, 1))
    assert got == [b"m"]


def test_oversize_qos2_publish_gets_pubrec_then_pubcomp():
    s = session(size=128)
    feed(s, (PUB, b"big", b"z" * 300, 2, False, False, 5))
    assert s.dropped == 1
    assert sent(s) == [(mq.PUBREC, 5)]
    feed(s, (mq.PUBREL, 5))
    assert sent(s) == [(mq.PUBCOMP, 5)]


def test_oversize_publish_acknowledged_whatever_the_read_sizes():
    for qos, ack in ((1, mq.PUBACK), (2, mq.PUBREC)):
        for step in (1, 2, 3, 5, 7):
            s = session(size=64)
            data = bytearray(300)
            n = c.publish(data, b"t/" + b"x" * 20, b"z" * 200, qos, False, False, 77)
            for i in range(0, n, step):
                broker.feed(s.rx, data[i:min(n, i + step)])
                drain(s)
            assert s.dropped == 1 and sent(s) == [(ack, 77)], (qos, step)


def test_one_event_at_a_time_and_views_stay_valid_until_handled():
    s = session(views=True)
    data = bytearray(64)
    n = c.publish(data, b"a", b"one", 1, False, False, 1)
    n = c.publish(data, b"b", b"two", 1, True, False, 2, n)
    broker.feed(s.rx, data[:n])
    assert s.receive(0) == MESSAGE
    assert bytes(s.topic) == b"a" and bytes(s.msg) == b"one" and not s.retained
    assert sent(s) == []  # acknowledged only once handled
    s.publish(b"x", b"y", 1, False, 0)  # what a callback may do: queue
    assert bytes(s.msg) == b"one" and s.qos == 1 and not s.retained
    handled(s)
    assert s.receive(0) == MESSAGE and bytes(s.msg) == b"two" and s.retained
    handled(s)
    assert s.receive(0) == 0
    assert [p[0] for p in sent(s)] == [PUB, mq.PUBACK, mq.PUBACK]


def test_restore_splits_filters_across_packets_that_fit():
    s = session(size=128)
    filters = [("sensor/%02d/command/set" % i).encode() for i in range(20)]
    for f in filters:
        request(s, f, 1)
    assert grant(s) == filters
    restored = grant(s, relink(s, False))
    assert restored == filters, restored
    assert s.state == CONNECTED and s.error is None


def test_restore_refusal_is_an_event_and_the_session_stays_up():
    s = session()
    for f in (b"a", b"b", b"c"):
        request(s, f, 1)
    grant(s)
    out = relink(s, False)
    broker.feed(s.rx, bytes((0x90, 5, out[0][1] >> 8, out[0][1] & 255, 0x80, 1, 0x80)))
    from consts import REFUSED
    assert s.receive(0) == REFUSED and s.subs.refused == b"c"
    assert s.subs.nrefused == 2  # each refused filter counts
    assert s.state == CONNECTED
    assert [e[0] for e in s.subs.list] == [b"b"]


def test_subscribe_refuses_a_filter_that_could_not_be_restored():
    s = session(size=64)
    e = raises(ValueError, request, s, b"f" * 50, 1)
    assert "takes packets of up to 48 bytes" in str(e), str(e)
    assert sent(s) == []


def test_publish_before_connack_is_refused_before_it_is_delivered():
    s = Session(b"d")
    got = []
    s.on_message = lambda t, m: got.append(m)
    s.start(0)
    sent(s)
    raises(MQTTProtocolError, feed, s, (PUB, b"a", b"m", 1, False, False, 3))
    assert got == [] and sent(s) == []


def test_errors_are_sticky_until_a_new_link():
    s = session()
    broker.feed(s.rx, b"\xf0\x00")
    raises(MQTTProtocolError, s.receive, 0)
    assert s.state != CONNECTED
    raises(MQTTProtocolError, s.receive, 0)  # still in error: nothing more is handled
    s.start(0)
    assert s.error is None


def test_end_of_stream_is_an_explicit_input():
    s = session()
    raises(LinkDown, s.eof)
    assert s.state == FAILED and isinstance(s.error, LinkDown)
    raises(LinkDown, s.receive, 0)


def test_a_stuck_qos2_message_does_not_block_qos1_publishing():
    s = session(store=MemoryStore(size=2048, slots=8))
    q2 = s.publish(b"t", b"waits", 2, False, 0)
    sent(s)
    for i in range(200):  # the broker never answers the QoS 2 message
        pid = s.publish(b"t", str(i).encode(), 1, False, 0)
        assert sent(s)[-1][6] == pid
        feed(s, (mq.PUBACK, pid))
    assert len(s.store) == 1 and s.store.pid(s.store.next(-1)) == q2


def test_next_packet_id_can_be_set_for_wraparound_tests():
    # The client's set_next_pid(pid) is this function, made for its session.
    s = session()
    set_next_pid = next_pid(s)
    set_next_pid(65535)
    assert s.publish(b"t", b"a", 1, False, 0) == 65535
    assert s.publish(b"t", b"b", 1, False, 0) == 1
    raises(ValueError, set_next_pid, 0)
    raises(ValueError, set_next_pid, 65536)
    assert s.publish(b"t", b"c", 1, False, 0) == 2  # a refused id changes nothing


def test_a_filter_subscribed_again_during_its_restore_leaves_the_restores_codes_to_the_others():
    # Issue 30, D13: the application (a umqtt.robust program, after every
    # reconnect) subscribes again to a restored filter before the restore's
    # SUBACK came. That SUBACK's codes answer the filters its SUBSCRIBE
    # listed, in that order: paired with the entries still carrying its id,
    # a refusal went to the wrong filter (one granted dropped with its
    # handler, one refused kept and not counted).
    for codes, kept, refused in (((0x80, 1), [b"a", b"b"], 0), ((0, 0x80), [b"a"], 1)):
        s = session(clean=False)
        request(s, b"a", 1)
        request(s, b"b", 1)
        grant(s)
        out = relink(s, False)  # a new session on the broker: both are restored
        assert out == [(mq.SUBSCRIBE, out[0][1], ((b"a", 1), (b"b", 1)))], out
        again = request(s, b"a", 0)  # asked again before the restore's SUBACK
        out2 = sent(s)
        assert out2 == [(mq.SUBSCRIBE, again[3], ((b"a", 0),))], out2
        feed(s, (mq.SUBACK, out[0][1], codes))
        assert [e[0] for e in s.subs.list] == kept, (codes, s.subs.list)
        assert s.subs.nrefused == refused, (codes, s.subs.nrefused)
        assert again[4] == -1  # its own request's answer is still to come
        feed(s, (mq.SUBACK, again[3], (0,)))
        assert again[4] == 0 and again[3] == -1
        assert [e[0] for e in s.subs.list] == kept

# The shell contract: the blocking and the asyncio client behave the same
# (counters, timeouts, what they catch and report), each scenario written
# once (contract_scenarios.py) and run on both shells under both runtimes
# against a scripted broker over a real socket.
import json
import os
import subprocess
import sys

import pytest

import consts as mq
from packets import encode
from scripted_broker import ScriptedBroker, connack

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(HERE, "contract_scenarios.py")
BIN = os.path.dirname(sys.executable)
RUNTIMES = {"cpython": sys.executable, "micropython": os.path.join(BIN, "micropython")}

both = pytest.mark.parametrize("runtime,shell", [(r, s) for r in sorted(RUNTIMES)
                                                 for s in ("blocking", "async")])


def play(runtime, shell, name, *scripts, raised=(), args=()):
    """Runs scenario name against a broker playing scripts; returns (the
    client's result, the broker). raised: the exceptions (type names) the
    blocking client's wait_msg() must have raised, none unless given (or a
    test of that list). args: the scenario's own, after host and port."""
    b = ScriptedBroker(*scripts)
    try:
        p = subprocess.run([RUNTIMES[runtime], SCEN, shell, name, "127.0.0.1", str(b.port)] + list(args),
                           capture_output=True, text=True, timeout=120)
    finally:
        b.close()
    r = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
    assert not b.errors, (b.errors, p.stdout, p.stderr)
    assert r is not None, "no result (exit %s):\n%s\n%s" % (p.returncode, p.stdout, p.stderr)
    if callable(raised):
        assert raised(r["raised"]), (r, p.stderr)
    else:
        assert r["raised"] == list(raised), (r, p.stderr)
    return r, b


def acks(conn, type):
    return [p[1] for p in conn.got if p[0] == type]


@both
def test_callback_exception_is_counted_and_the_message_acknowledged(runtime, shell):
    def script(conn):
        connack(conn)
        p = conn.expect(mq.PUBLISH)  # connect() has returned
        conn.send((mq.PUBACK, p[6]))
        conn.send((mq.PUBLISH, b"cmd", b"boom", 1, False, False, 1))
        conn.expect(mq.PUBACK)
        conn.send((mq.PUBLISH, b"cmd", b"ok", 1, False, False, 2))
        conn.expect(mq.PUBACK)
        p = conn.expect(mq.PUBLISH)
        conn.send((mq.PUBACK, p[6]))
        conn.expect(mq.DISCONNECT)

    # Blocking: raised out of wait_msg(), as umqtt.simple does; asyncio: printed.
    r, b = play(runtime, shell, "callback_error", script,
                raised=["ValueError"] if shell == "blocking" else [])
    assert acks(b.conns[0], mq.PUBACK) == [1, 2]
    assert r["got"] == ["ok"] and r["callback_errors"] == 1 and r["flushed"], r
    assert r["links"] == 1, r


@both
def test_publish_from_a_callback_only_queues(runtime, shell):
    def script(conn):
        _two_inbound(conn)
        while True:  # then whatever the callback queued
            p = conn.expect(mq.PUBLISH)
            conn.send((mq.PUBACK, p[6]))
            if p[1] == b"echo":
                break
        conn.expect(mq.DISCONNECT)

    if shell == "async":
        script = _without_echo(script)
    r, b = play(runtime, shell, "publish_in_callback", script)
    seen = r["seen"]
    # Each callback saw its own message, unchanged, with its own flags, and
    # ran alone (depth 1): m2 was not delivered inside m1's callback.
    msgs = [x for x in seen if x[0] != "pid"]
    assert msgs == [["m1", "m1", True, 1], ["m2", "m2", True, 1]], seen
    if shell == "blocking":
        assert seen[0][0] == "pid" and seen[0][1] > 0, seen
        assert [p[1] for p in b.conns[0].got if p[0] == mq.PUBLISH] == [b"first", b"echo"]
    assert r["flushed"] and r["links"] == 1, r


def _two_inbound(conn):
    # CONNACK; the client's first publish fills its window of 1 and is
    # acknowledged only after a QoS 1 and a QoS 2 message came in and were
    # acknowledged in full.
    connack(conn)
    first = conn.expect(mq.PUBLISH)
    conn.send((mq.PUBLISH, b"in", b"m1", 1, False, False, 1), (mq.PUBLISH, b"in", b"m2", 2, True, False, 2))
    conn.expect(mq.PUBACK)
    conn.expect(mq.PUBREC)
    conn.send((mq.PUBREL, 2))
    conn.expect(mq.PUBCOMP)
    conn.send((mq.PUBACK, first[6]))


def _without_echo(script):
    # An asyncio callback cannot await publish(); the rest is the same.
    def s(conn):
        _two_inbound(conn)
        conn.expect(mq.DISCONNECT)
    return s


@both
def test_connect_after_disconnect_turns_automatic_reconnect_back_on(runtime, shell):
    def bye(conn):
        connack(conn)
        conn.expect(mq.DISCONNECT)

    def cut(conn):
        connack(conn)  # then the broker closes the link

    def stay(conn):
        connack(conn)
        conn.expect(mq.DISCONNECT)

    r, b = play(runtime, shell, "reconnect_after_disconnect", bye, cut, stay)
    assert r["links"] == 3 and r["connected"], r
    assert b.accepts == 3


@both
def test_offline_qos0_is_counted_and_flush_0_does_not_wait(runtime, shell):
    def script(conn):
        connack(conn)
        conn.expect(mq.PUBLISH)
        conn.idle(1)

    r, b = play(runtime, shell, "offline_and_flush", script)
    assert r["before"] is None and r["dropped_qos0"] == 1, r
    assert r["flushed"] is False and r["pending"] == 1, r


@both
def test_empty_client_id_with_a_persistent_session_opens_no_connection(runtime, shell):
    r, b = play(runtime, shell, "empty_id_persistent")
    assert "clean_session" in r["error"] and r["links"] == 0, r
    assert b.accepts == 0


@both
def test_unanswered_keepalive_drops_the_link_and_reconnects(runtime, shell):
    def silent(conn):
        connack(conn)
        conn.idle(6)  # reads the PINGREQs, answers none

    def stay(conn):
        connack(conn)
        conn.idle(6)

    r, b = play(runtime, shell, "keepalive_drop", silent, stay)
    assert any(p[0] == mq.PINGREQ for p in b.conns[0].got), b.conns[0].got
    assert r["links"] >= 2 and r["connected"], r
    assert "nothing from the broker" in r["last_error"], r  # 1.5 keepalives of silence


@both
def test_publish_before_connack_is_a_protocol_error_not_a_delivery(runtime, shell):
    def script(conn):
        conn.expect(mq.CONNECT)
        conn.send((mq.PUBLISH, b"early", b"x", 1, False, False, 1), (mq.CONNACK, False, 0))
        conn.idle(0.5)

    r, b = play(runtime, shell, "before_connack", script)
    assert r["got"] == [] and r["error"] in ("MQTTTimeout", "MQTTProtocolError"), r
    assert "before CONNACK" in r["last_error"], r
    assert acks(b.conns[0], mq.PUBACK) == []


@both
def test_a_refused_restore_is_reported_and_the_link_kept(runtime, shell):
    def first(conn):
        connack(conn)
        for _ in range(2):
            p = conn.expect(mq.SUBSCRIBE)
            conn.send((mq.SUBACK, p[1], (1,)))
        # then the link drops

    def second(conn):
        connack(conn, present=False)  # a new session: the client restores
        p = conn.expect(mq.SUBSCRIBE)
        assert [f for f, q in p[2]] == [b"cmd/a", b"cmd/b"], p
        conn.send((mq.SUBACK, p[1], (1, 0x80)))
        conn.serve()

    r, b = play(runtime, shell, "restore_refused", first, second)
    assert r["restore_refused"] == 1 and "cmd/b" in r["last_error"], r
    assert r["flushed"] and r["pid"] and r["links"] == 2, r


@both
def test_new_session_on_the_broker_forgets_held_qos2_ids(runtime, shell):
    def first(conn):
        connack(conn)
        conn.send((mq.PUBLISH, b"in", b"old", 2, False, False, 1))
        conn.expect(mq.PUBREC)  # then the link drops before PUBREL

    def second(conn):
        connack(conn, present=False)
        conn.send((mq.PUBLISH, b"in", b"new", 2, False, False, 1))
        conn.expect(mq.PUBREC)
        conn.send((mq.PUBREL, 1))
        conn.serve()

    r, b = play(runtime, shell, "qos2_new_session", first, second)
    assert r["got"] == ["old", "new"], r


@both
def test_oversize_messages_are_acknowledged_whatever_the_read_sizes(runtime, shell):
    import time

    def trickle(conn, p):
        data = bytearray(600)
        n = encode(data, p)
        for i in range(0, n, 3):
            conn.send_raw(bytes(data[i:i + 3]))
            time.sleep(0.002)

    def script(conn):
        connack(conn)
        trickle(conn, (mq.PUBLISH, b"t/" + b"x" * 150, b"z" * 300, 2, False, False, 5))
        conn.expect(mq.PUBREC)
        conn.send((mq.PUBREL, 5))
        conn.expect(mq.PUBCOMP)
        trickle(conn, (mq.PUBLISH, b"t", b"z" * 400, 1, False, False, 6))
        conn.expect(mq.PUBACK)
        conn.send((mq.PUBLISH, b"t", b"fits", 1, False, False, 7))
        conn.serve()

    r, b = play(runtime, shell, "oversize", script)
    assert r["got"] == ["fits"] and r["dropped"] == 2, r
    assert acks(b.conns[0], mq.PUBACK) == [6, 7] and acks(b.conns[0], mq.PUBREC) == [5]


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_connect_restarts_a_background_task_that_ended(runtime):
    def stay(conn):
        connack(conn)
        conn.expect(mq.DISCONNECT)

    def hold(conn):
        connack(conn)
        conn.idle(10)  # until the client's second connect() closes it

    def cut(conn):
        connack(conn)  # then closes: only a running task reconnects

    r, b = play(runtime, "async", "task_restart", hold, cut, stay)
    assert r["ended"] and r["links"] == 3 and r["connected"], r


@both
def test_a_refusal_is_answered_at_once_not_after_the_timeout(runtime, shell):
    def refuse(conn):
        conn.expect(mq.CONNECT)
        conn.send((mq.CONNACK, False, 5))

    r, b = play(runtime, shell, "refused_at_once", refuse)
    assert r["error"] == "ConnectError" and r["code"] == 5, r
    assert "not authorized" in r["words"], r


@both
def test_a_broker_closing_instead_of_answering_connect_is_named(runtime, shell):
    def close(conn):
        conn.expect(mq.CONNECT)  # then the link closes

    r, b = play(runtime, shell, "closed_at_connect", close)
    assert r["error"] == "LinkDown", r
    assert "closed the link instead of answering CONNECT" in r["words"] and "MQIsdp" in r["words"], r


@both
def test_a_second_connect_while_connected_makes_a_working_link(runtime, shell):
    def first(conn):
        connack(conn)
        conn.idle(2)

    def second(conn):
        connack(conn)
        conn.serve()

    r, b = play(runtime, shell, "connect_twice", first, second)
    assert r["links"] == 2 and r["flushed"] and r["connected"], r
    assert [p[0] for p in b.conns[1].got if p[0] == mq.PUBLISH] == [mq.PUBLISH], b.conns[1].got


# -- every public call, on both shells -------------------------------------------


@both
def test_unsubscribe_waits_for_unsuback_and_the_filter_is_not_restored(runtime, shell):
    def first(conn):
        connack(conn)
        for q in (1, 1):
            p = conn.expect(mq.SUBSCRIBE)
            conn.send((mq.SUBACK, p[1], (q,)))
        p = conn.expect(mq.UNSUBSCRIBE)
        assert list(p[2]) == [b"cmd/a"], p
        # Before the UNSUBACK: handed out by the time unsubscribe() returns.
        conn.send((mq.PUBLISH, b"cmd/b", b"before-unsuback", 0, False, False, 0), (mq.UNSUBACK, p[1]))
        p = conn.expect(mq.PUBLISH)  # sent after unsubscribe() returned
        assert p[2] == b"unsubscribed", p
        conn.send((mq.PUBACK, p[6]))
        # then the link drops

    def second(conn):
        connack(conn, present=False)  # a new session: the client restores
        p = conn.expect(mq.SUBSCRIBE)
        assert [f for f, q in p[2]] == [b"cmd/b"], p
        conn.send((mq.SUBACK, p[1], (1,)))
        conn.serve()

    r, b = play(runtime, shell, "unsubscribe", first, second)
    assert r["ret"] is None and r["at_return"] == ["before-unsuback"], r
    assert r["flushed"] and r["pid"] and r["links"] == 2, r
    assert [p[0] for p in b.conns[1].got].count(mq.SUBSCRIBE) == 1, b.conns[1].got


@both
def test_ping_sends_pingreq_at_once_and_keeps_the_link(runtime, shell):
    def script(conn):
        connack(conn)
        conn.expect(mq.PINGREQ)  # keepalive is off: ping() sent it
        conn.send((mq.PINGRESP,), (mq.PUBLISH, b"cmd", b"pong-seen", 0, False, False, 0))
        p = conn.expect(mq.PUBLISH)
        conn.send((mq.PUBACK, p[6]))
        conn.expect(mq.DISCONNECT)

    r, b = play(runtime, shell, "ping", script)
    assert [p[0] for p in b.conns[0].got] == [mq.CONNECT, mq.PINGREQ, mq.PUBLISH, mq.DISCONNECT], \
        b.conns[0].got
    assert r["ret"] is None and r["answered"] and r["got"] == ["pong-seen"], r
    assert r["flushed"] and r["links"] == 1 and "None" == r["last_error"], r


@both
def test_a_filters_handler_gets_its_messages_with_the_retained_flag(runtime, shell):
    def script(conn):
        connack(conn)
        p = conn.expect(mq.SUBSCRIBE)
        assert list(p[2]) == [(b"cmd/+", 1)], p
        conn.send((mq.SUBACK, p[1], (1,)))
        p = conn.expect(mq.SUBSCRIBE)
        conn.send((mq.SUBACK, p[1], (0,)))
        p = conn.expect(mq.PUBLISH)  # subscribe() returned twice: both filters registered
        conn.send((mq.PUBACK, p[6]))
        conn.send((mq.PUBLISH, b"cmd/x", b"c1", 1, True, False, 9),
                  (mq.PUBLISH, b"other", b"o1", 0, False, False, 0),
                  (mq.PUBLISH, b"cmd/y", b"c2", 0, False, False, 0))
        conn.expect(mq.PUBACK)
        conn.expect(mq.DISCONNECT)

    r, b = play(runtime, shell, "handler", script)
    assert r["granted"] == [1, 0], r
    assert r["by_handler"] == [["cmd/x", "c1", True], ["cmd/y", "c2", False]], r
    assert r["by_callback"] == [["cmd/x", "c1"], ["other", "o1"], ["cmd/y", "c2"]], r
    assert r["flushed"] and r["links"] == 1, r


@both
def test_set_delivered_reports_each_pid_once_the_broker_acknowledged_it(runtime, shell):
    def script(conn):
        connack(conn)
        p1 = conn.expect(mq.PUBLISH)
        p2 = conn.expect(mq.PUBLISH)
        assert (p1[3], p2[3]) == (1, 2), (p1, p2)
        conn.send((mq.PUBLISH, b"in", b"before-puback", 0, False, False, 0), (mq.PUBACK, p1[6]),
                  (mq.PUBREC, p2[6]))
        conn.expect(mq.PUBREL)
        conn.send((mq.PUBLISH, b"in", b"before-pubcomp", 0, False, False, 0), (mq.PUBCOMP, p2[6]))
        conn.expect(mq.DISCONNECT)

    r, b = play(runtime, shell, "delivered", script)
    p1, p2 = r["pids"]
    assert [p[6] for p in b.conns[0].got if p[0] == mq.PUBLISH] == [p1, p2], b.conns[0].got
    assert r["done"] == [p1, p2], r
    # QoS 1 not before its PUBACK; QoS 2 not at PUBREC, only at PUBCOMP.
    assert r["seen"] == [["before-puback", []], ["before-pubcomp", [p1]]], r
    assert r["flushed"] and r["links"] == 1, r


@both
def test_an_unexpected_exception_is_counted_and_the_client_works_on(runtime, shell):
    def until_closed(conn):
        connack(conn)
        conn.idle(10)  # until the client drops the link after the fault

    def acked(conn):
        connack(conn)
        p = conn.expect(mq.PUBLISH)
        conn.send((mq.PUBACK, p[6]))
        if shell == "async":  # the outbox fails on that PUBACK: the link goes
            conn.idle(10)
            return
        conn.expect(mq.DISCONNECT)

    def again(conn):
        connack(conn)
        p = conn.expect(mq.PUBLISH)
        assert p[2] == b"after-fault" and p[5], p  # sent again, flagged DUP
        conn.send((mq.PUBACK, p[6]))
        conn.expect(mq.DISCONNECT)

    scripts = (until_closed, acked, again) if shell == "async" else (acked,)
    r, b = play(runtime, shell, "fault", *scripts,
                raised=["RuntimeError"] if shell == "blocking" else [])
    assert r["armed"] is None and r["flushed"] and r["pid"] and r["connected"], r
    if shell == "async":
        assert "outbox failed unexpectedly in tick" in r["last_error"], r
        assert r["links"] == 2, r
        assert r["faults"] == 2 and "unexpectedly in done" in r["last_error_end"], r
        assert r["links_end"] == 3 and b.accepts == 3, r
    else:
        assert r["links_end"] == 1 and b.accepts == 1, r
    assert r["callback_errors"] == 0, r


@both
def test_without_reconnect_the_client_stays_offline_until_connect(runtime, shell):
    def cut(conn):
        connack(conn)  # then the broker closes the link

    def again(conn):
        connack(conn)
        p = conn.expect(mq.PUBLISH)  # published while offline, kept
        assert p[2] == b"kept", p
        conn.send((mq.PUBACK, p[6]))
        conn.expect(mq.DISCONNECT)

    # Each wait_msg() of the blocking client after the loss raises LinkDown
    # (no link can come), rather than spinning: ten of them, and the one that
    # saw the loss unless its 20 ms ran out first.
    r, b = play(runtime, shell, "no_reconnect", cut, again,
                raised=lambda x: x == [] if shell == "async" else x in (["LinkDown"] * 10, ["LinkDown"] * 11))
    assert r["before"] == {"links": 1, "attempts": 1, "connected": False}, r
    assert r["pid"] and r["flushed"] and r["links"] == 2 and r["attempts"] == 2, r
    assert b.accepts == 2


@both
def test_the_pull_api_hands_out_messages_and_acknowledges_each_as_taken(runtime, shell):
    def script(conn):
        connack(conn)
        p = conn.expect(mq.PUBLISH)
        conn.send((mq.PUBACK, p[6]))
        conn.send((mq.PUBLISH, b"cmd/a", b"one", 1, False, False, 7),
                  (mq.PUBLISH, b"cmd/b", b"two", 2, False, False, 8),
                  (mq.PUBLISH, b"cmd/c", b"three", 0, True, False, 0))
        conn.expect(mq.PUBLISH)  # "waited"
        conn.expect(mq.PUBREC)
        conn.send((mq.PUBREL, 8))
        conn.expect(mq.PUBCOMP)
        conn.expect(mq.DISCONNECT)

    r, b = play(runtime, shell, "pull", script)
    assert r["got"] == [["cmd/a", "one", False, 1], ["cmd/b", "two", False, 2],
                        ["cmd/c", "three", True, 0]], r
    assert r["none"] is None and r["by_callback"] == [] and r["flushed"], r
    # Nothing acknowledged before the client pulled (it said "waited" while
    # holding them), each acknowledgement as its message was taken.
    def brief(p):
        return p[0], p[2] if p[0] == mq.PUBLISH else p[1] if len(p) > 1 and p[0] != mq.CONNECT else None

    seen = [brief(p) for p in b.conns[0].got]
    # PUBCOMP answers the broker's PUBREL, whenever that comes after PUBREC.
    assert seen.index((mq.PUBCOMP, 8)) > seen.index((mq.PUBREC, 8)), seen
    seen.remove((mq.PUBCOMP, 8))
    assert seen == [(mq.CONNECT, None), (mq.PUBLISH, b"ready"), (mq.PUBLISH, b"waited"), (mq.PUBACK, 7),
                    (mq.PUBREC, 8), (mq.PUBLISH, b"pulled"), (mq.DISCONNECT, None)], seen


@both
def test_a_pulled_qos2_message_whose_link_was_lost_is_handed_out_once(runtime, shell):
    def first(conn):
        connack(conn)
        conn.send((mq.PUBLISH, b"cmd/a", b"once", 2, False, False, 5))
        conn.expect(mq.PUBLISH)  # "holding": then the link goes

    def second(conn):
        connack(conn, present=True)
        conn.send((mq.PUBLISH, b"cmd/a", b"once", 2, False, True, 5))  # DUP: sent again
        conn.expect(mq.PUBREC)
        conn.send((mq.PUBREL, 5))
        conn.expect(mq.PUBCOMP)
        conn.expect(mq.DISCONNECT)

    r, b = play(runtime, shell, "pull_lost", first, second)
    assert r["got"] == [["once", 2]] and r["flushed"] and r["links"] == 2, r
    assert acks(b.conns[1], mq.PUBREC) == [5] and acks(b.conns[1], mq.PUBCOMP) == [5], b.conns[1].got


# -- issue 30: timers and the shells' waits ---------------------------------------


@both
def test_the_connack_watchdog_runs_wherever_the_clock_starts(runtime, shell):
    # B5: the blocking client ran no timers before its first packet with the
    # clock in the upper half of its period; connect() then ended at its
    # backstop and left the link open.
    for start in ("zero", "half", "below", "after"):
        closed = []

        def silent(conn):
            conn.expect(mq.CONNECT)
            for _ in range(100):  # up to 10 s for the client to close the link
                if not conn._read(0.1):
                    closed.append(start)
                    break

        r, b = play(runtime, shell, "no_connack", silent, args=(start,))
        assert r["error"] == "MQTTTimeout" and "CONNACK" in r["words"], (start, r)
        assert "MQTTTimeout" in r["watchdog"], (start, r)  # the engine's watchdog, not the backstop
        # Blocking: OFFLINE, a reconnect follows; asyncio: CLOSED, connect() failing stops its task.
        assert not r["open"] and r["state"] == (1 if shell == "blocking" else 0) and r["links"] == 1, (start, r)
        assert closed, (start, "the client never closed the link")


@both
def test_a_burst_of_qos1_messages_is_delivered_whole(runtime, shell):
    # D11: the asyncio client left packets unread in its receive buffer once
    # its send buffer filled with acknowledgements (61 of 100 delivered).
    def script(conn):
        connack(conn)
        p = conn.expect(mq.SUBSCRIBE)
        conn.send((mq.SUBACK, p[1], (1,)))
        conn.send(*[(mq.PUBLISH, b"t", b"%02d" % i, 1, False, False, i + 1) for i in range(100)])
        for _ in range(100):
            conn.expect(mq.PUBACK)
        conn.serve()

    for keepalive in ("0", "60"):
        r, b = play(runtime, shell, "burst", script, args=(keepalive,))
        assert r["got"] == list(range(100)), (keepalive, len(r["got"]), r["got"][-3:])
        assert sorted(acks(b.conns[0], mq.PUBACK)) == list(range(1, 101)), keepalive


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_unsubscribe_while_the_subscribe_is_in_flight_answers_the_subscribe(runtime):
    # Suspected in issue 30, and real: the subscribe() waiter hung until its timeout.
    def script(conn):
        connack(conn)
        p = conn.expect(mq.SUBSCRIBE)
        u = conn.expect(mq.UNSUBSCRIBE)
        conn.send((mq.SUBACK, p[1], (1,)), (mq.UNSUBACK, u[1]))
        conn.serve()

    r, b = play(runtime, "async", "unsubscribe_in_flight", script)
    assert r["error"] is None and r["ret"] is None and r["filters"] == 0, r
    assert r["connected"] and r["last_error"] == "None", r

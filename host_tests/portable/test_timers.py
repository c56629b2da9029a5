# Timers wherever the clock starts (issue 30, B5-B7): the engine and the
# blocking shell with the clock at 0, at 2**29 (the upper half of a board's
# 30-bit period) and at the upper half of this port's, just below the wrap
# and just after it; the waits of the blocking client, counted; and what
# every documented counter reads before anything happened (D14). The
# asyncio shell's side is in test_contract.py (real sockets).
import consts as mq
from holdfast.session import Session
from time import ticks_add  # CPython: holdfast puts it there
from holdfast.errors import MQTTError, MQTTTimeout
from holdfast import client as hc
from fakebroker import session, sent, feed, wire
from support import raises
from rig import Rig, Dial, CONNACK

PERIOD = ticks_add(0, -1) + 1  # 2**30 on boards and CPython, 2**62 on the 64-bit unix port
STARTS = (0, 1 << 29, PERIOD >> 1, PERIOD - 5, PERIOD - 1, 3)
_OFFLINE = 1
_CONNECTING = 2


def types(out):
    return [p[0] for p in out]


def test_the_engine_runs_its_timers_wherever_the_clock_starts():
    for t0 in STARTS:
        s = Session(b"dev", connack_ms=100)
        s.start(t0)
        sent(s, t0)
        s.tick(ticks_add(t0, 99))
        assert s.state == _CONNECTING, t0
        e = raises(MQTTTimeout, s.tick, ticks_add(t0, 100))
        assert "CONNACK" in str(e), (t0, str(e))
        # Connected: retry_ms (B6: the send time kept at the port's width,
        # past 2**31 on the 64-bit unix port), then the keepalive.
        s = session(now=t0, keepalive=1, retry_ms=300)
        s.publish(b"t", b"m", 1, False, t0)
        assert types(sent(s, t0)) == [mq.PUBLISH], t0
        s.tick(ticks_add(t0, 20))
        assert sent(s) == [], (t0, "re-sent after 20 ms")
        s.tick(ticks_add(t0, 300))
        out = sent(s, ticks_add(t0, 300))
        assert types(out) == [mq.PUBLISH] and out[0][5], (t0, out)  # DUP
        s.tick(ticks_add(t0, 1000))
        assert mq.PINGREQ in types(sent(s, ticks_add(t0, 1000))), t0


def test_the_blocking_client_runs_the_connack_watchdog_wherever_the_clock_starts():
    # B5: with _ticked = 0 and the clock in the upper half of its period,
    # _pump() ran no timer before the first packet: connect() ended at its
    # backstop, the link left open.
    for t0 in STARTS:
        with Rig([]) as rig:  # the broker never answers
            rig.now = t0
            cl = rig.client(timeout_ms=200)
            e = raises(MQTTTimeout, cl.connect)
            assert "CONNACK" in str(e), (t0, str(e))
            assert cl.session.error is e, (t0, "not the engine's watchdog")
            assert rig.socks[0].closed and cl.sock is None, t0
            assert cl.session.state == _OFFLINE, (t0, cl.session.state)  # a reconnect follows


def test_the_blocking_client_pings_wherever_the_clock_starts():
    for t0 in STARTS:
        with Rig([CONNACK]) as rig:
            rig.now = t0
            cl = rig.client(keepalive=1)
            cl.connect()
            rig.socks[0].take()
            rig.sleep(1000)
            cl.check_msg()
            assert types(rig.socks[0].take()) == [mq.PINGREQ], t0


def test_connects_backstop_closes_the_link():
    # B5: the bound connect() waits (twice connack_ms) raised with the link
    # open and the session CONNECTING. Here the watchdog is held back.
    with Rig([]) as rig:
        cl = rig.client(timeout_ms=200)
        cl.session.tick = lambda now: None
        e = raises(MQTTTimeout, cl.connect)
        assert "CONNACK" in str(e), str(e)
        assert rig.socks[0].closed and cl.sock is None
        assert cl.session.state == _OFFLINE and cl.last_error is e, cl.session.state
        assert cl.backoff, "no reconnect scheduled"


def test_wait_msg_waits_on_a_pending_reconnects_socket():
    # B7: while a reconnect's TCP connect was pending, wait_msg() slept 1 ms
    # at a time (about 1000 wakeups a second). Here every wait on a socket
    # runs its full time (the connect stays pending), and the wakeups are
    # counted.
    with Rig([CONNACK]) as rig:
        cl = rig.client(backoff_ms=(100, 100))
        cl.connect()
        rig.socks[0].eof = True  # the link ends; no connect succeeds again
        Dial.pending = 1 << 30
        woke = []

        def io_wait(c, ms, out=False):
            woke.append(("socket", c.sock is None))
            rig.sleep(ms)
            return False

        def sleep(ms):
            woke.append(("sleep", ms))
            rig.sleep(ms)

        hc.MQTTClient._io_wait = io_wait  # Rig puts both back
        hc.sleep_ms = sleep
        cl.wait_msg(5000)
        assert cl.attempts >= 3, cl.attempts  # reconnects were tried, and pending
        assert ("socket", True) in woke, woke  # waited on the pending connect
        assert len(woke) < 40, (len(woke), woke[:8])


def test_wait_msg_in_a_callback_raises_mqtterror():
    # D12: wait_msg() from a callback never returned (nothing is read while
    # a callback runs); the README says calls that wait raise MQTTError there.
    msg = wire((mq.PUBLISH, b"cmd", b"go", 1, False, False, 4))
    with Rig([CONNACK, msg]) as rig:
        cl = rig.client()
        cl.connect()
        said = []

        def cb(t, m):
            for ms in (100, None):
                try:
                    cl.wait_msg(ms)
                except MQTTError as e:
                    said.append(str(e))
                    continue
                raise AssertionError("wait_msg(%r) returned inside a callback" % ms)

        cl.set_callback(cb)
        cl.check_msg()
        assert len(said) == 2 and "callback" in said[0], said
        assert cl.callback_errors == 0
        assert (mq.PUBACK, 4) in rig.socks[0].take()  # the message is still acknowledged


# Every counter the README and docs/mqtt5.md name, as a client offers it.
COUNTERS = ("overflowed", "expired", "replaced", "republished", "held_evicted", "dropped_qos0",
            "callback_errors", "restore_refused", "links", "attempts", "rejected")


def test_every_documented_counter_reads_0_before_anything_happened():
    # D14: at MQTT 5, client.rejected raised AttributeError until the first
    # refusal.
    from holdfast.aclient import AsyncClient
    for level in (4, 5):
        for make in (hc.MQTTClient, AsyncClient):
            c = make(b"dev", "broker.test", level=level)
            got = [(n, getattr(c, n)) for n in COUNTERS]
            assert got == [(n, 0) for n in COUNTERS], (level, make, got)
            if make is AsyncClient:
                assert c.faults == 0, c.faults


# The WebAssembly port's asyncio has no run() (the JavaScript event loop
# runs it): there the next test is not defined.
import asyncio  # noqa: E402


def test_async_disconnect_waits_until_the_disconnect_is_written():
    # Issue 30 (suspected, real): AsyncClient.disconnect() wrote what the
    # socket took at once and closed it: with a full socket buffer the
    # DISCONNECT was never sent, and the broker would publish the will.
    from holdfast.aclient import AsyncClient
    from fakebroker import ScriptedSocket, parse

    class Full(ScriptedSocket):
        stalls = 3  # writes that take nothing, as a full socket buffer does

        def write(self, buf, off=0, n=None):
            if self.stalls:
                self.stalls -= 1
                return 0
            return ScriptedSocket.write(self, buf, off, n)

    c = AsyncClient(b"dev", "broker.test", keepalive=0, timeout_ms=5000)
    c.session = session(now=0)
    c.sock = sock = Full()
    asyncio.run(c.disconnect())
    assert parse(sock.written) == [(mq.DISCONNECT,)], sock.written
    assert sock.closed and c.sock is None and c.session.state == 0


if not hasattr(asyncio, "run"):
    del test_async_disconnect_waits_until_the_disconnect_is_written

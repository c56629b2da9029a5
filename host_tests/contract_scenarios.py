# The shell contract, written once and run on both shells (the blocking
# MQTTClient and the asyncio AsyncClient) under either runtime:
#   python|micropython host_tests/contract_scenarios.py blocking|async NAME HOST PORT [ARGS]
# Each scenario prints one JSON line of what the client saw; test_contract.py
# plays the broker's side (scripted_broker.py) and asserts both.
import sys
import json

from scenario_support import RT  # first: firmware/ on sys.path
import asyncio
from holdfast.client import MQTTClient


class Blocking:
    """The blocking client behind the awaitable surface the scenarios use."""

    def __init__(self, *a, **kw):
        self.c = MQTTClient(*a, **kw)
        # What wait_msg() raised (type names), in every scenario's result:
        # a test expects none unless it says which.
        self.raised = []

    async def connect(self, clean=True):
        return self.c.connect(clean)

    async def publish(self, *a, **kw):
        return self.c.publish(*a, **kw)

    async def subscribe(self, *a, **kw):
        return self.c.subscribe(*a, **kw)

    async def unsubscribe(self, topic):
        return self.c.unsubscribe(topic)

    async def ping(self):
        return self.c.ping()

    async def flush(self, ms=None):
        return self.c.flush(ms)

    async def disconnect(self):
        self.c.disconnect()

    async def pull(self, ms):
        return self.c.next_msg(ms)

    async def run(self, ms, until=None):
        """Lets the client work for up to ms (until() ends it sooner)."""
        for _ in range(ms // 20):
            if until and until():
                return
            try:
                self.c.wait_msg(20)
            except Exception as e:
                self.raised.append(type(e).__name__)


class Async:
    def __init__(self, *a, **kw):
        from holdfast.aclient import AsyncClient
        self.c = AsyncClient(*a, **kw)
        self.raised = []  # run() calls nothing that could raise

    async def connect(self, clean=True):
        return await self.c.connect(clean)

    async def publish(self, *a, **kw):
        return await self.c.publish(*a, **kw)

    async def subscribe(self, *a, **kw):
        return await self.c.subscribe(*a, **kw)

    async def unsubscribe(self, topic):
        return await self.c.unsubscribe(topic)

    async def ping(self):
        return await self.c.ping()

    async def flush(self, ms=None):
        return await self.c.flush(ms)

    async def disconnect(self):
        await self.c.disconnect()

    async def pull(self, ms):
        try:
            return await asyncio.wait_for(self.c.__anext__(), ms / 1000)
        except asyncio.TimeoutError:
            return None

    async def run(self, ms, until=None):
        for _ in range(ms // 20):
            if until and until():
                return
            await asyncio.sleep(0.02)


def counters(cl):
    # getattr: so the same scenarios show what an older client does
    c = cl.c
    return {"links": c.links, "dropped_qos0": getattr(c, "dropped_qos0", None),
            "callback_errors": getattr(c, "callback_errors", None),
            "restore_refused": getattr(c, "restore_refused", None), "connected": c.isconnected(),
            "last_error": repr(c.last_error), "raised": cl.raised}


async def callback_error(S, host, port):
    # The callback raises on the first message; both are acknowledged, the
    # second still delivered, and the client keeps working.
    got = []
    cl = S("dev", host, port, keepalive=0, timeout_ms=5000)

    def cb(t, m):
        if m == b"boom":
            raise ValueError("the application's own bug")
        got.append(m.decode())

    cl.c.set_callback(cb)
    await cl.connect()
    await cl.publish("hello", "up", False, 1)
    await cl.run(5000, lambda: got)
    pid = await cl.publish("after", "still-works", False, 1)
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(got=got, flushed=ok, pid=pid)
    return r


async def publish_in_callback(S, host, port):
    # views=True and a full window (1): the callback publishes QoS 1. That
    # only queues: the message under the callback does not change, the next
    # one is not delivered before the callback returns.
    seen = []
    depth = [0]
    cl = S("dev", host, port, window=1, views=True, timeout_ms=5000)
    c = cl.c

    def cb(t, m):
        depth[0] += 1
        before = (bytes(m), c.qos, c.retained, c.dup)
        if bytes(m) == b"m1":
            seen.append(["pid", c.publish("echo", "from-callback", False, 1) if S is Blocking else 0])
        seen.append([before[0].decode(), bytes(m).decode(), before == (bytes(m), c.qos, c.retained, c.dup),
                     depth[0]])
        depth[0] -= 1

    c.set_callback(cb)
    await cl.connect()
    await cl.publish("first", "fills-the-window", False, 1)
    await cl.run(5000, lambda: len([x for x in seen if x[0] != "pid"]) >= 2)
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(seen=seen, flushed=ok)
    return r


async def reconnect_after_disconnect(S, host, port):
    # disconnect() then connect(): the broker then closes the link, and the
    # client reconnects by itself.
    cl = S("dev", host, port, timeout_ms=5000, backoff_ms=(100, 200))
    await cl.connect()
    await cl.disconnect()
    await cl.connect()
    await cl.run(5000, lambda: cl.c.links >= 3 and cl.c.isconnected())
    r = counters(cl)
    await cl.disconnect()
    return r


async def offline_and_flush(S, host, port):
    # QoS 0 while offline is dropped and counted; flush(0) does not wait for
    # the unacknowledged QoS 1 message (timeout_ms is 10 minutes).
    cl = S("dev", host, port, timeout_ms=600000)
    before = await cl.publish("t", "offline", False, 0)
    await cl.connect()
    await cl.publish("t", "never-acked", False, 1)
    flushed = await cl.flush(0)
    pending = cl.c.pending()
    r = counters(cl)
    r.update(before=before, flushed=flushed, pending=pending)
    return r


async def empty_id_persistent(S, host, port):
    # An empty client id with clean_session=False is refused before any
    # connection is opened.
    cl = S("", host, port)
    try:
        await cl.connect(False)
        err = None
    except ValueError as e:
        err = str(e)
    r = counters(cl)
    r.update(error=err)
    return r


async def keepalive_drop(S, host, port):
    # The broker stops answering: the PINGREQ goes unanswered, the client
    # finds the link dead and reconnects.
    cl = S("dev", host, port, keepalive=1, timeout_ms=5000, backoff_ms=(100, 200))
    await cl.connect()
    await cl.run(8000, lambda: cl.c.links >= 2 and cl.c.isconnected())
    r = counters(cl)
    await cl.disconnect()
    return r


async def before_connack(S, host, port):
    # A PUBLISH before CONNACK is a protocol error: not delivered, not acknowledged.
    got = []
    cl = S("dev", host, port, timeout_ms=2000, backoff_ms=(5000, 5000))
    cl.c.set_callback(lambda t, m: got.append(m.decode()))
    try:
        await cl.connect()
        err = None
    except Exception as e:
        err = type(e).__name__
    r = counters(cl)
    r.update(got=got, error=err)
    if S is Async:
        await cl.disconnect()
    return r


async def restore_refused(S, host, port):
    # After a new session the broker refuses one restored filter: reported,
    # and the link stays up for publishing.
    cl = S("dev", host, port, timeout_ms=5000, backoff_ms=(100, 200))
    await cl.connect()
    await cl.subscribe("cmd/a", 1)
    await cl.subscribe("cmd/b", 1)
    await cl.run(5000, lambda: cl.c.links >= 2 and cl.c.restore_refused)
    pid = await cl.publish("up", "still-works", False, 1)
    ok = await cl.flush(5000)
    r = counters(cl)
    r.update(flushed=ok, pid=pid)
    await cl.disconnect()
    return r


async def qos2_new_session(S, host, port):
    # PUBREC sent, link lost before PUBREL; the broker's new session gives
    # id 1 to a new message: delivered.
    got = []
    cl = S("dev", host, port, timeout_ms=5000, backoff_ms=(100, 200))
    cl.c.set_callback(lambda t, m: got.append(m.decode()))
    await cl.connect()
    await cl.run(5000, lambda: len(got) >= 2)
    r = counters(cl)
    r.update(got=got)
    await cl.disconnect()
    return r


async def oversize(S, host, port):
    # Messages larger than the 128-byte buffer, arriving a few bytes at a
    # time: skipped, counted, and acknowledged, so the broker does not send
    # them again.
    cl = S("dev", host, port, size=128, timeout_ms=5000)
    got = []
    cl.c.set_callback(lambda t, m: got.append(m.decode()))
    await cl.connect()
    await cl.run(5000, lambda: got)
    r = counters(cl)
    r.update(got=got, dropped=cl.c.session.dropped)
    await cl.disconnect()
    return r


async def task_restart(S, host, port):
    # asyncio only: a background task that ended is started again by connect().
    cl = S("dev", host, port, timeout_ms=5000, backoff_ms=(100, 200))
    await cl.connect()
    task = cl.c.task
    task.cancel()
    try:
        await task  # until it has ended
    except asyncio.CancelledError:
        pass
    ended = task.done()
    await cl.connect()
    await cl.run(5000, lambda: cl.c.links >= 3 and cl.c.isconnected())
    r = counters(cl)
    r.update(ended=ended)
    await cl.disconnect()
    return r


async def refused_at_once(S, host, port):
    # Defect 18: the asyncio client answered a refusal only after timeout_ms.
    # With ten minutes of timeout, a client that waits it out never prints.
    cl = S("dev", host, port, timeout_ms=600000)
    try:
        await cl.connect()
        r = {"error": None}
    except Exception as e:
        r = {"error": type(e).__name__, "code": getattr(e, "code", None), "words": str(e)}
    r["links"] = cl.c.links
    r["raised"] = cl.raised
    return r


async def closed_at_connect(S, host, port):
    # Defect 21: a broker that closes instead of answering CONNECT (as one
    # that does not speak MQTT 3.1 may) is named, not a CONNACK timeout.
    cl = S("dev", host, port, timeout_ms=600000, level=3)
    try:
        await cl.connect()
        return {"error": None, "raised": cl.raised}
    except Exception as e:
        return {"error": type(e).__name__, "words": str(e), "raised": cl.raised}


async def connect_twice(S, host, port):
    # Defect 17: a second connect() while connected left the asyncio reader
    # parked on the old socket, timed out, and stopped the client.
    cl = S("dev", host, port, timeout_ms=5000)
    await cl.connect()
    await cl.connect()
    pid = await cl.publish("after", "second-link", False, 1)
    ok = await cl.flush(5000)
    r = counters(cl)
    r.update(pid=pid, flushed=ok)
    await cl.disconnect()
    return r


async def unsubscribe(S, host, port):
    # Two filters, one unsubscribed. unsubscribe() returns only after the
    # UNSUBACK (the message the broker sends before it has been handed out by
    # then); after a new session only the other filter is restored.
    got = []
    cl = S("dev", host, port, timeout_ms=5000, backoff_ms=(100, 200))
    cl.c.set_callback(lambda t, m: got.append(m.decode()))
    await cl.connect()
    await cl.subscribe("cmd/a", 1)
    await cl.subscribe("cmd/b", 1)
    ret = await cl.unsubscribe("cmd/a")
    at_return = list(got)
    await cl.publish("up", "unsubscribed", False, 1)
    await cl.run(5000, lambda: cl.c.links >= 2 and cl.c.isconnected())
    pid = await cl.publish("up", "restored", False, 1)
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(ret=ret, at_return=at_return, got=got, flushed=ok, pid=pid)
    return r


async def ping(S, host, port):
    # keepalive off: the only PINGREQ is the one ping() sends, at once; the
    # broker answers and the link stays up.
    got = []
    cl = S("dev", host, port, keepalive=0, timeout_ms=5000)
    cl.c.set_callback(lambda t, m: got.append(m.decode()))
    await cl.connect()
    ret = await cl.ping()
    # Before the client does any more I/O: the broker answers only a
    # PINGREQ it has received, so the answer shows ping() wrote it.
    import select
    poll = select.poll()
    poll.register(cl.c.sock, select.POLLIN)
    answered = bool(poll.poll(5000))
    await cl.run(5000, lambda: got)  # the broker sends "pong-seen" after the PINGREQ
    pid = await cl.publish("up", "after-ping", False, 1)
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(ret=ret, answered=answered, got=got, flushed=ok, pid=pid)
    return r


async def handler(S, host, port):
    # subscribe(..., handler=h): h(topic, msg, retained) gets the messages
    # its filter matches, and only those; the client's callback gets all.
    by_handler = []
    by_callback = []
    cl = S("dev", host, port, timeout_ms=5000)
    cl.c.set_callback(lambda t, m: by_callback.append([t.decode(), m.decode()]))
    await cl.connect()
    g1 = await cl.subscribe("cmd/+", 1, handler=lambda t, m, ret: by_handler.append(
        [t.decode(), m.decode(), ret]))
    g2 = await cl.subscribe("other", 0)
    await cl.publish("up", "subscribed", False, 1)  # the broker sends the messages after this
    await cl.run(5000, lambda: len(by_callback) >= 3)
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(granted=[g1, g2], by_handler=by_handler, by_callback=by_callback, flushed=ok)
    return r


async def delivered(S, host, port):
    # set_delivered(f): f(pid) once the broker acknowledged the message:
    # QoS 1 at PUBACK, QoS 2 at PUBCOMP, not at PUBREC. The broker puts an
    # inbound message before each ack; the callback notes what f had seen.
    done = []
    seen = []
    cl = S("dev", host, port, timeout_ms=5000)
    cl.c.set_delivered(lambda pid: done.append(pid))
    cl.c.set_callback(lambda t, m: seen.append([m.decode(), list(done)]))
    await cl.connect()
    p1 = await cl.publish("up", "q1", False, 1)
    p2 = await cl.publish("up", "q2", False, 2)
    await cl.run(5000, lambda: len(done) >= 2)
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(pids=[p1, p2], done=done, seen=seen, flushed=ok)
    return r


class FaultyStore:
    """A RAM outbox that raises once in the method armed ("tick": the
    timers; "done": the broker's PUBACK being read): an unexpected exception,
    neither the link's nor a callback's, inside the client."""

    def __init__(self):
        from holdfast.memstore import MemoryStore
        self.m = MemoryStore()
        self.armed = None

    def _fail(self, where):
        if self.armed == where:
            self.armed = None
            raise RuntimeError("the outbox failed unexpectedly in " + where)

    def tick(self, now):
        self._fail("tick")
        self.m.tick(now)

    def done(self, key):
        self._fail("done")
        self.m.done(key)

    def __len__(self):
        return len(self.m)

    def __getattr__(self, name):
        return getattr(self.m, name)


async def fault(S, host, port):
    # The outbox raises. asyncio: the background task survives it, counts
    # it in faults, keeps it in last_error and drops the link (its state is
    # unknown), then reconnects; once in the timers, once in the reader.
    # Blocking: it comes out of wait_msg() to the caller (only the timers'
    # case: a failed done() leaves it an unacknowledged message on a link it
    # keeps). Either way the client then works.
    store = FaultyStore()
    cl = S("dev", host, port, outbox=store, timeout_ms=5000, backoff_ms=(100, 200))
    await cl.connect()
    store.armed = "tick"
    await cl.run(5000, lambda: not store.armed and (S is Blocking or cl.c.links >= 2)
                 and cl.c.isconnected())
    r = counters(cl)
    if S is Async:
        store.armed = "done"
    pid = await cl.publish("up", "after-fault", False, 1)
    ok = await cl.flush(5000)
    r.update(faults=getattr(cl.c, "faults", None), armed=store.armed, flushed=ok, pid=pid,
             links_end=cl.c.links, last_error_end=repr(cl.c.last_error))
    await cl.disconnect()
    return r


async def no_reconnect(S, host, port):
    # reconnect=False: the broker closes the link and the client stays
    # offline, though a reconnect is due (backoff_ms=(10, 20)) and it gets
    # ten wait_msg(20) calls, each 20 ms by its own deadline, to make one.
    # QoS 1 published meanwhile is kept and goes out after connect().
    cl = S("dev", host, port, reconnect=False, timeout_ms=5000, backoff_ms=(10, 20))
    await cl.connect()
    await cl.run(5000, lambda: not cl.c.isconnected())
    await cl.run(200)
    before = {"links": cl.c.links, "attempts": cl.c.attempts, "connected": cl.c.isconnected()}
    pid = await cl.publish("up", "kept", False, 1)
    await cl.connect()
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(before=before, pid=pid, flushed=ok, attempts=cl.c.attempts)
    return r


async def pull(S, host, port):
    # The pull API: messages() first, then the client's next_msg() or async
    # iterator hands out (topic, msg, retained, qos). A message waits
    # unacknowledged until it is taken: the client says "waited" while it
    # holds one, and only then pulls; the callback is never called.
    by_callback = []
    cl = S("dev", host, port, timeout_ms=5000)
    cl.c.set_callback(lambda t, m: by_callback.append(m))
    cl.c.messages()
    await cl.connect()
    await cl.publish("up", "ready", False, 1)  # the broker sends three messages after its PUBACK
    await cl.run(300)
    await cl.publish("mark", "waited", False, 0)
    got = []
    for _ in range(3):
        m = await cl.pull(5000)
        got.append(m and [m[0].decode(), m[1].decode(), m[2], m[3]])
    await cl.publish("mark", "pulled", False, 0)
    none = await cl.pull(100)  # nothing more came
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(got=got, none=none, by_callback=by_callback, flushed=ok)
    return r


async def pull_lost(S, host, port):
    # The broker closes the link while a QoS 2 message waits to be pulled.
    # Nothing is read while it waits, so it is handed out (its id held) and
    # the loss found after; the broker's copy on the next link is answered,
    # not handed out again.
    cl = S("dev", host, port, timeout_ms=5000, backoff_ms=(50, 100))
    cl.c.messages()
    await cl.connect(False)
    await cl.run(300)  # the message arrives and is held
    await cl.publish("mark", "holding", False, 0)  # the broker closes the link on this
    got = []
    for _ in range(40):
        m = await cl.pull(250)
        if m is not None:
            got.append([m[1].decode(), m[3]])
        elif cl.c.links >= 2 and cl.c.isconnected() and cl.c.pending() == 0:
            break
    ok = await cl.flush(5000)
    await cl.disconnect()
    r = counters(cl)
    r.update(got=got, flushed=ok)
    return r


def clock_from(start):
    """Puts a clock that reads start now (0, "half": the start of the upper
    half of the port's tick period, "below": 150 ms before the wrap,
    "after": 3 ms past it) in place of the clients' ticks_ms; returns it."""
    from time import ticks_ms, ticks_add, ticks_diff
    import holdfast.shell as hf
    import holdfast.client as hc
    import holdfast.aclient as ha
    period = ticks_add(0, -1) + 1  # 2**30 on boards and CPython, 2**62 on the 64-bit unix port
    at = {"zero": 0, "half": period >> 1, "below": period - 150, "after": 3}[start]
    off = ticks_diff(at, ticks_ms())

    def clock():
        return ticks_add(ticks_ms(), off)

    hf.ticks_ms = hc.ticks_ms = ha.ticks_ms = clock
    return clock


async def no_connack(S, host, port, start):
    # Issue 30, B5: a broker that never answers CONNECT, the clock started
    # anywhere in its period: the engine's CONNACK watchdog ends connect()
    # (the session's error is the watchdog's) and the link is closed.
    clock_from(start)
    cl = S("dev", host, port, timeout_ms=300, backoff_ms=(60000, 60000))
    try:
        await cl.connect()
        r = {"error": None}
    except Exception as e:
        r = {"error": type(e).__name__, "words": str(e)}
    c = cl.c
    r.update(open=c.sock is not None, watchdog=repr(c.session.error), state=c.session.state,
             links=c.links, raised=cl.raised)
    return r


async def burst(S, host, port, keepalive):
    # Issue 30, D11: 100 QoS 1 messages in one write, more than the send
    # buffer holds acknowledgements for at once; the broker sends nothing
    # else (with keepalive=0 not even a PINGRESP).
    got = []
    cl = S("dev", host, port, keepalive=int(keepalive), timeout_ms=5000)
    cl.c.set_callback(lambda t, m: got.append(int(m)))
    await cl.connect()
    await cl.subscribe("t", 1)
    await cl.run(10000, lambda: len(got) >= 100)
    r = counters(cl)
    r.update(got=got)
    await cl.disconnect()
    return r


async def unsubscribe_in_flight(S, host, port):
    # Issue 30 (suspected, real): asyncio only: unsubscribe() while the same
    # filter's SUBSCRIBE awaits its SUBACK left the subscribe() waiter
    # hanging until timeout_ms (a minute here), then MQTTTimeout.
    cl = S("dev", host, port, timeout_ms=60000)
    await cl.connect()
    sub = asyncio.create_task(cl.subscribe("cmd/a", 1))
    await cl.run(5000, lambda: cl.c.session.subs is not None)
    await cl.unsubscribe("cmd/a")
    try:
        ret = await asyncio.wait_for(sub, 10)
        err = None
    except Exception as e:
        ret, err = None, type(e).__name__
    r = counters(cl)
    r.update(ret=ret, error=err, filters=len(cl.c.session.subs.list))
    await cl.disconnect()
    return r


def main():
    shell, name, host, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    S = Blocking if shell == "blocking" else Async
    result = asyncio.run(globals()[name](S, host, port, *sys.argv[5:]))
    result["runtime"] = RT
    print("RESULT " + json.dumps(result))


main()

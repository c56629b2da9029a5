# Client scenarios against a real broker, run as a program under either
# runtime:  python|micropython host_tests/scenarios.py NAME HOST PORT [ARG]
# Each prints one JSON line with what it observed; test_broker.py asserts.
import sys
import json

from scenario_support import RT, sleep_ms, ticks_ms, ticks_diff  # first: firmware/ on sys.path
from holdfast import MQTTClient
from holdfast.memstore import MemoryStore


def pump(clients, until, ms=5000):
    t0 = ticks_ms()
    while not until() and ticks_diff(ticks_ms(), t0) < ms:
        for c in clients:
            c.wait_msg(20)


def _restoring(c):
    # Some request of c's not acknowledged yet: an entry of subs.list not
    # granted on this session (its pid is -1 once granted), or an unsubscribe.
    subs = c.session.subs
    return any(e[3] >= 0 for e in subs.list) or len(subs.gone) > 0


def qos_matrix(host, port, tag):
    """Every publish QoS against every subscription QoS: delivered at the lower."""
    got = []
    sub = MQTTClient(tag + "-sub", host, port)
    sub.set_callback(lambda t, m: got.append([t.decode(), m.decode(), sub.session.qos]))
    sub.connect()
    for sq in (0, 1, 2):
        sub.subscribe("m/%s/s%d" % (tag, sq), sq)
    pub = MQTTClient(tag + "-pub", host, port)
    pub.connect()
    for sq in (0, 1, 2):
        for pq in (0, 1, 2):
            pub.publish("m/%s/s%d" % (tag, sq), "p%d" % pq, False, pq)
    pub.flush(5000)
    pump([sub], lambda: len(got) >= 9)
    pub.disconnect()
    sub.disconnect()
    return got


def retained(host, port, tag):
    pub = MQTTClient(tag + "-pub", host, port)
    pub.connect()
    pub.publish("r/" + tag, "last-known", True, 1)
    pub.flush(5000)
    pub.disconnect()
    got = []
    sub = MQTTClient(tag + "-sub", host, port)
    sub.set_callback(lambda t, m: got.append([m.decode(), sub.session.retained]))
    sub.connect()
    sub.subscribe("r/" + tag, 1)
    pump([sub], lambda: got)
    live = MQTTClient(tag + "-pub2", host, port)
    live.connect()
    live.publish("r/" + tag, "live", False, 1)
    live.flush(5000)
    pump([sub], lambda: len(got) >= 2)
    live.publish("r/" + tag, "", True, 1)  # clear the retained message
    live.flush(5000)
    live.disconnect()
    sub.disconnect()
    return got


def protocol_variants(host, port, tag):
    """MQTT 3.1 (MQIsdp) and an empty client id (3.1.1, clean session)."""
    got = []
    old = MQTTClient(tag + "-31", host, port, level=3)
    old.set_callback(lambda t, m: got.append(m.decode()))
    old.connect()
    old.subscribe("v/" + tag, 2)
    anon = MQTTClient("", host, port)
    anon.connect()
    anon.publish("v/" + tag, "from-anonymous", False, 2)
    anon.flush(5000)
    anon.disconnect()
    old.publish("v/" + tag, "from-3.1", False, 1)
    pump([old], lambda: len(got) >= 2)
    old.disconnect()
    return sorted(got)


def will(host, port, tag):
    """The will goes out on an abrupt close, not on a clean DISCONNECT."""
    got = []
    watch = MQTTClient(tag + "-watch", host, port)
    watch.set_callback(lambda t, m: got.append(m.decode()))
    watch.connect()
    watch.subscribe("w/" + tag, 1)
    for how in ("clean", "abrupt"):
        dev = MQTTClient(tag + "-dev-" + how, host, port, keepalive=5)
        dev.set_last_will("w/" + tag, "gone-" + how, False, 1)
        dev.connect()
        if how == "clean":
            dev.disconnect()
        else:
            dev.sock.close()  # like a power cut: no DISCONNECT
        pump([watch], lambda: False, 1500)
    watch.disconnect()
    return got


def offline_queue(host, port, tag):
    """A persistent subscriber gets what was published while it was away."""
    got = []
    sub = MQTTClient(tag + "-sub", host, port)
    sub.set_callback(lambda t, m: got.append(m.decode()))
    sub.connect(clean_session=False)
    sub.subscribe("q/" + tag, 1)
    sub.disconnect()
    pub = MQTTClient(tag + "-pub", host, port)
    pub.connect()
    for i in range(5):
        pub.publish("q/" + tag, str(i), False, 1 + i % 2)
    pub.flush(5000)
    pub.disconnect()
    sub = MQTTClient(tag + "-sub", host, port)
    sub.set_callback(lambda t, m: got.append(m.decode()))
    present = sub.connect(clean_session=False)
    pump([sub], lambda: len(got) >= 5)
    sub.disconnect()
    sub2 = MQTTClient(tag + "-sub", host, port)
    sub2.connect(clean_session=True)  # leave no session behind
    sub2.disconnect()
    return {"present": present, "got": got}


def outbox_policies(host, port, tag, d):
    """Queued offline in an 8-message file outbox that drops the oldest when
    full: an expired message, a state value replaced by a newer one, two
    messages dropped for room. A subscriber sees what is left once the link
    is up."""
    from holdfast.durable import FileStore
    got = []
    sub = MQTTClient(tag + "-sub", host, port)
    sub.set_callback(lambda t, m: got.append(m.decode()))
    sub.connect()
    sub.subscribe("p/%s/#" % tag, 1)
    pub = MQTTClient(tag + "-pub", host, port, outbox=FileStore(d, slots=8),
                      when_full="drop_oldest")
    o = "p/%s/o" % tag
    for i in range(5):
        pub.publish(o, "o%d" % i, qos=1)
    pub.publish(o, "stale", qos=1, expiry=1)
    pub.publish("p/%s/state" % tag, "s1", qos=1, latest=True)
    pub.publish("p/%s/state" % tag, "s2", qos=1, latest=True)
    pub.publish(o, "fresh", qos=1, expiry=3600)
    pub.publish(o, "o5", qos=1)
    pub.publish(o, "o6", qos=1)
    sleep_ms(2100)
    pub.check_msg()  # offline: the stale one expires here
    pending = pub.pending()
    pub.connect()
    flushed = pub.flush(5000)
    pub.publish(o, "end", qos=1)
    pump([sub, pub], lambda: "end" in got)
    pub.disconnect()
    sub.disconnect()
    return {"got": got, "pending_offline": pending, "flushed": flushed, "overflowed": pub.overflowed,
            "expired": pub.expired, "replaced": pub.replaced}


def publish_through_restart(host, port, tag, n=200):
    """Publishes n QoS 1 and 2 messages slowly; the test restarts the broker
    once it has counted n // 4 of them. The second half waits until the
    link has gone down: the restart lands while publishing, never after it.
    Reports what the outbox still held at the end."""
    n = int(n)
    # The second half may all be published offline: an outbox with room for
    # it (this is about what is lost, not about the outbox's size).
    pub = MQTTClient(tag + "-pub", host, port, keepalive=5, timeout_ms=3000,
                     backoff_ms=(200, 1000), outbox=MemoryStore(8192, n))
    pub.connect(clean_session=False)
    for i in range(n):
        if i == n // 2:
            t0 = ticks_ms()
            while pub.links < 2 and pub.isconnected() and ticks_diff(ticks_ms(), t0) < 30000:
                pub.wait_msg(20)
        pub.publish("x/" + tag, str(i), False, 1 + i % 2)
        pub.check_msg()
        sleep_ms(10)
    ok = pub.flush(30000)
    left = pub.pending()
    pub.disconnect()
    return {"flushed": ok, "pending": left, "links": pub.links}


def async_pubsub(host, port, tag):
    """The asyncio client: subscribe, publish at every QoS, receive them all."""
    import asyncio
    from holdfast.aclient import AsyncClient

    async def run():
        got = []
        c = AsyncClient(tag, host, port, keepalive=5)
        c.set_callback(lambda t, m: got.append([m.decode(), c.session.qos]))
        await c.connect()
        await c.subscribe("a/" + tag, 2)
        for q in (0, 1, 2):
            await c.publish("a/" + tag, "q%d" % q, False, q)
        flushed = await c.flush(5000)
        for _ in range(100):
            if len(got) >= 3:
                break
            await asyncio.sleep(0.02)
        await c.disconnect()
        return {"flushed": flushed, "got": got}

    return asyncio.run(run())


def async_publish_through_restart(host, port, tag, n=200):
    import asyncio
    from holdfast.aclient import AsyncClient

    async def run():
        c = AsyncClient(tag + "-pub", host, port, keepalive=5, timeout_ms=3000, backoff_ms=(200, 1000),
                        outbox=MemoryStore(8192, int(n)))  # as publish_through_restart
        await c.connect(clean_session=False)
        for i in range(int(n)):
            if i == int(n) // 2:  # as publish_through_restart
                t0 = ticks_ms()
                while c.links < 2 and c.isconnected() and ticks_diff(ticks_ms(), t0) < 30000:
                    await asyncio.sleep(0.02)
            await c.publish("x/" + tag.replace("async_", ""), str(i), False, 1 + i % 2)
            await asyncio.sleep(0.01)
        ok = await c.flush(30000)
        left = c.pending()
        await c.disconnect()
        return {"flushed": ok, "pending": left, "links": c.links}

    return asyncio.run(run())


def restore_many(host, port, tag):
    """30 filters, a 256-byte buffer: one SUBSCRIBE cannot carry them. The
    broker drops the link (another connection takes the client id) and the
    client, back with a new session, restores them in several packets."""
    got = []
    sub = MQTTClient(tag, host, port, size=256, timeout_ms=5000, backoff_ms=(100, 200))
    sub.set_callback(lambda t, m: got.append(t.decode()))
    sub.connect()
    topics = ["restore/%s/sensor-%02d/command" % (tag, i) for i in range(30)]
    for t in topics:
        sub.subscribe(t, 1)
    thief = MQTTClient(tag, host, port)  # same client id: the broker drops sub
    thief.connect()
    thief.disconnect()
    pump([sub], lambda: sub.links >= 2 and sub.isconnected() and not _restoring(sub))
    pub = MQTTClient(tag + "-pub", host, port)
    pub.connect()
    for t in topics:
        pub.publish(t, "x", False, 1)
    pub.flush(5000)
    pub.disconnect()
    pump([sub], lambda: len(got) >= 30)
    r = {"links": sub.links, "got": sorted(got) == sorted(topics), "n": len(got),
         "last_error": repr(sub.last_error)}
    sub.disconnect()
    return r


def qos2_new_session(host, port, tag):
    """The link drops between PUBREC and PUBREL (the socket closes under the
    callback); back with a clean session, mosquitto numbers the next QoS 2
    message from 1 again: it is a new message and must be delivered."""
    got = []
    sub = MQTTClient(tag, host, port, timeout_ms=5000, backoff_ms=(100, 200))

    def cb(t, m):
        got.append(m.decode())
        if len(got) == 1:
            sub.sock.close()

    sub.set_callback(cb)
    sub.connect()
    sub.subscribe("q2/" + tag, 2)
    pub = MQTTClient(tag + "-pub", host, port)
    pub.connect()
    pub.publish("q2/" + tag, "one", False, 2)
    pub.flush(5000)
    pump([sub], lambda: got and sub.links >= 2 and sub.isconnected() and not _restoring(sub))
    pub.publish("q2/" + tag, "two", False, 2)
    pub.flush(5000)
    pump([sub], lambda: len(got) >= 2)
    pub.disconnect()
    r = {"got": got, "links": sub.links, "last_error": repr(sub.last_error)}
    sub.disconnect()
    return r


def main():
    name, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tag = RT + "-" + name
    result = globals()[name](host, port, tag, *sys.argv[4:])
    print("RESULT " + json.dumps(result))


main()

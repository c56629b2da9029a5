# MQTT over WebSockets scenarios, under CPython or the MicroPython unix port:
#   python|micropython host_tests/ws_scenarios.py NAME ARGS.json
# Each prints one RESULT line of JSON; test_ws.py starts the brokers (aedes,
# amqtt, the scripted wsserver.py) and asserts.
import json
import sys

from scenario_support import sleep_ms, ticks_ms, ticks_diff, RT  # first: firmware/ on sys.path
from holdfast import MQTTClient


def named(e):
    r = {"error": type(e).__name__, "msg": str(e)}
    for k in ("reason", "status", "code"):
        v = getattr(e, k, None)
        if v is not None:
            r[k] = v
    return r


def hostile(a):
    # Each case: three QoS 1 messages accepted offline, then connect(): a
    # named error or a link; then flush() rides the reconnects (the
    # server's later connections behave) until the outbox is empty.
    out = {}
    for case in a["cases"]:
        c = MQTTClient("h-" + case, "ws://127.0.0.1:%d/%s" % (a["port"], case), keepalive=30,
                       timeout_ms=1500, backoff_ms=(50, 200), headers=a.get("headers"))
        for i in range(3):
            c.publish(b"hostile/" + case.encode(), b"%s-%d" % (case.encode(), i), False, 1)
        r = {}
        try:
            c.connect()
            r["connected"] = True
        except Exception as e:
            r.update(named(e))
        r["flushed"] = c.flush(8000)
        r["pending"] = c.pending()
        r["links"] = c.links
        if c.last_error is not None:
            r["last_error"] = named(c.last_error)
        c.disconnect()
        out[case] = r
    return out


def roundtrip(a):
    # Subscribe (QoS 2) to our own topic, publish at QoS 0, 1, 2 and receive
    # all three; take the retained message the reference client left.
    got = []
    c = MQTTClient(a["id"], a["url"], keepalive=30, ssl_params=a.get("ssl_params"), timeout_ms=5000)
    c.set_callback(lambda t, m: got.append([bytes(t).decode(), bytes(m).decode(), c.qos]))
    c.connect()
    t = a["topic"]
    c.subscribe(t.encode(), 2)
    if a.get("retained"):
        c.subscribe(a["retained"].encode(), 1)
    pids = []
    for q in (0, 1, 2):
        pids.append(c.publish(t.encode(), b"%s q%d" % (RT.encode(), q), False, q))
    big = b"B" * a.get("big", 0)
    if big:  # bigger than the 126-byte frame length: a 16-bit length field each way
        c.publish(t.encode(), big, False, 1)
    want = 3 + (1 if a.get("retained") else 0) + (1 if big else 0)
    t0 = ticks_ms()
    while len(got) < want and ticks_diff(ticks_ms(), t0) < 10000:
        c.wait_msg(200)
    flushed = c.flush(5000)
    c.disconnect()
    for g in got:
        if len(g[1]) > 40:
            g[1] = "B*%d" % len(g[1])
    return {"got": got, "flushed": flushed, "pids": pids}


def aroundtrip(a):
    import asyncio
    from holdfast import AsyncClient

    async def main():
        got = []
        c = AsyncClient(a["id"], a["url"], keepalive=30, ssl_params=a.get("ssl_params"), timeout_ms=5000)
        c.set_callback(lambda t, m: got.append([bytes(t).decode(), bytes(m).decode(), c.qos]))
        await c.connect()
        t = a["topic"]
        await c.subscribe(t.encode(), 2)
        for q in (0, 1, 2):
            await c.publish(t.encode(), b"%s async q%d" % (RT.encode(), q), False, q)
        t0 = ticks_ms()
        while len(got) < 3 and ticks_diff(ticks_ms(), t0) < 10000:
            await asyncio.sleep(0.05)
        flushed = await c.flush(5000)
        await c.disconnect()
        return {"got": got, "flushed": flushed}

    return asyncio.run(main())


def restart(a):
    # Messages at QoS 1 and 2 while the test kills and restarts the broker:
    # the outbox keeps what it accepted and sends it on the next link.
    c = MQTTClient(a["id"], a["url"], keepalive=30, ssl_params=a.get("ssl_params"), timeout_ms=3000,
                   backoff_ms=(100, 500))
    from holdfast.errors import OutboxFull
    c.connect()
    full = 0
    for i in range(a["n"]):
        while True:
            try:
                c.publish(a["topic"].encode(), b"m%d" % i, False, 1 + i % 2)
                break
            except OutboxFull:  # offline long enough to fill it: wait for the next link
                full += 1
                c.wait_msg(100)
        c.check_msg()
        sleep_ms(a["gap_ms"])
    flushed = c.flush(30000)
    r = {"flushed": flushed, "pending": c.pending(), "links": c.links, "full": full,
         "last_error": str(c.last_error)}
    c.disconnect()
    return r


def main():
    name = sys.argv[1]
    with open(sys.argv[2]) as f:
        a = json.load(f)
    r = globals()[name](a)
    print("RESULT " + json.dumps(r))


main()

# MicroPython side of `make bench` (tools/bench/client.py runs it): one figure
# per process. Usage, under the unix port, with MICROPYPATH holding this
# directory, the library under test and .frozen (for asyncio):
#
#   micropython -m bench_mp LIB TEST HOST PORT [key=value ...]
#
# LIB is an adapter module lib_<LIB> (same interface for every library, see
# lib_floor.py). TEST is one of:
#   alloc0 / alloc1   heap bytes allocated per QoS 0 publish / per acknowledged
#                     QoS 1 publish, steady state, gc disabled (warm-up first;
#                     the difference between a burst of k and one of 2k)
#   tput0 / tput1     messages per second (QoS 0: until a round trip through
#                     the broker after the last one, see sync() in
#                     lib_floor.py; QoS 1: until every message is acknowledged)
#   heap              heap held after import and after connect (gc.collect()ed)
#   modules           the modules a QoS 1 run loads (for the code size)
#   engine0 / engine1 holdfast only: microseconds per message for its sans-I/O
#                     Session alone (lib_holdfast.engine)
# Prints one line "RESULT {json}"; anything else on stdout is ignored.
import gc
import sys
import json
from time import ticks_ms, ticks_us, ticks_diff

PAYLOAD = b"holdfast-bench-payload-64-bytes:0123456789abcdefghijklmnopqrstu"
TOPIC0 = b"bench/q0"
TOPIC1 = b"bench/q1"
VTOPIC0 = b"bench/v0"  # verify=1: the runs a subscriber counts
VTOPIC1 = b"bench/v1"


def opts(argv):
    d = {}
    for a in argv:
        k, _, v = a.partition("=")
        d[k] = v
    return d


def num(o, k, default):
    return int(o[k]) if k in o else default


def result(d):
    print("RESULT " + json.dumps(d))


# -- a test's topics and settings, for both kinds of adapter -------------------

def topics(c, o):
    """(QoS 0 topic, QoS 1 topic) in the library's form, prepared; verify=1:
    the ones a subscriber counts."""
    v = "verify" in o
    t0 = c.topic(VTOPIC0 if v else TOPIC0)
    t1 = c.topic(VTOPIC1 if v else TOPIC1)
    c.prepare(t0, t1, PAYLOAD)
    return t0, t1


def runs(c, test, o, t0, t1):
    """For an alloc/tput test: (warm-up count, nmax, nmin, tmax, QoS 1?, the
    publish and drain methods, the topic)."""
    q1 = test.endswith("1")
    return (num(o, "warm", 20), num(o, "n", 1000), num(o, "nmin", 50), num(o, "tmax", 2000), q1,
            c.pub1 if q1 else c.pub0, c.drain1 if q1 else c.drain0, t1 if q1 else t0)


# -- blocking adapters --------------------------------------------------------

def burst(pub, drain, t, p, nmax, nmin, tmax):
    # Publishes until nmax messages, or tmax ms once nmin are done; then drain.
    # Returns (messages, microseconds, bytes allocated).
    a = gc.mem_alloc()
    start = ticks_ms()
    us = ticks_us()
    n = 0
    while n < nmax:
        pub(t, p)
        n += 1
        if n >= nmin and ticks_diff(ticks_ms(), start) >= tmax:
            break
    drain()
    return n, ticks_diff(ticks_us(), us), gc.mem_alloc() - a


def run_sync(m, test, host, port, o, base):
    if test == "heap":
        m.load()
        gc.collect()
        loaded = gc.mem_alloc()
        c = m.Client(host, port, o["cid"], o)
        c.connect()
        gc.collect()
        conn = gc.mem_alloc()
        c.close()
        result({"code": loaded - base, "state": conn - loaded, "total": conn - base})
        return
    m.load()
    if test.startswith("engine"):  # holdfast only: the Session without I/O
        n = num(o, "n", 20000)
        m.engine(int(test[-1]), 200, TOPIC1, PAYLOAD)  # warm-up
        result({"n": n, "us_per_msg": m.engine(int(test[-1]), n, TOPIC1, PAYLOAD)})
        return
    c = m.Client(host, port, o["cid"], o)
    c.connect()
    t0, t1 = topics(c, o)
    p = PAYLOAD
    if test == "modules":
        for _ in range(20):
            c.pub1(t1, p)
        c.drain1()
        c.close()
        result({"modules": [k for k in sys.modules]})
        return
    warm, nmax, nmin, tmax, q1, pub, drain, t = runs(c, test, o, t0, t1)
    for _ in range(warm):
        pub(t, p)
    drain()
    c.sync()
    gc.collect()
    if test.startswith("alloc"):
        # Bursts of k (sets k; its allocations are not counted: one-off
        # things such as the tuple select.poll's ipoll() allocates on its
        # first event), k, then 2k messages, each ending with drain(): the
        # last two differ by what k messages cost, without the fixed cost of
        # a burst (the final flush, the last acks).
        gc.disable()
        k, _, _ = burst(pub, drain, t, p, nmax, nmin, tmax)
        _, _, d1 = burst(pub, drain, t, p, k, k, 0)
        _, _, d2 = burst(pub, drain, t, p, 2 * k, 2 * k, 0)
        gc.enable()
        c.close()
        result({"n": k, "bytes": d2 - d1, "per_msg": (d2 - d1) / k, "fixed": 2 * d1 - d2})
        return
    n, dt, _ = burst(pub, drain, t, p, nmax, nmin, tmax)
    if not q1:  # QoS 0: done when the broker has seen them all
        us = ticks_us()
        c.sync()
        dt += ticks_diff(ticks_us(), us)
    c.close()
    result({"n": n, "us": dt, "rate": n * 1000000 / dt, "published": warm + n})


# -- asyncio adapters (coroutine methods, same names) --------------------------

async def aburst(pub, drain, t, p, nmax, nmin, tmax):
    a = gc.mem_alloc()
    start = ticks_ms()
    us = ticks_us()
    n = 0
    while n < nmax:
        await pub(t, p)
        n += 1
        if n >= nmin and ticks_diff(ticks_ms(), start) >= tmax:
            break
    await drain()
    return n, ticks_diff(ticks_us(), us), gc.mem_alloc() - a


async def run_async(m, test, host, port, o, base):
    if test == "heap":
        m.load()
        gc.collect()
        loaded = gc.mem_alloc()
        c = m.Client(host, port, o["cid"], o)
        await c.connect()
        gc.collect()
        conn = gc.mem_alloc()
        await c.close()
        result({"code": loaded - base, "state": conn - loaded, "total": conn - base})
        return
    m.load()
    c = m.Client(host, port, o["cid"], o)
    await c.connect()
    t0, t1 = topics(c, o)
    p = PAYLOAD
    if test == "modules":
        for _ in range(20):
            await c.pub1(t1, p)
        await c.drain1()
        await c.close()
        result({"modules": [k for k in sys.modules]})
        return
    warm, nmax, nmin, tmax, q1, pub, drain, t = runs(c, test, o, t0, t1)
    for _ in range(warm):
        await pub(t, p)
    await drain()
    await c.sync()
    gc.collect()
    if test.startswith("alloc"):
        gc.disable()
        k, _, _ = await aburst(pub, drain, t, p, nmax, nmin, tmax)
        _, _, d1 = await aburst(pub, drain, t, p, k, k, 0)
        _, _, d2 = await aburst(pub, drain, t, p, 2 * k, 2 * k, 0)
        gc.enable()
        await c.close()
        result({"n": k, "bytes": d2 - d1, "per_msg": (d2 - d1) / k, "fixed": 2 * d1 - d2})
        return
    n, dt, _ = await aburst(pub, drain, t, p, nmax, nmin, tmax)
    if not q1:
        us = ticks_us()
        await c.sync()
        dt += ticks_diff(ticks_us(), us)
    await c.close()
    result({"n": n, "us": dt, "rate": n * 1000000 / dt, "published": warm + n})


def main(argv):
    lib, test, host, port = argv[0], argv[1], argv[2], int(argv[3])
    o = opts(argv[4:])
    if "cid" not in o:
        o["cid"] = "bench-" + lib
    m = __import__("lib_" + lib)
    gc.collect()
    base = gc.mem_alloc()  # for "heap": before the library (and asyncio) load
    if getattr(m, "ASYNC", False):
        import asyncio
        asyncio.run(run_async(m, test, host, port, o, base))
    else:
        run_sync(m, test, host, port, o, base)


main(sys.argv[1:])

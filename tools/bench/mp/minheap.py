# The smallest-heap probe: connect and make N acknowledged QoS 1 publishes
# (default 200) with nothing else loaded. Run as .mpy under -X heapsize:
#   micropython -X heapsize=20k -m minheap LIB HOST PORT N [key=value ...]
# Prints "MINHEAP OK" at the end; a MemoryError (or any failure) does not.
import sys

P = b"holdfast-bench-payload-64-bytes:0123456789abcdefghijklmnopqrstu"


def main(a):
    m = __import__("lib_" + a[0])
    o = {}
    for kv in a[4:]:
        k, _, v = kv.partition("=")
        o[k] = v
    m.load()
    c = m.Client(a[1], int(a[2]), o.get("cid", "bench-minheap"), o)
    n = int(a[3])
    if getattr(m, "ASYNC", False):
        import asyncio
        asyncio.run(arun(c, n))
    else:
        c.connect()
        t = c.topic(b"bench/mh")
        c.prepare(t, t, P)
        for _ in range(n):
            c.pub1(t, P)
        c.drain1()
        c.close()
    print("MINHEAP OK")


async def arun(c, n):
    await c.connect()
    t = c.topic(b"bench/mh")
    c.prepare(t, t, P)
    for _ in range(n):
        await c.pub1(t, P)
    await c.drain1()
    await c.close()


main(sys.argv[1:])

# The footprint probe of `make bench` (tools/bench/footprint.py runs it), one
# configuration per process, library and probe precompiled (.mpy):
#
#   micropython [-X heapsize=N] -m footprint CONFIG HOST PORT N [dir=D]
#
# CONFIG: holdfast's pub (blocking client, QoS 0/1, RAM outbox: what a sensor
# that only reports loads), sub (+ a subscription with a callback), qos2
# (QoS 2 publishes), file (FileStore outbox in D), flash (FlashStore on a
# RAM flash of 8 x 512 B, made before the first reading), tls (ssl=True,
# the CA in file ca=F, PORT a TLS listener), async (AsyncClient); or a
# peer's adapter: umqtt_simple, mqtt_async (lib_*.py).
# Prints "RESULT {json}": code (heap taken by the import), total (heap held
# after import + connect [+ subscribe]), mpy (bytes of the .mpy files loaded);
# then N acknowledged publishes and "FOOTPRINT OK". gc.mem_alloc() after
# gc.collect(), from before the import.
import gc
import os
import sys
# Before the first reading: on the WebAssembly port these are the bench's
# in-memory stand-ins (tools/runtimes/wasm), which must not count as the library's.
import socket  # noqa: F401
import select  # noqa: F401
try:
    import usocket  # noqa: F401  (umqtt.simple's name for it)
except ImportError:
    pass

P = b"holdfast-bench-payload-64-bytes:0123456789abcdefghijklmnopqrstu"
T = b"bench/fp"


def used():
    gc.collect()
    return gc.mem_alloc()


def mpy_bytes(before):
    n = 0
    for name, m in sys.modules.items():
        f = getattr(m, "__file__", "")
        if name not in before and f.endswith(".mpy"):
            n += os.stat(f)[6]
    return n


class RamFlash:
    """A NOR flash in RAM with the block-device protocol FlashStore uses."""

    def __init__(self, blocks, size):
        self.n, self.bs = blocks, size
        self.mem = bytearray(b"\xff" * (blocks * size))

    def readblocks(self, b, buf, off=0):
        a = b * self.bs + off
        buf[:] = self.mem[a:a + len(buf)]

    def writeblocks(self, b, buf, off=0):
        a = b * self.bs + off
        self.mem[a:a + len(buf)] = buf

    def ioctl(self, op, arg):
        if op == 4:
            return self.n
        if op == 5:
            return self.bs
        if op == 6:
            a = arg * self.bs
            self.mem[a:a + self.bs] = b"\xff" * self.bs
        return 0


def holdfast(cfg, host, port, n, o, report):
    dev = RamFlash(8, 512) if cfg == "flash" else None
    before = set(sys.modules)
    base = used()
    if cfg == "async":
        import asyncio
        from holdfast.aclient import AsyncClient
        code = used() - base
        c = AsyncClient(b"fp-async", host, port)
        asyncio.run(_arun(c, n, lambda: report(code, used() - base, mpy_bytes(before))))
        return
    from holdfast.client import MQTTClient
    kw = {}
    if cfg == "file":
        from holdfast.fileoutbox import FileStore
        kw["outbox"] = FileStore(o["dir"])
    elif cfg == "flash":
        from holdfast.flashoutbox import FlashStore
        kw["outbox"] = FlashStore(dev)
    elif cfg == "tls":
        import holdfast.tls  # noqa: F401  (else it loads in the constructor, as state)
        kw["ssl"] = True
        kw["ssl_params"] = {"cafile": o["ca"]}
    code = used() - base
    c = MQTTClient(b"fp-" + cfg, host, port, **kw)
    c.connect()
    if cfg == "sub":
        c.set_callback(lambda t, m: None)
        c.subscribe(b"bench/cmd", 1)
    report(code, used() - base, mpy_bytes(before))
    qos = 2 if cfg == "qos2" else 1
    for _ in range(n):
        c.publish(T, P, False, qos)
    if not c.flush():
        raise OSError("flush() timed out with %d pending" % c.pending())
    c.disconnect()


async def _arun(c, n, report):
    await c.connect()
    report()
    for _ in range(n):
        await c.publish(T, P, False, 1)
    await c.flush()
    await c.disconnect()


def peer(lib, host, port, n, report):
    before = set(sys.modules)
    base = used()
    m = __import__("lib_" + lib)
    m.load()
    code = used() - base
    c = m.Client(host, port, "fp-" + lib, {})
    if getattr(m, "ASYNC", False):
        import asyncio
        asyncio.run(_apeer(c, n, lambda: report(code, used() - base, mpy_bytes(before))))
        return
    c.connect()
    report(code, used() - base, mpy_bytes(before))
    t = c.topic(T)
    c.prepare(t, t, P)
    for _ in range(n):
        c.pub1(t, P)
    c.drain1()
    c.close()


async def _apeer(c, n, report):
    await c.connect()
    report()
    t = c.topic(T)
    c.prepare(t, t, P)
    for _ in range(n):
        await c.pub1(t, P)
    await c.drain1()
    await c.close()


def main(a):
    cfg, host, port, n = a[0], a[1], int(a[2]), int(a[3])
    o = {}
    for kv in a[4:]:
        k, _, v = kv.partition("=")
        o[k] = v

    def report(code, total, mpy):
        print('RESULT {"code": %d, "total": %d, "mpy": %d}' % (code, total, mpy))

    if cfg in ("pub", "sub", "qos2", "file", "flash", "tls", "async"):
        holdfast(cfg, host, port, n, o, report)
    else:
        peer(cfg, host, port, n, report)
    print("FOOTPRINT OK")
    return 0


if __name__ == "__main__":
    main(sys.argv[1:])

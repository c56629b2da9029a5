# The footprint probe of `make bench` (tools/bench/footprint.py runs it), one
# configuration per process, library and probe precompiled (.mpy):
#
#   micropython [-X heapsize=N] -m footprint CONFIG HOST PORT N [dir=D] [ca=F] [count=1 | split=0] [mark=1]
#
# CONFIG: holdfast's pub (blocking client, QoS 0/1, RAM outbox: what a sensor
# that only reports loads), lean (the same with size=256, window=4 and a
# 1 KB outbox: state sized to small readings), pub5 (pub at level=5, MQTT 5),
# sub (+ a subscription with a callback), qos2
# (QoS 2 publishes), file (FileStore outbox in D), flash (FlashStore on a
# RAM flash of 8 x 512 B, made before the first reading), tls (ssl=True,
# the CA in file ca=F, PORT a TLS listener), async (AsyncClient); or a
# peer's adapter: umqtt_simple, mqtt_async (lib_*.py); umqtt_simple_tls
# (umqtt.simple over TLS, as the tls row).
# Prints "RESULT {json}": code (heap taken by the import), total (heap held
# after import + connect [+ subscribe]), mpy (bytes of the .mpy files loaded);
# with count=1, "COUNTS {json}": the objects the library's modules hold, and
# micropython.qstr_info()'s line before the import and after connect;
# with mark=1, "MARK" after RESULT, then it waits for a line on stdin (the
# bench reads what the C library's malloc holds meanwhile: mallocstat.c);
# then N acknowledged publishes and "FOOTPRINT OK". gc.mem_alloc() after
# a full collection, from before the import. Loaded from a ROMFS image, the
# probe is started by tools/bench/footprint.py's bootstrap, which mounts the
# image first and calls main().
#
# The probe is a generator (run()): a bare `yield` asks for the heap in use
# after a full collection, a yielded coroutine is run on the event loop.
# main() drives it on the unix port; on the WebAssembly port it hands it to
# tools/runtimes/mpwasm.mjs, because there gc.collect() only asks for a
# collection, which runs once control is back in JavaScript: read in the
# same call, gc.mem_alloc() would count every object freed since.
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
WASM = sys.platform == "webassembly"
if WASM:
    # Its pyscript build freezes micropython-lib's time, binascii, io, os and
    # collections, Python modules over the built-in ones, where a board has
    # the built-in alone: loaded now (os above), they do not count as the
    # library's. (It freezes logging too, which a board has not: the bench
    # puts a logging.py that fails to import first on the path, mp/wasm/.)
    import time  # noqa: F401
    import binascii  # noqa: F401
    import io  # noqa: F401
    import collections  # noqa: F401

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


# Not the library's: the probe's adapters and shim, and asyncio (the port's).
_NOT_COUNTED = ("lib_", "cpy_fix", "asyncio", "footprint")


COUNT = [False]  # count=1: the walk allocates, so smallest-heap runs leave it out
# split=0 (smallest-heap runs): import as a user does. Otherwise what the
# client's constructor would load and keep (the default outbox, mqtt5.session) is
# imported before the code reading, so it counts as code, not as state.
SPLIT = [True]


def names():
    # count=1: the names interned so far ("qstr pool: ... n_qstr=N ..."), read
    # by the bench before the import and after connect: in .mpy and ROMFS
    # modes each distinct name costs a pool entry and its string.
    if COUNT[0]:
        import micropython
        micropython.qstr_info()


def count_objects(before):
    """What the modules loaded since `before` create, as a frozen build keeps
    them on the heap: modules, functions (module level), methods (in class
    dicts: functions, properties, static and class methods), classes,
    exception classes, module-level names. Each object once, by id."""
    if not COUNT[0]:
        return
    seen = set()
    mods = set()
    c = {"modules": 0, "functions": 0, "methods": 0, "classes": 0, "exceptions": 0,
         "names": 0}
    for name in list(sys.modules):
        if name in before or name.startswith(_NOT_COUNTED):
            continue
        m = sys.modules[name]
        if id(m) in mods:  # a module under two names (ussl)
            continue
        mods.add(id(m))
        d = m.__dict__
        c["modules"] += 1
        c["names"] += len(d)
        for v in d.values():
            if id(v) in seen:
                continue
            seen.add(id(v))
            t = type(v).__name__
            if t in ("function", "generator", "closure"):
                c["functions"] += 1
            elif isinstance(v, type):
                c["exceptions" if issubclass(v, BaseException) else "classes"] += 1
                for m in v.__dict__.values():
                    if type(m).__name__ in ("function", "generator", "closure", "property",
                                            "staticmethod", "classmethod"):
                        c["methods"] += 1
    print("COUNTS " + repr(c).replace("'", '"'))
    names()


def holdfast(cfg, host, port, n, o, report):
    dev = RamFlash(8, 512) if cfg == "flash" else None
    before = set(sys.modules)
    names()
    base = yield
    if cfg == "async":
        import asyncio  # noqa: F401  (as a user of AsyncClient does)
        from holdfast.aclient import AsyncClient
        if SPLIT[0]:
            import holdfast.memstore  # noqa: F401  (the default outbox's code, as below)
        code = (yield) - base
        c = AsyncClient(b"fp-async", host, port)
        yield c.connect()
        report(code, (yield) - base, mpy_bytes(before))
        count_objects(before)
        yield _arun(c, n)
        return
    from holdfast.client import MQTTClient
    kw = {}
    if cfg == "lean":  # a small sensor's settings: state sized to 100-byte readings
        from holdfast.memstore import MemoryStore
        kw = {"size": 256, "window": 4, "outbox": MemoryStore(1024, 8)}
    elif cfg == "file":
        from holdfast.durable import FileStore
        kw["outbox"] = FileStore(o["dir"])
    elif cfg == "flash":
        from holdfast.durable import FlashStore
        kw["outbox"] = FlashStore(dev)
    elif cfg == "pub5":
        if SPLIT[0]:
            import holdfast.mqtt5.session  # noqa: F401  (else it loads in the constructor, as state)
        kw["level"] = 5
    elif cfg == "tls":
        # Nothing of TLS imported before the code reading: the constructor
        # builds the context with tlssetup.py and drops it, and tls.py is loaded
        # for the handshake and dropped after it, so a TLS client keeps no
        # TLS code (importing tls.py here would count as code what no
        # client holds, and move what follows on the heap).
        kw["ssl"] = True
        kw["ssl_params"] = {"cafile": o["ca"]}
    if "outbox" not in kw and SPLIT[0]:
        import holdfast.memstore  # noqa: F401  (the default outbox's code: else it loads in the constructor, as state)
    code = (yield) - base
    c = MQTTClient(b"fp-" + cfg, host, port, **kw)
    c.connect()
    if cfg == "sub":
        c.set_callback(lambda t, m: None)
        c.subscribe(b"bench/cmd", 1)
    report(code, (yield) - base, mpy_bytes(before))
    count_objects(before)
    qos = 2 if cfg == "qos2" else 1
    for _ in range(n):
        c.publish(T, P, False, qos)
    if not c.flush():
        raise OSError("flush() timed out with %d pending" % c.pending())
    c.disconnect()


async def _arun(c, n):
    for _ in range(n):
        await c.publish(T, P, False, 1)
    await c.flush()
    await c.disconnect()


def peer(lib, host, port, n, report):
    before = set(sys.modules)
    names()
    base = yield
    m = __import__("lib_" + lib)
    m.load()
    code = (yield) - base
    c = m.Client(host, port, "fp-" + lib, {})
    if getattr(m, "ASYNC", False):
        yield c.connect()
        report(code, (yield) - base, mpy_bytes(before))
        count_objects(before)
        yield _apeer(c, n)
        return
    c.connect()
    report(code, (yield) - base, mpy_bytes(before))
    count_objects(before)
    t = c.topic(T)
    c.prepare(t, t, P)
    for _ in range(n):
        c.pub1(t, P)
    c.drain1()
    c.close()


def umqtt_tls(host, port, n, o, report):
    """umqtt.simple 1.3.4 over TLS, verifying the broker with the CA, as the
    tls row does: ssl=True and ssl_params for ssl.wrap_socket."""
    from binascii import a2b_base64
    with open(o["ca"], "rb") as f:
        pem = f.read()
    # mbedtls here takes a DER CA: the probe converts it before the reading
    # (holdfast's tls.py does it itself, inside the figure).
    der = a2b_base64(pem[pem.find(b"-----", 10) + 5:pem.find(b"-----END")])
    del pem
    before = set(sys.modules)
    names()
    base = yield
    import ssl
    sys.modules["ussl"] = ssl  # 1.3.4 imports ussl, MicroPython 1.24+ names it ssl
    m = __import__("lib_umqtt_simple")  # as in the plain row, so the difference is TLS's
    m.load()
    MQTTClient = m.Client.MQTTClient
    code = (yield) - base
    c = MQTTClient(b"fp-umqtt-tls", host, port, ssl=True,
                   ssl_params={"cert_reqs": ssl.CERT_REQUIRED, "cadata": der,
                               "server_hostname": host})
    c.connect()
    report(code, (yield) - base, mpy_bytes(before))
    count_objects(before)
    for _ in range(n):
        c.publish(T, P, False, 1)
    c.disconnect()


async def _apeer(c, n):
    t = c.topic(T)
    c.prepare(t, t, P)
    for _ in range(n):
        await c.pub1(t, P)
    await c.drain1()
    await c.close()


def run(a):
    cfg, host, port, n = a[0], a[1], int(a[2]), int(a[3])
    o = {}
    for kv in a[4:]:
        k, _, v = kv.partition("=")
        o[k] = v
    COUNT[0] = o.get("count") == "1"
    SPLIT[0] = o.get("split") != "0"

    def report(code, total, mpy):
        print('RESULT {"code": %d, "total": %d, "mpy": %d}' % (code, total, mpy))
        if o.get("mark") == "1":  # the bench reads the C library's heap now (mallocstat.c)
            print("MARK")
            sys.stdin.readline()

    if cfg in ("pub", "lean", "pub5", "sub", "qos2", "file", "flash", "tls", "async"):
        yield from holdfast(cfg, host, port, n, o, report)
    elif cfg == "umqtt_simple_tls":
        yield from umqtt_tls(host, port, n, o, report)
    else:
        yield from peer(cfg, host, port, n, report)
    print("FOOTPRINT OK")


def main(a):
    g = run(a)
    if WASM:
        return g  # tools/runtimes/mpwasm.mjs drives it
    x = None
    while True:
        try:
            x = g.send(x)
        except StopIteration:
            return 0
        if x is None:
            x = used()
        else:
            import asyncio
            x = asyncio.run(x)


if __name__ == "__main__":
    main(sys.argv[1:])

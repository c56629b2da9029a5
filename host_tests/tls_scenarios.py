# TLS and credential scenarios against a real broker, run as a program under
# either runtime:
#     python|micropython host_tests/tls_scenarios.py NAME HOST PORT ARGS.json
# ARGS.json carries the file paths and settings the test chose. Each scenario
# prints one JSON line with what it observed; test_tls.py asserts.
import sys
import json

from scenario_support import RT, sleep_ms, ticks_ms, ticks_diff  # first: firmware/ on sys.path
from holdfast import MQTTClient, MQTTError
from holdfast.errors import TLSError
from holdfast.tlssetup import der_blocks

MP = RT == "micropython"


def client(a, cid, host, port, **kw):
    tls = a.get("ssl", True)
    if a.get("own_context"):
        tls = own_context(a["own_context"])
    return MQTTClient(cid, host, port, user=a.get("user"), password=a.get("password"),
                      ssl=tls, ssl_params=a.get("ssl_params"), **kw)


def own_context(cafile):
    """An SSLContext made by the application (umqtt.simple's newer style).
    MicroPython's ssl.SSLContext starts with CERT_NONE: set it."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.verify_mode = ssl.CERT_REQUIRED
    with open(cafile, "rb") as f:
        data = f.read()
    if MP:
        data = der_blocks(data)[0][1]
    elif data.find(b"-----BEGIN") >= 0:
        data = data.decode()
    ctx.load_verify_locations(cadata=data)
    return ctx


def info(e, ms=0):
    return {"type": e.__class__.__name__, "mqtt_error": isinstance(e, MQTTError),
            "tls_error": isinstance(e, TLSError), "reason": getattr(e, "reason", None),
            "code": getattr(e, "code", None), "msg": str(e), "ms": ms}


def loaded(name):
    # tlssetup leaves once the context is built and once a failure is
    # explained, tls.py after each handshake and with tlssetup, unload.py
    # (which unloads them) with them: neither sys.modules nor the package
    # may keep them.
    import holdfast
    return "holdfast." + name in sys.modules or name in holdfast.__dict__


def pump(c, until, ms=5000):
    t0 = ticks_ms()
    while not until() and ticks_diff(ticks_ms(), t0) < ms:
        c.wait_msg(20)


def roundtrip(host, port, a, tag):
    """Connects over TLS, receives its own QoS 0/1/2 and a 3000-byte message,
    then calls check_msg() 100 times with nothing to arrive (keepalive is
    off): one that waited for a packet would never return, one that waited
    on a socket timeout would lose the link. Reports the packets received
    meanwhile (none) and whether the link is up."""
    got = []
    topic = "tls/" + tag
    c = client(a, tag, host, port, size=4096)
    c.set_callback(lambda t, m: got.append([m.decode() if len(m) < 100 else len(m), c.session.qos]))
    c.connect()
    c.subscribe(topic, 2)
    for q in (0, 1, 2):
        c.publish(topic, "q%d" % q, False, q)
    c.publish(topic, "b" * 3000, False, 1)
    flushed = c.flush(5000)
    pump(c, lambda: len(got) >= 4)
    # The flows still open (the broker's PUBREL) are closed once a later
    # message of ours came back: after that nothing is to arrive.
    c.publish(topic, "end", False, 1)
    pump(c, lambda: ["end", 1] in got and not c.pending())
    got.remove(["end", 1])
    packets = c.session.packets
    for _ in range(100):
        c.check_msg()
    idle = {"packets": c.session.packets - packets, "connected": c.isconnected()}
    connected = c.isconnected()
    c.disconnect()
    return {"got": got, "flushed": flushed, "idle": idle, "port": c.port,
            "connected": connected, "links": c.links}


def fail(host, port, a, tag):
    """Constructs and connects, expecting an error; reports it, and the
    size of the send buffer then (made by the first start(), after the
    handshake: a first connect whose handshake failed never made it)."""
    t0 = ticks_ms()
    c = None
    try:
        c = client(a, tag, host, port, timeout_ms=a.get("timeout_ms", 5000))
        c.connect()
    except Exception as e:  # noqa: BLE001 - the test asserts what it was
        r = info(e, ticks_diff(ticks_ms(), t0))
        r["tlssetup_loaded"] = loaded("tlssetup")
        r["tls_loaded"] = loaded("tls") or loaded("unload")
        r["tx"] = None if c is None else len(c.session.tx)
        return r
    c.disconnect()
    return {"type": None}


def reconnects(host, port, a, tag):
    """Connects over TLS, then a["n"] times closes the socket under the
    client and calls check_msg() until it is connected again (backoff_ms
    (10, 20)). Reports whether it kept the context it built in the
    constructor, the links, whether tlssetup is loaded, and on MicroPython
    the heap held after each reconnect (gc.mem_alloc() after gc.collect())."""
    import gc
    c = client(a, tag, host, port, backoff_ms=(10, 20), timeout_ms=5000)
    first = c.tls
    c.connect()
    heap = []
    for _ in range(a["n"]):
        links = c.links
        c.sock.close()
        t0 = ticks_ms()
        while (c.links == links or not c.isconnected()) and ticks_diff(ticks_ms(), t0) < 20000:
            c.check_msg()
            sleep_ms(5)
        gc.collect()
        heap.append(gc.mem_alloc() if MP else 0)
    r = {"same_context": c.tls is first, "links": c.links, "connected": c.isconnected(),
         "tlssetup_loaded": loaded("tlssetup"), "tls_loaded": loaded("tls") or loaded("unload"), "heap": heap, "last_error": str(c.last_error)}
    c.disconnect()
    return r


def retry(host, port, a, tag):
    """connect() fails; then check_msg() is called, as a board's main loop
    would, until the client has tried a["attempts"] times in all (connect()
    included): it must not raise. Reports the ms from the start of each
    attempt to the start of the next (each at least the delay the client
    waited after it failed: a busy machine only lengthens them)."""
    c = client(a, tag, host, port, backoff_ms=tuple(a["backoff_ms"]), timeout_ms=2000)
    first = None
    t = ticks_ms()
    try:
        c.connect()
    except Exception as e:  # noqa: BLE001
        first = info(e)
    raised = []
    gaps = []
    seen = c.attempts
    while c.attempts < a["attempts"]:
        try:
            c.check_msg()
        except Exception as e:  # noqa: BLE001
            raised.append(info(e))
        if c.attempts != seen:
            now = ticks_ms()
            gaps.append(ticks_diff(now, t))
            t = now
            seen = c.attempts
        sleep_ms(10)
    return {"first": first, "raised": raised[:3], "n_raised": len(raised), "links": c.links,
            "attempts": c.attempts, "gaps": gaps,
            "last_error": str(c.last_error), "connected": c.isconnected()}


def burst(host, port, a, tag):
    """Publishes numbered messages at QoS a["qos"] for a["ms"] ms as fast as
    the link takes them (the test stalls the link meanwhile, so TLS writes
    block), then "end" at QoS 1. Every payload is its number padded to
    a["size"] bytes; reports the numbers publish() dropped (QoS 0: no room
    within timeout_ms) as runs [first, last], at most 200 of them, and how
    many publish() calls returned with bytes still waiting for the socket
    (blocked): how many messages a machine gets out in the time depends on
    its speed, what the scenario keeps must not."""
    from holdfast.memstore import MemoryStore
    from holdfast.errors import OutboxFull
    c = client(a, tag, host, port, timeout_ms=10000, size=4096,
               outbox=MemoryStore(65536, 128))
    c.connect()
    topic = "burst/" + tag
    pad = "." * a["size"]
    n = 0
    runs = []  # QoS 0 messages publish() dropped (and counted)
    blocked = 0
    t0 = ticks_ms()
    while ticks_diff(ticks_ms(), t0) < a["ms"] and len(runs) < 200:
        try:
            d = c.dropped_qos0
            c.publish(topic, ("%08d" % n) + pad[8:], False, a["qos"])
            if c.session.tx_end > c.session.tx_start:
                blocked += 1
            if c.dropped_qos0 != d:
                if runs and runs[-1][1] == n - 1:
                    runs[-1][1] = n
                else:
                    runs.append([n, n])
            n += 1
        except OutboxFull:
            c.wait_msg(10)
    c.publish(topic, "end", False, 1)
    ok = c.flush(10000)
    r = {"sent": n, "flushed": ok, "pending": c.pending(), "links": c.links,
         "last_error": str(c.last_error), "dropped": runs, "blocked": blocked}
    c.disconnect()
    return r


def _ssl():
    try:
        import ssl
    except ImportError:
        import tls as ssl  # type: ignore
    return ssl


def defaults(host, port, a, tag):
    """Construction only (no broker): default ports, and the TLSError
    (reason config) for each unusable setting."""
    r = {}
    r["tls_port"] = MQTTClient("d", host, ssl=True, ssl_params={"cafile": a["ca"]}).port
    r["tlssetup_loaded"] = loaded("tlssetup")
    r["tls_loaded"] = loaded("tls") or loaded("unload")
    plain = MQTTClient("d", host)
    r["plain_port"] = plain.port
    r["plain_tls"] = plain.tls is None
    r["ssl_false"] = MQTTClient("d", host, ssl=False).tls is None
    for name, kw in (
            ("params_without_ssl", {"ssl_params": {"cafile": a["ca"]}}),
            ("unknown_key", {"ssl": True, "ssl_params": {"cafile": a["ca"], "ca_certs": "x"}}),
            ("no_ca", {"ssl": True}),
            ("cert_optional", {"ssl": True, "ssl_params": {"cafile": a["ca"],
                                                           "cert_reqs": _ssl().CERT_OPTIONAL}}),
            ("cert_reqs_unknown", {"ssl": True, "ssl_params": {"cafile": a["ca"], "cert_reqs": 7}}),
            ("missing_ca", {"ssl": True, "ssl_params": {"cafile": a["ca"] + ".missing"}}),
            ("garbage_ca", {"ssl": True, "ssl_params": {"cadata": b"not a certificate"}}),
            ("cert_without_key", {"ssl": True, "ssl_params": {"cafile": a["ca"],
                                                              "certfile": a["cert"]}}),
            ("mismatched_key", {"ssl": True, "ssl_params": {"cafile": a["ca"],
                                                            "certfile": a["cert"],
                                                            "keyfile": a["other_key"]}}),
            ("encrypted_key", {"ssl": True, "ssl_params": {"cafile": a["ca"],
                                                           "certfile": a["cert"],
                                                           "keyfile": a["enc_key"]}}),
            ("der_client_cert", {"ssl": True, "ssl_params": {"cafile": a["ca"],
                                                             "certfile": a["cert_der"],
                                                             "keyfile": a["key_der"]}}),
            ("key_text_as_path", {"ssl": True, "ssl_params": {"cafile": a["ca"],
                                                              "certfile": a["cert"],
                                                              "keyfile": read(a["key"]).decode()}}),
    ):
        try:
            MQTTClient("d", host, **kw)
            r[name] = None
        except Exception as e:  # noqa: BLE001
            r[name] = info(e)
    # PEM and DER give the same certificate.
    r["der_matches"] = der_blocks(read(a["ca"]))[0][1] == read(a["ca_der"])
    r["der_passthrough"] = der_blocks(read(a["ca_der"]))[0][1] == read(a["ca_der"])
    return r


def read(p):
    with open(p, "rb") as f:
        return f.read()


def trace(e):
    if MP:
        import io
        buf = io.StringIO()
        sys.print_exception(e, buf)
        return buf.getvalue()
    import traceback
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))


def secrets(host, port, a, tag):
    """With a password and a client key present, provokes every error it can
    and collects what a log would show: repr(client), repr(client.tls), str
    and repr of each error and of its cause, tracebacks, last_error."""
    out = []
    seen = []

    def attempt(label, make, action):
        c = None
        try:
            c = make()
            out.append(repr(c))
            out.append(repr(c.tls))
            action(c)
        except Exception as e:  # noqa: BLE001
            seen.append(label + ": " + e.__class__.__name__)
            out.append(str(e))
            out.append(repr(e))
            out.append(trace(e))
            cause = getattr(e, "cause", None)
            if cause is not None:
                out.append(str(cause))
                out.append(repr(cause))
        if c is not None:
            out.append(repr(c))
            out.append(str(c.last_error))
            out.append(repr(c.last_error))

    pw = a["password"]
    mtls = {"cafile": a["ca"], "certfile": a["cert"], "keyfile": a["key"]}

    def connect_and_use(c):
        c.connect()
        out.append(repr(c))
        c.subscribe("s/" + tag, 1)
        c.publish("s/" + tag, "x", False, 1)
        c.flush(3000)
        c.disconnect()

    def connect_then_loop(c):
        try:
            c.connect()
        finally:
            for _ in range(5):
                c.check_msg()
                sleep_ms(20)

    def subscribe_offline(c):
        c.subscribe("s/" + tag, 1)

    ports = a["ports"]
    attempt("good mtls and password", lambda: MQTTClient(
        tag + "-ok", host, ports["auth_mtls"], user="dev1", password=pw, ssl=True,
        ssl_params=mtls), connect_and_use)
    attempt("bad password", lambda: MQTTClient(
        tag + "-bad", host, ports["auth_plain"], user="dev1", password=pw + "-wrong",
        backoff_ms=(10, 20)), connect_then_loop)
    attempt("bad password over mtls", lambda: MQTTClient(
        tag + "-bad2", host, ports["auth_mtls"], user="dev1", password=pw + "-wrong", ssl=True,
        ssl_params=mtls), connect_and_use)
    attempt("wrong ca with key", lambda: MQTTClient(
        tag + "-ca", host, ports["mtls"], user="dev1", password=pw, ssl=True,
        ssl_params={"cafile": a["other_ca"], "certfile": a["cert"], "keyfile": a["key"]},
        backoff_ms=(10, 20)), connect_then_loop)
    attempt("key text as keyfile", lambda: MQTTClient(
        tag + "-kt", host, ports["mtls"], user="dev1", password=pw, ssl=True,
        ssl_params={"cafile": a["ca"], "certfile": a["cert"], "keyfile": read(a["key"]).decode()}),
        connect_and_use)
    attempt("key text as certfile", lambda: MQTTClient(
        tag + "-kt2", host, ports["mtls"], user="dev1", password=pw, ssl=True,
        ssl_params={"cafile": a["ca"], "certfile": read(a["key"]).decode(), "keyfile": a["key"]}),
        connect_and_use)
    attempt("key text as cafile", lambda: MQTTClient(
        tag + "-kt3", host, ports["mtls"], user="dev1", password=pw, ssl=True,
        ssl_params={"cafile": read(a["key"]).decode()}), connect_and_use)
    attempt("key as cadata", lambda: MQTTClient(
        tag + "-kt4", host, ports["mtls"], user="dev1", password=pw, ssl=True,
        ssl_params={"cadata": read(a["key"])}), connect_and_use)
    attempt("mismatched key", lambda: MQTTClient(
        tag + "-mk", host, ports["mtls"], user="dev1", password=pw, ssl=True,
        ssl_params={"cafile": a["ca"], "certfile": a["cert"], "keyfile": a["other_key"]}),
        connect_and_use)
    attempt("no client cert", lambda: MQTTClient(
        tag + "-nc", host, ports["mtls"], user="dev1", password=pw, ssl=True,
        ssl_params={"cafile": a["ca"]}), connect_and_use)
    attempt("no connack", lambda: MQTTClient(
        tag + "-to", host, ports["silent"], user="dev1", password=pw, timeout_ms=400),
        connect_and_use)
    attempt("no handshake", lambda: MQTTClient(
        tag + "-hs", host, ports["silent"], user="dev1", password=pw, timeout_ms=400, ssl=True,
        ssl_params=mtls), connect_and_use)
    attempt("offline subscribe", lambda: MQTTClient(
        tag + "-off", host, ports["auth_plain"], user="dev1", password=pw, ssl=True,
        ssl_params=mtls), subscribe_offline)
    if MP:
        attempt("key data", lambda: MQTTClient(
            tag + "-kd", host, ports["mtls"], user="dev1", password=pw, ssl=True,
            ssl_params={"cafile": a["other_ca"], "cert": read(a["cert"]), "key": read(a["key"])},
            backoff_ms=(10, 20)), connect_then_loop)
    return {"seen": seen, "out": out}


def main():
    name, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(sys.argv[4]) as f:
        a = json.load(f)
    tag = RT + "-" + name
    result = globals()[name](host, port, a, tag)
    print("RESULT " + json.dumps(result))


main()

"""Every feature loads on first use (docs/footprint.md): a client that only
publishes never carries the subscription side, the inbound path, the outbox
policies, the words of errors or any error class but MQTTError; each arrives with
the first call that needs it. Against the real mosquitto, in a fresh process
under CPython and the MicroPython unix port (the modules a process holds are
what it paid for)."""

import json
import os
import subprocess
import sys

import pytest

from fleet.mosquitto import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIMES = {"cpython": sys.executable,
            "micropython": os.path.join(os.path.dirname(sys.executable), "micropython")}

# Modules only a feature beyond publishing loads.
LATER = {"pull", "errors.where", "errors.link", "errors.broker", "errors.outbox", "errors.tls", "errors.websocket",
         "topics", "inbound", "held", "subscriptions", "policies", "reasons", "tls", "tlssetup",
         "unload", "durable", "durable.log", "durable.scan", "durable.blocks", "durable.compaction", "durable.heldlog",
         "durable.latest", "durable.softcrc", "durable.files", "durable.flash", "aclient", "broker",
         "url", "ws", "wsopen", "robust"}

SCRIPT = """\
import sys, json
sys.path.insert(0, %(fw)r)
from holdfast import MQTTClient

def loaded():
    return sorted(m[9:] for m in sys.modules if m.startswith("holdfast."))

r = {}
c = MQTTClient("lazy-probe", %(host)r, %(port)d, keepalive=30)
c.connect()
for i in range(5):
    c.publish(b"lazy/t", b"reading %%d" %% i, False, 1)
c.publish(b"lazy/t", b"qos0", False, 0)
c.flush()
r["publish"] = loaded()
got = []
c.set_callback(lambda t, m: got.append(bytes(m)))
c.subscribe(b"lazy/in", 1)
c.publish(b"lazy/in", b"back", False, 1)
for i in range(20):  # each wait_msg() handles one packet: SUBACK, PUBACK, the message
    if got:
        break
    c.wait_msg()
r["got"] = [m.decode() for m in got]
r["subscribe"] = loaded()
c.disconnect()
d = MQTTClient("lazy-probe2", %(host)r, %(dead)d, timeout_ms=2000)
try:
    d.connect()
except OSError as e:
    import holdfast.errors as he
    r["unreachable"] = isinstance(e, he.Unreachable) and e.__class__ is he.Unreachable
r["failed"] = loaded()
print("RESULT " + json.dumps(r))
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_each_feature_loads_with_its_first_use(runtime, mosquitto):
    code = SCRIPT % {"fw": os.path.join(ROOT, "firmware"), "host": mosquitto.host,
                     "port": mosquitto.port, "dead": free_port()}
    p = subprocess.run([RUNTIMES[runtime], "-c", code], capture_output=True, text=True,
                       timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (p.stdout, p.stderr)
    r = json.loads(lines[-1][7:])
    # Publishing (QoS 0 and 1, acknowledged) loads none of the later modules:
    # no error class beyond MQTTError (errors/base.py) until something fails.
    assert not LATER & set(r["publish"]), r["publish"]
    assert {"errors", "errors.base"} <= set(r["publish"]), r["publish"]
    assert {"client", "shell", "sockets", "session", "codec", "memstore"} <= set(r["publish"])
    # A subscription and an inbound message bring their own, and only those.
    assert r["got"] == ["back"], r
    assert LATER & set(r["subscribe"]) == {"topics", "subscriptions", "inbound"}, r["subscribe"]
    # The first unreachable broker brings the link's error classes, and the
    # class raised is the one holdfast.errors names; the rarer ones stay out,
    # the broker's refusals too (a lost link is told from a refusal without
    # them: on a short heap each module more could keep it from reconnecting).
    assert r["unreachable"] is True, r
    assert LATER & set(r["failed"]) - set(r["subscribe"]) == {"errors.where", "errors.link",
                                                           "reasons"}, r["failed"]


NAMES = """\
import sys, json
sys.path.insert(0, %(fw)r)
import holdfast, holdfast.errors as errors, holdfast.tls as tls

def loaded():
    return [m for m in ("errors.link", "errors.broker", "errors.outbox", "errors.tls") if "holdfast." + m in sys.modules]

r = {"alone": loaded()}
from holdfast.errors import LinkDown
r["common"] = loaded()  # one name loads its own module, not the other
from holdfast import ConnectError, OutboxFull, MQTTTimeout, Unreachable
from holdfast import MQTTProtocolError, V5Error, SubscribeError, TLSError
from holdfast.errors import MQTTError, MQTTException
got = [ConnectError, OutboxFull, MQTTTimeout, LinkDown, Unreachable,
       MQTTProtocolError, V5Error, SubscribeError, TLSError]
names = [c.__name__ for c in got]
r["names"] = names
# the one class whichever way it is reached: from holdfast, from
# holdfast.errors, as holdfast.errors.X and holdfast.X, from the module
# that holds it
home = [sys.modules["holdfast.errors." + m] for m in ("broker", "outbox", "link", "link", "link", "broker", "broker",
                                                     "broker", "tls")]
r["same"] = [c is getattr(errors, n) is getattr(holdfast, n) is getattr(m, n)
             for c, n, m in zip(got, names, home)]
r["tls"] = tls.TLSError is TLSError
r["umqtt"] = MQTTException is MQTTError is holdfast.MQTTException
r["bases"] = [issubclass(c, OSError) and not issubclass(c, MQTTError) and "link"
              or issubclass(c, MQTTError) and not issubclass(c, OSError) and "mqtt" for c in got]
r["protocol"] = [issubclass(c, MQTTProtocolError) for c in (V5Error,)]
e = ConnectError(5, "not authorized")
r["refused"] = [e.code, str(e)]
try:
    errors.NoSuchError
    r["unknown"] = "no error"
except AttributeError:
    r["unknown"] = "AttributeError"
print("RESULT " + json.dumps(r))
"""


def _result(runtime, script):
    """What a script that needs no broker printed on its RESULT line, run by runtime."""
    p = subprocess.run([RUNTIMES[runtime], "-c", script % {"fw": os.path.join(ROOT, "firmware")}],
                       capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (p.stdout, p.stderr)
    return json.loads(lines[-1][7:])


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_error_classes_keep_their_documented_names(runtime):
    # The classes the errors package loads on first use (its face's table)
    # are found where the docs name them (holdfast, holdfast.errors,
    # holdfast.tls.TLSError), the same class each time and with the family
    # README.md gives it; importing holdfast.errors or tls.py loads none.
    r = _result(runtime, NAMES)
    assert r == {"alone": [], "common": ["errors.link"],
                 "names": ["ConnectError", "OutboxFull", "MQTTTimeout", "LinkDown", "Unreachable",
                           "MQTTProtocolError", "V5Error", "SubscribeError", "TLSError"],
                 "same": [True] * 9, "tls": True, "umqtt": True,
                 "bases": ["mqtt", "mqtt", "link", "link", "link", "mqtt", "mqtt", "mqtt", "mqtt"],
                 "protocol": [True], "refused": [5, "not authorized"],
                 "unknown": "AttributeError"}, r


FILESTORE = """\
import sys, json
sys.path.insert(0, %(fw)r)
from holdfast import MQTTClient
from holdfast.durable import FileStore
c = MQTTClient("lazy-file", %(host)r, %(port)d, keepalive=30, outbox=FileStore(%(dir)r))
c.connect()
pid = c.publish(b"lazy/f", b"reading", False, 1)
c.flush()
mods = sorted(m[9:] for m in sys.modules if m.startswith("holdfast."))
print("RESULT " + json.dumps({"pid": pid, "pending": c.pending(), "mods": mods}))
c.disconnect()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_client_with_a_file_outbox_never_loads_the_ram_outbox(runtime, mosquitto, tmp_path):
    # memstore.py (MemoryStore, about 5 KB as .mpy on the heap) loads only for
    # the default outbox; the boot scan leaves with the open.
    code = FILESTORE % {"fw": os.path.join(ROOT, "firmware"), "host": mosquitto.host,
                        "port": mosquitto.port, "dir": str(tmp_path / "ob")}
    p = subprocess.run([RUNTIMES[runtime], "-c", code], capture_output=True, text=True,
                       timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (p.stdout, p.stderr)
    r = json.loads(lines[-1][7:])
    assert r["pid"] and r["pending"] == 0, r
    assert {"durable", "durable.files", "durable.log", "session", "client"} <= set(r["mods"]), r["mods"]
    assert "memstore" not in r["mods"] and "durable.scan" not in r["mods"], r["mods"]


DURABLE = """\
import sys, json
sys.path.insert(0, %(fw)r)

def loaded():
    return sorted(m[9:] for m in sys.modules if m.startswith("holdfast."))

r = {}
import holdfast.durable
r["face"] = loaded()
from holdfast.durable import FlashStore
r["flash"] = loaded()
import holdfast
r["same"] = [holdfast.FlashStore is FlashStore, holdfast.FileStore is holdfast.durable.FileStore]
r["file"] = loaded()
try:
    holdfast.durable.Log
    r["unknown"] = None
except AttributeError as e:
    r["unknown"] = type(e).__name__
print("RESULT " + json.dumps(r))
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_durable_package_loads_each_store_with_its_first_use(runtime):
    # holdfast.durable is a face: importing it loads neither store, nor the
    # log they share; each store's name (there or at holdfast's top level)
    # loads that store's module and the log, and the boot scan stays out.
    r = _result(runtime, DURABLE)
    outbox = {m for m in LATER if m.startswith("durable")}
    assert outbox & set(r["face"]) == {"durable"}, r["face"]
    assert outbox & set(r["flash"]) == {"durable", "durable.flash", "durable.log"}, r["flash"]
    assert outbox & set(r["file"]) == {"durable", "durable.flash", "durable.log", "durable.files"}, r["file"]
    assert r["same"] == [True, True] and r["unknown"] == "AttributeError", r


WS = """\
import sys, json
sys.path.insert(0, %(fw)r)
from holdfast import MQTTClient

def loaded():
    return sorted(m[9:] for m in sys.modules if m.startswith("holdfast."))

r = {}
c = MQTTClient("lazy-url", "mqtt://127.0.0.1:%(tcp)d", keepalive=30)
r["mqtt_url"] = loaded()  # url.py read the URL and left
c.connect()
for i in range(5):
    c.publish(b"lazy/t", b"reading %%d" %% i, False, 1)
c.flush()
r["tcp"] = loaded()
w = MQTTClient("lazy-ws", "ws://127.0.0.1:%(ws)d/", keepalive=30)
r["ws_made"] = loaded()
w.connect()
for i in range(5):
    w.publish(b"lazy/t", b"reading %%d" %% i, False, 1)
w.flush()
r["ws"] = loaded()  # the handshake's module left after it; the framing stays
print("RESULT " + json.dumps(r))
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_websocket_code_loads_only_with_a_ws_url(runtime, mosquitto):
    # A client of a plain host or an mqtt:// URL carries nothing of the
    # WebSocket code; a ws:// client brings ws.py (its link) and keeps only
    # that: url.py and the handshake (wsopen.py) are unloaded after use.
    # The heap it adds is the bench's (docs/bench.md).
    from fleet.wsbroker import Aedes
    with Aedes() as b:
        code = WS % {"fw": os.path.join(ROOT, "firmware"), "tcp": mosquitto.port, "ws": b.port}
        p = subprocess.run([RUNTIMES[runtime], "-c", code], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (p.stdout, p.stderr)
    r = json.loads(lines[-1][7:])
    assert not {"url", "ws", "wsopen"} & set(r["mqtt_url"] + r["tcp"]), r
    assert not LATER & set(r["tcp"]), r["tcp"]
    assert not {"url", "ws", "wsopen"} & set(r["ws_made"]), r["ws_made"]
    assert "ws" in r["ws"] and not {"url", "wsopen"} & set(r["ws"]), r["ws"]
    assert set(r["ws"]) - set(r["tcp"]) == {"ws"}, r

"""A broker that cannot be reached is named: host:port and the cause in
words, still an OSError (umqtt programs catch that), the runtime's errno in
args[0] when it gave one. Under CPython and the MicroPython unix port."""

import json
import os
import subprocess
import sys

import pytest

from fleet.mosquitto import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIMES = {"cpython": sys.executable,
            "micropython": os.path.join(os.path.dirname(sys.executable), "micropython")}

SCRIPT = """\
import sys, json
sys.path.insert(0, %r)
from holdfast import MQTTClient, Unreachable
c = MQTTClient("u", %r, %d)
try:
    c.connect()
    r = {"raised": None}
except Exception as e:
    r = {"raised": e.__class__.__name__, "oserror": isinstance(e, OSError),
         "named": isinstance(e, Unreachable), "args0": e.args[0], "text": str(e),
         "last_error": str(c.last_error)}
print("RESULT " + json.dumps(r))
"""


def connect(runtime, host, port):
    code = SCRIPT % (os.path.join(ROOT, "firmware"), host, port)
    p = subprocess.run([RUNTIMES[runtime], "-c", code], capture_output=True, text=True,
                       timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (p.stdout, p.stderr)
    return json.loads(lines[-1][7:])


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_closed_port(runtime):
    port = free_port()
    r = connect(runtime, "127.0.0.1", port)
    assert r["raised"] == "Unreachable" and r["oserror"] and r["named"], r
    assert r["args0"] == 111, r  # ECONNREFUSED, for code that checks the number
    assert "connection to 127.0.0.1:%d refused: nothing listens there" % port in r["text"], r
    assert r["last_error"] == r["text"], r


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_host_name_that_does_not_resolve(runtime):
    # .invalid never resolves (RFC 6761).
    r = connect(runtime, "broker.invalid", 1883)
    assert r["raised"] == "Unreachable" and r["oserror"] and r["named"], r
    assert "cannot resolve the host name 'broker.invalid' (port 1883)" in r["text"], r
    if runtime == "cpython":
        # socket.gaierror's code (EAI_NONAME -2, or EAI_AGAIN -3 without a resolver)
        assert isinstance(r["args0"], int) and r["args0"] < 0, r


class Banner:
    """A TCP server that is not an MQTT broker: it answers every connection
    with banner (an HTTP reply, an SSH greeting), then holds it open."""

    def __init__(self, banner):
        import socket
        import threading
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(4)
        self.port = self.s.getsockname()[1]
        self.banner = banner
        self.conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.s.accept()
            except OSError:
                return
            self.conns.append(conn)
            conn.sendall(self.banner)

    def close(self):
        self.s.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
@pytest.mark.parametrize("banner", [b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
                                    b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"])
def test_a_server_that_is_not_a_broker(runtime, banner):
    # Its first bytes would decode as some packet (0x48, "H": PUBACK with
    # flags 8; 0x53, "S": PUBREC with flags 3): anything but CONNACK in answer
    # to CONNECT says "not an MQTT broker at host:port", with what it sent.
    b = Banner(banner)
    try:
        r = connect(runtime, "127.0.0.1", b.port)
    finally:
        b.close()
    assert r["raised"] == "MQTTProtocolError" and not r["oserror"], r
    assert r["text"].startswith("not an MQTT broker at 127.0.0.1:%d: it answered CONNECT with b'%s"
                                % (b.port, banner[:8].decode())), r
    assert r["last_error"] == r["text"], r


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_silent_server_is_asked_about_the_protocol_level(runtime):
    # A broker that does not speak the level asked for may say nothing at
    # all (as a server that is no broker): the timeout names the level and
    # that level=5 exists.
    b = Banner(b"")
    try:
        code = SCRIPT.replace('MQTTClient("u", %r, %d)', 'MQTTClient("u", %r, %d, timeout_ms=300)')
        code = code % (os.path.join(ROOT, "firmware"), "127.0.0.1", b.port)
        p = subprocess.run([RUNTIMES[runtime], "-c", code], capture_output=True, text=True, timeout=120)
    finally:
        b.close()
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    assert r["raised"] == "MQTTTimeout" and r["oserror"], r
    assert r["text"].startswith("no CONNACK within 300 ms: is it an MQTT broker, and does it speak"
                                " protocol level 4?") and "5: MQTT 5" in r["text"], r


LEVEL6 = """\
import sys
sys.path.insert(0, %r)
from holdfast import MQTTClient
try:
    MQTTClient("u", "127.0.0.1", 1883, level=6)
    print("RESULT no error")
except ValueError as e:
    print("RESULT", e)
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_protocol_level_out_of_range_names_the_three(runtime):
    # Refused when the client is made, before any link.
    p = subprocess.run([RUNTIMES[runtime], "-c", LEVEL6 % os.path.join(ROOT, "firmware")],
                       capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "RESULT protocol level 6 is not 3 (MQTT 3.1), 4 (MQTT 3.1.1) or 5 (MQTT 5)", \
        p.stdout + p.stderr

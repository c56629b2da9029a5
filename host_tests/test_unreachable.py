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

# The non-blocking TCP connect the blocking client reconnects with
# (net.dial, net.connected), against real sockets, under CPython and MicroPython.
import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
RUNTIMES = {"cpython": sys.executable, "micropython": os.path.join(BIN, "micropython")}


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_connect_to_a_broker_that_stopped_answering_never_waits(runtime):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run([RUNTIMES[runtime], os.path.join(HERE, "connect_scenario.py"), str(port)],
                       capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (p.stdout, p.stderr)
    r = json.loads(lines[-1][7:])
    assert r["pending_steps"] == 20, r  # each step returned at once, still connecting
    assert r["connected"], r  # and the connect completes once the broker takes it
    assert r["refused"] == 111, r  # ECONNREFUSED, as an OSError

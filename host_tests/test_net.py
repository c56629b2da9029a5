# The non-blocking TCP connect the blocking client reconnects with
# (front.dial, front.connected), against real sockets, under CPython and MicroPython.
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
    assert r["timeout"] == ["Unreachable", 110, "no TCP connection to 127.0.0.1:%d within 100 ms" % port], r
    assert r["pending_steps"] == 20, r  # each step returned at once, still connecting
    assert r["connected"], r  # and the connect completes once the broker takes it
    assert r["refused"] == 111, r  # ECONNREFUSED, as an OSError


def test_the_wait_on_a_socket_is_its_links_and_goes_with_it():
    # The blocking client waits on its link's socket through one poll object
    # per link (MQTTClient._io_wait): a closed link's socket left in it
    # would be reported at once by every later wait, which would then spin.
    from holdfast.client import MQTTClient
    cl = MQTTClient(b"d", "127.0.0.1")
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        cl.sock = a
        assert not cl._io_wait(0)  # nothing to read, nothing queued
        cl.session.tx_end = 1  # bytes queued: a writable socket ends the wait
        assert cl._io_wait(0)
        cl.session.tx_end = 0
        assert not cl._io_wait(0)  # the mask follows what the session has queued
        cl._close()  # the link goes, and its socket is closed
        cl.sock = c
        assert not cl._io_wait(50)  # the closed socket does not end the new link's wait
        d.send(b"x")
        assert cl._io_wait(1000)
    finally:
        for s in (b, c, d):
            s.close()

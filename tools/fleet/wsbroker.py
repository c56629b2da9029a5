"""MQTT brokers with a WebSocket listener, on a free loopback port (tests, bench).

    from fleet.wsbroker import Aedes, Amqtt
    with Aedes() as b:                  # ws://127.0.0.1:b.port/
        ...
    with Aedes(tls=(key, cert)) as b:   # wss://
    with Aedes(log=True) as b:          # b.published(): every PUBLISH that arrived
        b.kill(); b.start()             # same port; aedes keeps nothing in memory
    with Amqtt() as b:                  # amqtt's ws listener (and a TCP one: b.tcp_port)

Debian's mosquitto has no WebSocket listener, so these stand in:
aedes (npm, installed into build/wsbrokers by `make wsbrokers`, part of
`make setup`) through tools/fleet/wsbroker.mjs, and amqtt (PyPI, in the venv).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from fleet.mosquitto import BrokerError, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = os.path.join(ROOT, "build", "wsbrokers", "node_modules")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wsbroker.mjs")
HOST = "127.0.0.1"


def make_pki(d):
    """A test CA and a certificate for localhost and 127.0.0.1 it signed, made
    with trustme, as files in directory d: (keyfile, certfile, cafile) for
    Aedes(tls=...), Amqtt(tls=...) and the client's ssl_params cafile."""
    import trustme
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    key, cert, cafile = (os.path.join(d, n) for n in ("key.pem", "cert.pem", "ca.pem"))
    leaf.private_key_pem.write_to_path(key)
    leaf.cert_chain_pems[0].write_to_path(cert)
    ca.cert_pem.write_to_path(cafile)
    return key, cert, cafile


def _wait_port(port, proc, what, timeout=20.0):
    import socket
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise BrokerError("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection((HOST, port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BrokerError("%s does not listen on %d after %.0f s" % (what, port, timeout))


class _Process:
    host = HOST

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._halt(signal.SIGTERM)

    def kill(self):
        self._halt(signal.SIGKILL)

    def _halt(self, sig):
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Aedes(_Process):
    """aedes over WebSockets (ws, or wss with tls=(keyfile, certfile)).
    log=True: published() lists every PUBLISH that arrived from a client
    (logged before it is acknowledged), across restarts, as (topic, payload, qos)."""

    def __init__(self, port=None, tls=None, log=False, tcp=False):
        if not os.path.isdir(os.path.join(MODULES, "aedes")):
            raise BrokerError("aedes is not installed in build/wsbrokers: run make wsbrokers (part of make setup)")
        self.port = port or free_port()
        self.tls = tls
        self.log = log
        self.tcp_port = free_port() if tcp else None  # tcp=True: plain MQTT on the same broker too
        self.proc = None
        self._published = []
        self._lock = threading.Lock()

    def start(self):
        cmd = ["node", SCRIPT, str(self.port)]
        if self.tls:
            cmd += ["--tls", self.tls[0], self.tls[1]]
        if self.log:
            cmd.append("--log")
        if self.tcp_port:
            cmd += ["--tcp", str(self.tcp_port)]
        env = dict(os.environ, WSBROKER_MODULES=MODULES)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "READY":
            self.kill()
            raise BrokerError("aedes did not start on port %d (%r)" % (self.port, line))
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        return self

    def _read(self, out):
        for line in out:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self._published.append((d["t"], d["p"], d["q"]))

    def published(self):
        with self._lock:
            return list(self._published)


class Amqtt(_Process):
    """amqtt with a WebSocket listener on port (and its TCP one on tcp_port);
    tls=(keyfile, certfile): the WebSocket listener over TLS (wss)."""

    def __init__(self, port=None, tls=None):
        self.port = port or free_port()
        self.tls = tls
        self.tcp_port = free_port()
        self.proc = None
        self.dir = tempfile.mkdtemp(prefix="hf-amqtt-")

    def start(self):
        conf = os.path.join(self.dir, "amqtt.yaml")
        with open(conf, "w") as f:
            f.write("listeners:\n"
                    "  default:\n    type: tcp\n    bind: 127.0.0.1:%d\n"
                    "  ws:\n    type: ws\n    bind: 127.0.0.1:%d\n%s"
                    "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n    allow_anonymous: true\n"
                    "  amqtt.plugins.sys.broker.BrokerSysPlugin:\n    sys_interval: 0\n"
                    % (self.tcp_port, self.port,
                       "    ssl: true\n    keyfile: %s\n    certfile: %s\n" % self.tls if self.tls else ""))
        exe = os.path.join(os.path.dirname(sys.executable), "amqtt")
        self.proc = subprocess.Popen([exe, "-c", conf], stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.dir, "amqtt.log"), "w"))
        _wait_port(self.port, self.proc, "amqtt")
        return self

    def logtext(self):
        with open(os.path.join(self.dir, "amqtt.log"), errors="replace") as f:
            return f.read()

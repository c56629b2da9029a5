"""A second MQTT 5 broker for tests: mqttools' (PyPI mqttools, `mqttools
broker`), written by neither us nor the mosquitto project, on a free
loopback port.

    from fleet.v5broker import Mqttools
    with Mqttools() as b:
        connect(b.host, b.port)

What it is: a small asyncio broker that speaks MQTT 5 only, QoS 0 only (its
CONNACK says Maximum QoS 0), keeps retained messages and forwards PUBLISH
properties; no persistence, no authentication.
"""

import signal
import subprocess
import sys
import time

from fleet.mosquitto import HOST, READY_TIMEOUT, BrokerError, Mosquitto, free_port


class Mqttools:
    host = HOST

    def __init__(self):
        self.port = None
        self.proc = None

    def start(self):
        for attempt in range(3):
            self.port = free_port()
            try:
                self._spawn()
                return self
            except BrokerError:
                if attempt == 2:
                    raise

    def _spawn(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mqttools", "broker", "--host", self.host, "--port", str(self.port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + READY_TIMEOUT
        while not Mosquitto._accepts(self):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                err = self.proc.stderr.read().decode(errors="replace")
                self.proc.stderr.close()
                self.proc = None
                raise BrokerError("mqttools broker exited with status %s on start (port %s): %s"
                                  % (code, self.port, err))
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerError("mqttools broker did not accept connections on %s:%s within %.0fs"
                                  % (self.host, self.port, READY_TIMEOUT))
            time.sleep(0.02)

    def stop(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stderr.close()
            self.proc = None

    close = stop

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

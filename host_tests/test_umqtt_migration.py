"""Moving a umqtt program to holdfast by changing its import line.

The programs in host_tests/umqtt_programs/ are written as umqtt.simple and
umqtt.robust users write them (micropython-lib's examples: publish,
subscribe, an LED switched from a callback, a reconnect loop catching
OSError). Each test rewrites exactly three lines of one of them:

    from umqtt.simple import ...   ->  from holdfast import ...
    SERVER = "..."                 ->  SERVER = "127.0.0.1"
    PORT = 1883                    ->  PORT = <the private mosquitto's port>

and runs it on the MicroPython unix port (.venv/bin/micropython, with
MICROPYPATH = firmware/ and .frozen). A paho client on the host publishes
to the programs and watches what they publish. Every program ends by
itself; the timeouts below only bound a failure.
"""

import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time

import paho.mqtt.client as paho
import pytest

from fleet.mosquitto import Mosquitto, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROGRAMS = os.path.join(HERE, "umqtt_programs")
MICROPYTHON = os.path.join(os.path.dirname(sys.executable), "micropython")
BOUND = 60.0  # seconds; only a failing run gets near it


def migrated(name, port, tmp_path):
    """The program with its import and broker lines changed; its path."""
    with open(os.path.join(PROGRAMS, name)) as f:
        src = f.read()
    for pattern, repl in ((r"^from umqtt\.(simple|robust) import ", "from holdfast import "),
                          (r"^SERVER = .*$", 'SERVER = "127.0.0.1"'),
                          (r"^PORT = .*$", "PORT = %d" % port)):
        src, n = re.subn(pattern, repl, src, flags=re.M)
        assert n == 1, "%s: %r matched %d lines" % (name, pattern, n)
    path = tmp_path / name
    path.write_text(src)
    return str(path)


class Program:
    """A MicroPython process whose output is read line by line as it comes."""

    def __init__(self, path):
        env = dict(os.environ)
        env["MICROPYPATH"] = os.path.join(ROOT, "firmware") + ":.frozen"
        self.proc = subprocess.Popen([MICROPYTHON, path], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        self.lines = []
        self._q = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def expect(self, pattern):
        """Waits for an output line matching pattern; returns the match."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + BOUND
        while True:
            try:
                line = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail("no line matching %r within %.0f s; output:\n%s"
                            % (pattern, BOUND, "\n".join(self.lines)))
            if line is None:
                self._q.put(None)
                pytest.fail("program ended (status %s) without a line matching %r; output:\n%s"
                            % (self.proc.wait(), pattern, "\n".join(self.lines)))
            self.lines.append(line)
            m = rx.search(line)
            if m:
                return m

    def finish(self):
        """Waits for the program to end by itself; its output."""
        try:
            status = self.proc.wait(BOUND)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            status = "killed after %.0f s" % BOUND
        self._reader.join(10)
        while True:
            try:
                line = self._q.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        out = "\n".join(self.lines)
        assert status == 0, "exit status %s; output:\n%s" % (status, out)
        return out

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join()  # it ends at the end of the output; only then close it
        self.proc.stdout.close()


class Observer:
    """A paho client on the host: publishes to the programs, collects what
    they publish on its subscription."""

    def __init__(self, broker, topic=None):
        self.got = []
        self._cv = threading.Condition()
        self._subscribed = threading.Event()
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="observer-%d" % os.getpid())
        self.c.on_message = self._on_message
        self.c.on_subscribe = lambda *a: self._subscribed.set()
        self.c.connect(broker.host, broker.port)
        self.c.loop_start()
        if topic:
            self.c.subscribe(topic, qos=1)
            assert self._subscribed.wait(BOUND), "no SUBACK for the observer"

    def _on_message(self, client, userdata, msg):
        with self._cv:
            self.got.append(msg.payload)
            self._cv.notify_all()

    def wait_for(self, n):
        with self._cv:
            self._cv.wait_for(lambda: len(self.got) >= n, BOUND)
            return list(self.got)

    def send(self, topic, *payloads):
        for p in payloads:
            self.c.publish(topic, p, qos=1).wait_for_publish(BOUND)

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


@pytest.fixture
def observer(mosquitto):
    made = []

    def make(topic=None):
        made.append(Observer(mosquitto, topic))
        return made[-1]
    yield make
    for o in made:
        o.close()


def run(path):
    p = Program(path)
    try:
        return p.finish()
    finally:
        p.close()


def test_publish_program(mosquitto, observer, tmp_path):
    o = observer("migrate/readings")
    out = run(migrated("pub.py", mosquitto.port, tmp_path))
    assert "published 6 messages to migrate/readings" in out, out
    got = o.wait_for(6)
    assert got == [b"reading %d" % i for i in range(5)] + [b"last"], got


def test_subscribe_program(mosquitto, observer, tmp_path):
    p = Program(migrated("sub.py", mosquitto.port, tmp_path))
    try:
        p.expect(r"^subscribed to migrate/cmd$")
        observer().send("migrate/cmd", b"hello", b"world", b"stop")
        out = p.finish()
    finally:
        p.close()
    assert out.splitlines()[1:] == ["(b'migrate/cmd', b'hello')", "(b'migrate/cmd', b'world')",
                                    "(b'migrate/cmd', b'stop')", "done"], out


def test_led_program_with_check_msg(mosquitto, observer, tmp_path):
    p = Program(migrated("sub_led.py", mosquitto.port, tmp_path))
    try:
        p.expect(r"^Connected to 127\.0\.0\.1, subscribed to b'migrate/led' topic$")
        observer().send("migrate/led", b"on", b"toggle", b"toggle", b"off", b"on", b"bye")
        out = p.finish()
    finally:
        p.close()
    assert out.splitlines()[1:] == ["led on -> lit", "led toggle -> dark", "led toggle -> lit",
                                    "led off -> dark", "led on -> lit", "led bye -> lit",
                                    "led level 0"], out


class ClosingListener:
    """Accepts TCP connections on port and closes them at once: a port that
    is open but where no MQTT broker answers (a broker still starting, a
    proxy without its backend)."""

    def __init__(self, port):
        self.s = socket.socket()
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.s.bind(("127.0.0.1", port))
        self.s.listen(8)
        self.s.settimeout(0.1)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.s.accept()
            except socket.timeout:
                continue
            conn.close()

    def close(self):
        self._stop.set()
        self._t.join()
        self.s.close()


def test_reconnect_loop_catching_oserror(tmp_path):
    # Nothing listens, then a port that closes every connection, then the
    # broker: the program must see each failure as an OSError it can catch.
    port = free_port()
    p = Program(migrated("robust.py", port, tmp_path))
    broker = Mosquitto(port=port, workdir=str(tmp_path / "broker"))
    try:
        p.expect(r"^broker not reachable, retrying: .*connection to 127\.0\.0\.1:%d refused" % port)
        lst = ClosingListener(port)
        try:
            p.expect(r"^broker not reachable, retrying: .*(reset before CONNACK|instead of answering CONNECT)")
        finally:
            lst.close()
        broker.start()
        p.expect(r"^connected$")
        out = p.finish()
    finally:
        p.close()
        broker.close()
    assert out.splitlines()[-1] == "received 0 1 2 3 4", out


INVALID_FILTER = """\
from holdfast import MQTTClient
c = MQTTClient(b"bad-filter", "127.0.0.1", %d)
c.connect()
try:
    c.subscribe(b"a/#/b")
    print("subscribe: no error")
except Exception as e:
    print("subscribe raised", e.__class__.__name__, e)
print("still connected", c.isconnected())
print("then granted", c.subscribe(b"a/+/b"))
c.disconnect()
"""


def test_an_invalid_filter_raises_from_subscribe(mosquitto, tmp_path):
    # umqtt.simple sends it and mosquitto drops the link, so subscribe()
    # raises there (OSError -1). holdfast raises from subscribe() too, before
    # sending anything, with the cause in words, and the link stays up.
    path = tmp_path / "bad_filter.py"
    path.write_text(INVALID_FILTER % mosquitto.port)
    out = run(str(path)).splitlines()
    assert out[0].startswith("subscribe raised ValueError ") and "wildcard" in out[0], out
    assert out[1:] == ["still connected True", "then granted 0"], out

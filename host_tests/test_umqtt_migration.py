"""Moving a umqtt program to holdfast by changing its import line.

The programs in host_tests/umqtt_programs/ are written as umqtt.simple and
umqtt.robust users write them (micropython-lib's examples: publish,
subscribe, an LED switched from a callback, a reconnect loop catching
OSError; umqtt.robust's publish/check_msg/wait_msg loops with DEBUG on and
delay() overridden). Each test rewrites exactly three lines of one of them:

    from umqtt.simple import ...   ->  from holdfast import ...
    from umqtt.robust import ...   ->  from holdfast.robust import ...
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
import signal
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
BOUND = float(os.environ.get("HF_BOUND", 60))  # seconds; only a failing run gets near it


def migrated(name, port, tmp_path):
    """The program with its import and broker lines changed; its path."""
    with open(os.path.join(PROGRAMS, name)) as f:
        src = f.read()
    for pattern, repl in ((r"^from umqtt\.(simple|robust) import ",
                           lambda m: "from holdfast%s import " % (".robust" if m.group(1) == "robust" else "")),
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
            self.proc.send_signal(signal.SIGINT)  # MicroPython prints where it was
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            status = "stopped after %.0f s" % BOUND
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


# -- umqtt.robust programs, with holdfast.robust --------------------------------
# Each runs against its own mosquitto (its port kept across a kill), watched by
# a paho client whose session the broker keeps (clean_session=False, QoS 1):
# the broker's database is written (SIGUSR1) before the fault, so the
# observer's subscription outlives the kill and what the program delivers
# while the observer is away waits for it. What the program published at
# QoS 1 must all arrive; a re-sent copy may arrive twice (at least once).


class Persistent(Observer):
    """An observer whose session and subscription the broker keeps."""

    def __init__(self, broker, topic):
        self.got = []
        self._cv = threading.Condition()
        self._subscribed = threading.Event()
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="watch-%d" % os.getpid(),
                             clean_session=False)
        self.c.reconnect_delay_set(0.1, 0.5)  # back soon after the restart
        self.c.on_message = self._on_message
        self.c.on_subscribe = lambda *a: self._subscribed.set()
        self.c.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, qos=1)
        self.c.connect(broker.host, broker.port)
        self.c.loop_start()
        assert self._subscribed.wait(BOUND), "no SUBACK for the observer"

    def wait_for_all(self, n):
        with self._cv:
            self._cv.wait_for(lambda: len(set(self.got)) >= n, BOUND)
            return list(self.got)


def saved(broker):
    """Has the broker write its database (SIGUSR1), and waits until it has:
    mosquitto writes mosquitto.db.new, then renames it over mosquitto.db."""
    db = os.path.join(broker.workdir, "mosquitto.db")

    def stamp():
        try:
            st = os.stat(db)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    before = stamp()
    os.kill(broker.pid, signal.SIGUSR1)
    deadline = time.monotonic() + BOUND
    while stamp() == before or os.path.exists(db + ".new"):
        assert time.monotonic() < deadline, "mosquitto wrote no database:\n" + broker.log()
        time.sleep(0.05)


@pytest.fixture
def broker(tmp_path):
    b = Mosquitto(workdir=str(tmp_path / "broker")).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        os.kill(b.pid, signal.SIGCONT)  # a test that failed with it stopped
    b.close()


def robust_log(out):
    """What log() printed (DEBUG on): (in_reconnect, exception class) in order."""
    return [(m.group(1) == "mqtt reconnect", m.group(2))
            for m in re.finditer(r"^(mqtt|mqtt reconnect): (\w+)\(", out, re.M)]


def publishing(broker, topic, program, tmp_path):
    """(observer, program) once the program has connected, the broker's
    database holds the observer's session, and 30 readings are out."""
    o = Persistent(broker, topic)
    p = Program(migrated(program, broker.port, tmp_path))
    try:
        p.expect(r"^connected$")
        saved(broker)
        p.expect(r"^sent 30$")
    except BaseException:
        p.close()
        o.close()
        raise
    return o, p


def test_robust_publisher_rides_out_a_broker_killed_and_restarted(broker, tmp_path):
    # publish(qos=1) and check_msg() in a loop, 40 readings a second: the
    # broker is killed after 30, started again once the program has waited
    # twice in delay(); the loop never sees an exception and every reading arrives.
    o, p = publishing(broker, "robust/readings", "robust_pub.py", tmp_path)
    try:
        broker.kill()
        p.expect(r"^delay 2$")
        broker.start()
        p.expect(r"^all sent, reconnected (\d+) times$")
        got = o.wait_for_all(80)
        o.send("robust/cmd", b"stop")
        out = p.finish()
    finally:
        p.close()
        o.close()
    assert sorted(set(got)) == sorted(b"%d" % i for i in range(80)), got
    assert "command stop" in out and out.splitlines()[-1] == "pending 0", out
    # umqtt.robust's sequence: the lost link logged (in_reconnect False), then
    # each refused connect logged (True) and followed by delay(1), delay(2)...
    log = robust_log(out)
    assert log[0] == (False, "LinkDown"), out
    assert log[1:] and all(e == (True, "Unreachable") for e in log[1:]), out
    delays = [int(n) for n in re.findall(r"^delay (\d+)$", out, re.M)]
    assert delays == list(range(1, len(log))), out


def test_robust_burst_waits_while_the_outbox_is_full(broker, tmp_path):
    # Readings as fast as the loop goes, nothing read between them. The broker
    # freezes (SIGSTOP: the link stays open, nothing is acknowledged): the
    # 16-message outbox fills, and publish() waits instead of raising
    # OutboxFull; the keepalive then finds the link dead, the frozen broker is
    # killed and started again, and the program goes on to its last reading.
    o, p = publishing(broker, "robust/burst", "robust_burst.py", tmp_path)
    try:
        os.kill(broker.pid, signal.SIGSTOP)
        p.expect(r"^mqtt: OutboxFull\(")
        p.expect(r"^mqtt: LinkDown\(")
        broker.kill()
        broker.start()
        out = p.finish()
        got = o.wait_for_all(120)
    finally:
        p.close()
        o.close()
    assert sorted(set(got)) == sorted(b"%d" % i for i in range(120)), got
    assert out.splitlines()[-2:] == ["sent 120", "pending 0"], out
    # No reading went missing in the program either: each publish() returned once.
    assert re.findall(r"^sent (\d+)$", out, re.M) == [str(i) for i in range(1, 121)], out


def test_robust_subscriber_gets_what_was_sent_while_the_broker_was_down(broker, tmp_path):
    # wait_msg() in a loop with a kept session (connect(False)): the broker is
    # killed while the program waits; messages sent once it is back reach it.
    p = Program(migrated("robust_sub.py", broker.port, tmp_path))
    try:
        p.expect(r"^subscribed$")
        o = Observer(broker)
        o.send("robust/in", b"before")
        p.expect(r"^got before$")
        o.close()
        saved(broker)
        broker.kill()
        p.expect(r"^mqtt reconnect: Unreachable\(")
        broker.start()
        o = Observer(broker)
        try:
            o.send("robust/in", b"after", b"stop")
        finally:
            o.close()
        out = p.finish()
    finally:
        p.close()
    assert out.splitlines()[-3:] == ["got after", "got stop", "received 3"], out
    assert robust_log(out)[0] == (False, "LinkDown"), out


# -- holdfast.robust's own calls, as umqtt.robust 1.0.3 defines them -----------

def test_robust_calls_are_umqtt_robusts(monkeypatch, capsys):
    import holdfast.robust as robust
    from holdfast.errors import LinkDown

    slept = []
    monkeypatch.setattr(robust, "sleep", slept.append)
    c = robust.MQTTClient(b"calls", "127.0.0.1", free_port())
    assert (c.DELAY, c.DEBUG) == (2, False)
    assert c.c.reconnect is False  # the engine's own reconnect is off: reconnect() does it
    c.delay(7)
    c.DELAY = 0.5
    c.delay(1)
    assert slept == [2, 0.5]  # DELAY seconds, whatever the attempt count
    c.log(True, OSError(1))
    assert capsys.readouterr().out == ""  # DEBUG off: silent
    c.DEBUG = True
    c.log(True, OSError(1))
    c.log(False, LinkDown("gone"))
    assert capsys.readouterr().out == "mqtt reconnect: %r\nmqtt: %r\n" % (OSError(1), LinkDown("gone"))

    # reconnect(): connect(False) until it works; log(True, e) and delay(i)
    # after each failure, i counting from 1. A subclass's connect() is the one called.
    tries = []

    class Sub(robust.MQTTClient):
        def connect(self, clean_session=True, timeout_ms=None):
            tries.append(clean_session)
            if len(tries) < 3:
                raise OSError(111)
            return True

        def delay(self, i):
            slept.append(("delay", i))

    s = Sub(b"sub", "127.0.0.1", 1)
    s.DEBUG = True
    assert s.reconnect() is True
    assert tries == [False, False, False]
    assert slept[2:] == [("delay", 1), ("delay", 2)]
    assert capsys.readouterr().out == "mqtt reconnect: %r\n" % OSError(111) * 2
    # Anything else is the holdfast client's.
    assert s.pending() == 0 and s.links == 0 and s.dropped_qos0 == 0


def test_robust_subscribe_reconnects_and_asks_again(capsys):
    # subscribe() across a lost link: the failure logged, reconnect(), and
    # the SUBSCRIBE asked again; what it returns is the granted QoS.
    import holdfast.robust as robust
    from holdfast.errors import MQTTTimeout

    calls = []

    class Sub(robust.MQTTClient):
        DEBUG = True

        def reconnect(self):
            calls.append("reconnect")

    s = Sub(b"sub2", "127.0.0.1", 1)

    def subscribe(topic, qos=0):
        calls.append(("subscribe", topic, qos))
        if len(calls) == 1:
            raise MQTTTimeout("no SUBACK within 10000 ms")
        return 1

    s.c.subscribe = subscribe
    assert s.subscribe(b"cmd/#", 1) == 1
    assert calls == [("subscribe", b"cmd/#", 1), "reconnect", ("subscribe", b"cmd/#", 1)]
    assert capsys.readouterr().out == "mqtt: %r\n" % MQTTTimeout("no SUBACK within 10000 ms")


ALLOC = """\
import gc
from holdfast.robust import MQTTClient
c = MQTTClient("robust-alloc", "127.0.0.1", %d)
c.connect()
for q in (0, 1):
    for i in range(50):  # the buffers and the outbox reach their steady state
        c.publish(b"r/t", b"21.5", False, q)
    c.flush(5000)
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    for i in range(200):
        c.publish(b"r/t", b"21.5", False, q)
        c.check_msg()  # the PUBACKs are read and handled in the window
    b = gc.mem_alloc()
    gc.enable()
    print("qos", q, b - a, c.flush(5000))
c.disconnect()
"""


def test_robust_publish_allocates_nothing(mosquitto, tmp_path):
    # holdfast.robust's publish() and check_msg() around the engine's:
    # 0 bytes per QoS 0 and per acknowledged QoS 1 publish, as the client's.
    path = tmp_path / "alloc.py"
    path.write_text(ALLOC % mosquitto.port)
    assert run(str(path)).splitlines() == ["qos 0 0 True", "qos 1 0 True"]

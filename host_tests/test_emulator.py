"""The emulated board end to end (CPython): tools/board/emulator.py driven by
the real mpremote, tools/board/deploy.py onto it, and the board's app (boards/unix +
boards/common) publishing readings to a private mosquitto, across power cuts.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import paho.mqtt.client as mqtt
import pytest

from board.emulator import Emulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
HEAP = "256k"
# The heap the app needs for 500 readings with the flash outbox and its
# command topic subscribed: it runs in 73k, not in 72k (docs/boards.md; the
# app of before it kept only its loop on the heap needed 81k); this test
# holds it, with 7 KB of margin.
SMALL_HEAP = "80k"
SECRET = "pw-never-printed-42"


def mpremote(emu, *args, timeout=60, resume=True):
    proc = subprocess.run([sys.executable, "-m", "mpremote", "connect", emu.url]
                          + (["resume"] if resume else []) + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out
    return out


def deploy(emu, config=None):
    cmd = [sys.executable, "-m", "board.deploy", "--board", "unix", "--port", emu.url]
    if config:
        cmd += ["--config", config]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                          env=dict(os.environ, PYTHONPATH=TOOLS))
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out
    return out


class Readings:
    """A paho subscriber collecting every reading (parsed) on the telemetry topics."""

    def __init__(self, broker):
        self.items = []
        self.device = None  # set: only this device's readings are kept
        self.cond = threading.Condition()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                             client_id="test-readings-%d" % os.getpid())
        self.c.on_message = self._on_message
        self.c.connect(broker.host, broker.port)
        self.c.subscribe("holdfast/+/telemetry", 1)
        self.c.loop_start()

    def _on_message(self, client, userdata, m):
        r = json.loads(m.payload)
        if self.device is not None and r.get("d") != self.device:
            return
        with self.cond:
            self.items.append((m.topic, r))
            self.cond.notify_all()

    def wait(self, pred, timeout=30.0, what="readings"):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred(self.items):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for %s; got %d: %r"
                                         % (what, len(self.items), self.items[-3:]))
                self.cond.wait(left)
            return list(self.items)

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()


@pytest.fixture
def readings(mosquitto):
    r = Readings(mosquitto)
    yield r
    r.close()


@pytest.fixture
def board(tmp_path):
    emu = Emulator(str(tmp_path / "flash"), heap=HEAP)
    yield emu
    emu.stop()
    if emu.board_pid:
        _gone(emu.board_pid)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _gone(pid, timeout=5.0):
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError("board process %d outlived its emulator" % pid)
        time.sleep(0.02)


def _follow(readings, tmp_path):
    """Keep only the readings of the board in tmp_path/flash; its device id."""
    uid = (tmp_path / "flash" / "unique_id").read_text().strip()
    readings.device = "unix-" + uid
    return uid


def _config(tmp_path, broker, **kw):
    cfg = {"broker": broker.host, "port": broker.port, "interval_ms": 100, "qos": 1,
           "user": "board", "password": SECRET, "credentials_in_clear": True}
    cfg.update(kw)
    path = str(tmp_path / "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def test_mpremote_drives_the_emulator(board, tmp_path):
    board.start()
    out = mpremote(board, "exec", "import os,sys; print('cwd', os.getcwd(), sys.path)")
    assert "cwd / ['', '.frozen', '/lib']" in out, out
    data = bytes(range(256)) * 40 + b"\r\n\x03\x04 end"
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    mpremote(board, "fs", "mkdir", ":/data", "+", "fs", "cp", str(src), ":/data/blob.bin")
    # The board's "/" is its flash directory, nothing outside it.
    assert (tmp_path / "flash" / "data" / "blob.bin").read_bytes() == data
    back = tmp_path / "back.bin"
    mpremote(board, "fs", "cp", ":/data/blob.bin", str(back))
    assert back.read_bytes() == data
    out = mpremote(board, "fs", "ls", ":/")
    assert "data/" in out and "unique_id" in out, out


def test_the_board_runs_the_micropython_it_is_given(tmp_path):
    # exe=: what the bench runs the app on a 32-bit build with. A wrapper that
    # leaves a mark proves the emulator ran it, across a soft reset too.
    from board.emulator import micropython_exe
    mark = tmp_path / "ran"
    exe = tmp_path / "mp"
    exe.write_text("#!/bin/sh\necho x >> %s\nexec %s \"$@\"\n" % (mark, micropython_exe()))
    exe.chmod(0o755)
    with Emulator(str(tmp_path / "flash"), exe=str(exe)) as emu:
        assert "4" in mpremote(emu, "exec", "print(2 + 2)")
        mpremote(emu, "exec", "print(1)", resume=False)  # a soft reset starts it again
    assert mark.read_text().split() == ["x", "x"]


def test_soft_reset_restarts_the_board_and_keeps_its_flash(board):
    # mpremote without `resume` soft-resets the board on entry, as a newcomer
    # types it: the board must come back each time, its files kept.
    board.start()
    out = mpremote(board, "exec", "open('kept.txt', 'w').write('before'); print('one')",
                   resume=False)
    assert "one" in out, out
    out = mpremote(board, "exec", "print(open('kept.txt').read())", resume=False)
    assert "before" in out, out
    assert board.running
    out = mpremote(board, "exec", "print(2 + 2)")  # and with resume, as before
    assert "4" in out, out
    assert board.console_text().count("soft reboot") == 2


def test_sigkill_is_a_power_cut(board):
    board.start()
    mpremote(board, "exec", "f=open('/kept','w'); f.write('before the cut'); f.close()")
    pid = board.board_pid
    assert _alive(pid)
    board.kill()  # SIGKILL to the emulator: the board dies with it
    _gone(pid)
    port = board.port
    board.start()  # same flash, same port
    assert board.port == port
    out = mpremote(board, "exec", "print(open('/kept').read())")
    assert "before the cut" in out, out


def _by_boot(items):
    boots = {}
    for _, r in items:
        boots.setdefault(r["b"], []).append(r["s"])
    return boots


def test_deploy_run_and_restart(board, readings, mosquitto, tmp_path):
    config = _config(tmp_path, mosquitto)
    board.start()
    t0 = time.time()
    out = deploy(board, config)
    assert "copied  /lib/holdfast/client.mpy" in out, out
    assert "copied  /config.json" in out, out
    assert SECRET not in out
    quiet = board.console_text()  # a normal deploy: nothing alarming on the console
    assert "Traceback" not in quiet and "\x01" not in quiet and "\x04" not in quiet, quiet[-2000:]
    out = deploy(board)  # unchanged: nothing copied, the board's config kept
    assert re.search(r"deploy: \d+ copied, [1-9]\d* skipped, 0 removed", out), out
    for path in re.findall(r"copied  (\S+)", out):
        # Only a source edited meanwhile (a shared work tree) is copied again.
        name = path.rsplit("/", 1)[1].replace(".mpy", ".py")
        src = os.path.join(ROOT, "firmware", "holdfast", name) if path.startswith("/lib/") \
            else os.path.join(ROOT, "boards", "common", name)
        assert os.path.exists(src) and os.path.getmtime(src) > t0, (path, out)
    uid = _follow(readings, tmp_path)

    board.kill()
    board.start(run=True)
    items = readings.wait(lambda it: len(it) >= 15, what="15 readings of boot 1")
    assert SECRET not in board.console_text()
    topic, r = items[0]
    assert topic == "holdfast/unix-%s/telemetry" % uid
    assert set(r) >= {"d", "b", "s", "q", "t", "u"}, r
    assert set(r) <= {"d", "b", "s", "q", "t", "u", "w"}, r
    assert r["d"] == "unix-" + uid and r["q"] == 1 and r["b"] == 1, r
    assert isinstance(r["t"], float) and isinstance(r["u"], int), r
    first = sorted(set(_by_boot(items)[1]))
    assert first == list(range(len(first))), first  # from 0, one by one

    board.kill()  # power cut mid-run
    board.start(run=True)
    items = readings.wait(lambda it: len(_by_boot(it).get(2, ())) >= 10,
                          what="10 readings of boot 2")
    boots = _by_boot(items)
    one, two = set(boots[1]), set(boots[2])
    assert not one & two, "a sequence number was used twice: %r" % sorted(one & two)
    # QoS 1 with the flash outbox: every number from the first on arrives,
    # including the ones stored before the cut and sent after the reboot.
    everything = sorted(one | two)
    assert everything == list(range(everything[-1] + 1)), everything
    assert min(two) == max(one) + 1, (max(one), min(two))
    board.wait_console(r"boot 2 next s=%d" % min(two))


def test_bad_config_waits_without_losing_readings(board, readings, mosquitto, tmp_path):
    board.start()
    _follow(readings, tmp_path)
    deploy(board, _config(tmp_path, mosquitto))
    board.kill()
    board.start(run=True)
    readings.wait(lambda it: len(it) >= 3)
    board.wait_console(r"device unix-\w+ boot 1")
    board.kill()
    outbox = tmp_path / "flash" / "outbox"
    stored = _snapshot(outbox)
    with open(tmp_path / "flash" / "config.json", "w") as f:
        f.write("{not json")
    board.start(run=True)
    board.wait_console(r"config: config.json is not valid JSON - the app waits", timeout=15)
    # No crash, no boot loop: after the message the board answers on its
    # REPL (which interrupts the app), and up to then it printed no
    # traceback, did not boot again and did not say it again.
    assert "alive" in mpremote(board, "exec", "print('alive')")
    assert board.running
    text = board.console_text()
    assert "Traceback" not in text, text
    assert text.count("the app waits") == 1 and " boot " not in text, text
    assert _snapshot(outbox) == stored  # stored readings untouched
    board.kill()
    with open(tmp_path / "flash" / "config.json", "w") as f:
        json.dump({"broker": mosquitto.host, "port": mosquitto.port, "interval_ms": 100}, f)
    board.start(run=True)
    board.wait_console(r"device unix-\w+ boot 2", timeout=15)
    readings.wait(lambda it: any(r["b"] == 2 for _, r in it), what="a reading of boot 2")


def _snapshot(d):
    if not os.path.isdir(d):
        return {}
    return {n: (d / n).read_bytes() for n in os.listdir(d)}


def test_app_in_small_heap(board, readings, mosquitto, tmp_path):
    """The heap figure in docs/boards.md: 500 readings with the flash outbox,
    commands subscribed (a command sets the interval that makes them)."""
    board.start()
    uid = _follow(readings, tmp_path)
    deploy(board, _config(tmp_path, mosquitto, interval_ms=3600000, command_min_ms=10))
    board.kill()
    board.heap = SMALL_HEAP
    board.start(run=True)
    try:
        board.wait_console(r"commands on holdfast/unix-%s/cmd" % uid, timeout=30)
        _command(readings, uid, b'{"interval_ms": 10}')
        items = readings.wait(lambda it: any(r["s"] >= 499 for _, r in it), timeout=120,
                              what="reading 499")
    except AssertionError as e:
        raise AssertionError("%s; the board's console ends:\n%s" % (e, board.console_text()[-2000:]))
    text = board.console_text()
    assert "MemoryError" not in text, text[-2000:]
    assert "no flash outbox" not in text, text[-2000:]
    seen = set(r["s"] for _, r in items)
    assert seen >= set(range(500)), sorted(set(range(500)) - seen)[:10]


def _command(readings, uid, payload):
    """A command to the board at QoS 1, through the readings' client; back
    once the broker has it."""
    readings.c.publish("holdfast/unix-%s/cmd" % uid, payload, qos=1).wait_for_publish(10)


def _hourly_board_taking_commands(board, readings, mosquitto, tmp_path):
    """The board deployed for one reading an hour, running, subscribed to its
    command topic; its unique id."""
    board.start()
    uid = _follow(readings, tmp_path)
    deploy(board, _config(tmp_path, mosquitto, interval_ms=3600000, command_min_ms=10))
    board.kill()
    board.start(run=True)
    board.wait_console(r"commands on holdfast/unix-%s/cmd" % uid, timeout=30)
    return uid


def test_commands_change_the_interval(board, readings, mosquitto, tmp_path):
    """A board taking one reading per hour starts to report every 10 ms on a
    command; bad commands are named on the console, ignored, and lose nothing."""
    uid = _hourly_board_taking_commands(board, readings, mosquitto, tmp_path)
    # A bad interval first: named, and the hour stays (checked below: one
    # reading per hour cannot make the 30 that follow the good command).
    _command(readings, uid, b'{"interval_ms": 5}')
    board.wait_console(r"holdfast: command: 'interval_ms' must be an int of at least 10")
    _command(readings, uid, b'{"interval_ms": 10}')
    board.wait_console(r"holdfast: command: interval_ms 10 from the next reading on")
    items = readings.wait(lambda it: len(it) >= 30, what="30 readings after the command")
    bad = [
        (b"interval_ms=10", "not JSON"),
        (b"[10]", "not a JSON object"),
        (b'{"interval": 10}', "unknown key 'interval'"),
        (b'{"interval_ms": "10"}', "'interval_ms' must be an int"),
        (b'{"interval_ms": 10.5}', "'interval_ms' must be an int"),
        (b"{}", "no 'interval_ms'"),
        (b'{"interval_ms": 10, "pad": "%s"}' % (b"x" * 400), "over 320 bytes with its topic"),
    ]
    for payload, words in bad:
        _command(readings, uid, payload)
        board.wait_console(r"holdfast: command: " + re.escape(words))
    n = len(items)
    items = readings.wait(lambda it: len(it) >= n + 30, what="readings after the bad commands")
    text = board.console_text()
    assert "Traceback" not in text and text.count(" boot ") == 1, text[-2000:]
    seen = sorted(set(r["s"] for _, r in items))
    assert seen == list(range(len(seen))), seen  # nothing lost on the way


def test_command_sent_while_off_is_applied_at_boot(board, readings, mosquitto, tmp_path):
    """The broker keeps the board's session (clean_session false): a command
    sent while the board is off arrives right after it connects, before the
    app subscribes again, and is applied all the same."""
    uid = _hourly_board_taking_commands(board, readings, mosquitto, tmp_path)
    board.kill()
    _command(readings, uid, b'{"interval_ms": 10}')
    board.start(run=True)
    board.wait_console(r"holdfast: command: interval_ms 10 from the next reading on", timeout=30)
    readings.wait(lambda it: len(_by_boot(it).get(2, ())) >= 30, what="30 readings of boot 2")
    # Turned off: no subscription. The app says "broker connected" in the
    # same turn of its loop as it would have subscribed, after that.
    board.kill()
    with open(tmp_path / "flash" / "config.json", "w") as f:
        json.dump({"broker": mosquitto.host, "port": mosquitto.port, "interval_ms": 10,
                   "commands": False}, f)
    board.start(run=True)
    readings.wait(lambda it: len(_by_boot(it).get(3, ())) >= 5, what="5 readings of boot 3")
    board.wait_console(r"holdfast: broker connected")
    assert "commands on" not in board.console_text(), board.console_text()[-2000:]

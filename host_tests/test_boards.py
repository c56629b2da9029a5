"""The shared board application's logic (boards/common/app.py): config
checks and the boot counter / sequence bookkeeping, on CPython and, for the
parts a board runs, under the MicroPython unix port too."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "boards", "common"))
import app  # noqa: E402
import appboot  # noqa: E402
import appcmd  # noqa: E402
import appconfig  # noqa: E402

BOARDS = ("esp32", "rp2040", "unix")


def _write(tmp_path, obj, name="config.json"):
    path = str(tmp_path / name)
    with open(path, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))
    return path


@pytest.mark.parametrize("board", BOARDS)
def test_templates(board, tmp_path):
    path = os.path.join(ROOT, "boards", board, "config.json")
    with open(path) as f:
        raw = json.load(f)
    assert set(raw) <= set(appconfig._KEYS), set(raw) - set(appconfig._KEYS)
    if board == "unix":
        cfg = appconfig.load(path)
        assert cfg["broker"] == "127.0.0.1" and cfg["qos"] == 1
    else:  # placeholders: the board says what to fill in
        with pytest.raises(appconfig.ConfigError, match="'broker' is not set"):
            appconfig.load(path)
        raw["broker"] = "10.0.0.2"
        with pytest.raises(appconfig.ConfigError, match="'wifi' needs an 'ssid'"):
            appconfig.load(_write(tmp_path, raw))
        raw["wifi"]["ssid"] = "lab"
        assert appconfig.load(_write(tmp_path, raw))["wifi"]["ssid"] == "lab"


@pytest.mark.parametrize("cfg, message", [
    (None, "config.json on the board"),
    ("{broken", "not valid JSON"),
    ("[1, 2]", "one JSON object"),
    ({"port": 1883}, "'broker' is required"),
    ({"broker": "h", "port": "1883"}, "'port' must be of type int"),
    ({"broker": "h", "tls": 1}, "'tls' must be of type bool"),
    ({"broker": "h", "qos": True}, "'qos' must be of type int"),
    ({"broker": "h", "qos": 3}, "'qos' must be 0, 1 or 2"),
    ({"broker": "h", "interval_ms": 0}, "'interval_ms' must be an int of at least 10"),
    ({"broker": "h", "interval_ms": 518400001}, "and at most 518400000 (6 days)"),
    ({"broker": "h", "commands": "yes"}, "'commands' must be of type bool"),
    ({"broker": "h", "brokr": "x"}, "unknown key 'brokr'"),
    ({"broker": "h", "prefix": "fleet/#"}, "'prefix' must not contain '+' or '#'"),
    ({"broker": "h", "device": "a+b"}, "'device' must not contain '+', '#' or '/'"),
    ({"broker": "h", "device": "room/1"}, "'device' must not contain '+', '#' or '/'"),
    ({"broker": "h", "password": "hunter2"}, "'password' needs a 'user'"),
    ({"broker": "h", "tls": True}, "'tls' needs 'ca'"),
    ({"broker": "h", "user": "u", "password": 12345}, "'password' must be of type str"),
    ({"broker": "h", "when_full": "drop"}, "'when_full' must be \"refuse\" or \"drop_oldest\""),
    ({"broker": "h", "outbox_group": 0}, "'outbox_group' must be at least 1"),
    ({"broker": "h", "expiry_s": -5}, "'expiry_s' not negative"),
])
def test_bad_configs_are_named(cfg, message, tmp_path):
    path = str(tmp_path / "config.json") if cfg is None else _write(tmp_path, cfg)
    with pytest.raises(appconfig.ConfigError) as e:
        appconfig.load(path)
    assert message in str(e.value)
    # Values (passwords above all) never appear in the message.
    for secret in ("hunter2", "12345"):
        assert secret not in str(e.value)


def test_defaults(tmp_path):
    cfg = appconfig.load(_write(tmp_path, {"broker": "b"}))
    assert cfg["prefix"] == "holdfast" and cfg["qos"] == 1 and cfg["port"] == 0
    assert cfg["outbox_dir"] == "/outbox" and "led" not in cfg  # board default LED
    assert cfg["commands"] is True
    assert appconfig.load(_write(tmp_path, {"broker": "b", "interval_ms": 518400000}))["interval_ms"] == 518400000


@pytest.mark.parametrize("m, interval", [
    (b'{"interval_ms": 1000}', 1000),
    (b'{"interval_ms": 518400000}', 518400000),
    (b' {"interval_ms" : 60000}\n', 60000),
])
def test_commands(m, interval):
    assert appcmd.command(m) == interval


@pytest.mark.parametrize("m, words", [
    (b"", "not JSON"),
    (b"interval_ms=10", "not JSON"),
    (b'{"interval_ms": 10', "not JSON"),
    (b'"\xff"', "not JSON"),
    (b"10", "not a JSON object"),
    (b'[{"interval_ms": 10}]', "not a JSON object"),
    (b"null", "not a JSON object"),
    (b"{}", "no 'interval_ms'"),
    (b'{"interval_ms": 10, "qos": 0}', "unknown key 'qos'"),
    (b'{"Interval_ms": 10}', "unknown key 'Interval_ms'"),
    (b'{"interval_ms": "10"}', "'interval_ms' must be an int"),
    (b'{"interval_ms": 10.0}', "'interval_ms' must be an int"),
    (b'{"interval_ms": true}', "'interval_ms' must be an int"),
    (b'{"interval_ms": null}', "'interval_ms' must be an int"),
    (b'{"interval_ms": 999}', "of at least 1000"),
    (b'{"interval_ms": 10}', "of at least 1000"),   # config.json may; a command may not
    (b'{"interval_ms": -100}', "of at least 1000"),
    (b'{"interval_ms": 518400001}', "at most 518400000"),
])
def test_bad_commands_are_named(m, words):
    with pytest.raises(ValueError) as e:
        appcmd.command(m)
    assert words in str(e.value)


class FakeStore:
    """Keys as the outbox gives them: +1 per put, tail survives reboots
    unless wiped."""

    def __init__(self):
        self.tail = 0

    def put(self):
        self.tail += 1


def _boot(store, qos, path, n, full_at=()):
    """One boot taking n readings; returns (boot number, [s published])."""
    seq = appboot.seq(app.Seq, store, qos, path)
    out = []
    for i in range(n):
        s = seq.take()
        if i in full_at:  # OutboxFull: nothing stored, s not consumed
            continue
        if qos:
            store.put()
        seq.used(s, qos > 0)
        out.append(s)
    return seq.boot, out


def test_seq_qos1_is_gap_free_across_reboots(tmp_path):
    path = str(tmp_path / "state")
    store = FakeStore()
    seen = []
    for boot in range(1, 6):
        b, got = _boot(store, 1, path, 37 * boot, full_at=(3, 4) if boot == 2 else ())
        assert b == boot
        seen += got
    assert seen == list(range(len(seen))), seen  # no gap, no repeat, reboots or not


def test_seq_never_repeats_when_the_mode_or_outbox_changes(tmp_path):
    path = str(tmp_path / "state")
    store = FakeStore()
    seen = []
    for qos, n, wipe in ((1, 50, False), (0, 130, False), (0, 5, False), (2, 20, False),
                         (1, 250, True), (1, 10, False), (0, 1, True), (1, 3, False)):
        if wipe:
            store = FakeStore()  # the outbox directory was deleted
        seen += _boot(store, qos, path, n)[1]
    assert len(seen) == len(set(seen)), "repeated: %r" % sorted(s for s in set(seen) if seen.count(s) > 1)
    assert seen == sorted(seen)


def test_the_loop_keeps_the_config_keys_it_reads():
    """appboot hands the loop only LOOP_KEYS of the config: every key the
    loop (app.main) or board.network() (wifi.up on the boards with Wi-Fi)
    reads must be among them."""
    import inspect
    import re
    src = inspect.getsource(app.main)
    with open(os.path.join(ROOT, "boards", "common", "wifi.py")) as f:
        src += f.read()
    read = set(re.findall(r'cfg(?:\[|\.get\()"(\w+)"', src))
    assert {"qos", "interval_ms", "wifi", "ntp"} <= read, read  # the pattern still finds them
    assert read <= set(appboot.LOOP_KEYS), read - set(appboot.LOOP_KEYS)


def test_seq_counts_boots_that_take_no_reading(tmp_path):
    """The state is written as the boot starts, not with its first reading:
    a board that resets before one still counts the boot."""
    path = str(tmp_path / "state")
    store = FakeStore()
    assert [_boot(store, q, path, 0)[0] for q in (1, 1, 0)] == [1, 2, 3]
    assert _boot(store, 1, path, 2)[0] == 4


def test_seq_state_survives_a_torn_rename(tmp_path):
    path = str(tmp_path / "state")
    store = FakeStore()
    _boot(store, 1, path, 10)
    os.rename(path, path + ".tmp")  # cut between writing .tmp and the rename
    b, got = _boot(store, 1, path, 3)
    assert b == 2 and got == [10, 11, 12]
    with open(path, "w") as f:
        f.write('{"b":')  # torn (not on LittleFS, but on a FAT card)
    b, got = _boot(store, 1, path, 1)
    assert got == [13]  # the outbox still knows where it was


def test_payload_matches_the_contract():
    p = json.loads(app._payload("unix-ab12", 7, 1234, 1, 21.5, 812345))
    assert {k: p[k] for k in "dbsqtu"} == {"d": "unix-ab12", "b": 7, "s": 1234, "q": 1,
                                           "t": 21.5, "u": 812345}
    assert set(p) <= set("dbsqtuw")
    assert isinstance(p.get("w", 0), int)
    assert json.loads(app._payload("x", 1, 2, 0, None, 3))["t"] is None


def test_commands_are_noted_then_applied_in_order(capsys):
    """The callback only notes (4 at most, then says some were ignored);
    the loop applies them in order, each named on the console."""
    del app._cmds[:]
    app._own[:] = [b"holdfast/d/cmd", Delivered(False)]
    for m in (b'{"interval_ms": 5000}', b"oops", b'{"interval_ms": 7000}', b'{"interval_ms": 9000}',
              b'{"interval_ms": 11000}', b"{}"):
        app.on_cmd(b"holdfast/d/cmd", m)
    assert len(app._cmds) == 4
    assert appcmd.take_commands(app._cmds, 1000) == 7000
    assert capsys.readouterr().out.splitlines() == [
        "holdfast: command: interval_ms 5000 from the next reading on",
        "holdfast: command: not JSON",
        "holdfast: command: interval_ms 7000 from the next reading on",
        "holdfast: command: too many at once, some ignored",
    ]
    assert app._cmds == [] and appcmd.take_commands(app._cmds, 1000) == 1000
    app.on_cmd(b"holdfast/d/cmd", b'{"interval_ms": 10}')
    assert appcmd.take_commands(app._cmds, 1000) == 1000  # a bad one changes nothing
    assert "'interval_ms' must be an int of at least 1000" in capsys.readouterr().out


class Delivered:
    """What the client says of the message a callback is given."""

    def __init__(self, retained):
        self.retained = retained


def test_a_command_counts_only_on_the_devices_own_topic_and_not_retained(capsys):
    del app._cmds[:]
    app._own[:] = [b"holdfast/d/cmd", Delivered(False)]
    app.on_cmd(b"holdfast/other/cmd", b'{"interval_ms": 2000}')
    app.on_cmd(b"holdfast/d/telemetry", b'{"interval_ms": 2000}')
    app._own[1] = Delivered(True)
    app.on_cmd(b"holdfast/d/cmd", b'{"interval_ms": 2000}')
    assert appcmd.take_commands(app._cmds, 60000) == 60000
    assert capsys.readouterr().out.splitlines() == [
        "holdfast: command: not on this device's command topic, or retained: ignored"] * 3
    app._own[1] = Delivered(False)
    app.on_cmd(b"holdfast/d/cmd", b'{"interval_ms": 2000}')
    assert appcmd.take_commands(app._cmds, 60000) == 2000
    # config.json's command_min_ms sets the bound
    app.on_cmd(b"holdfast/d/cmd", b'{"interval_ms": 50}')
    assert appcmd.take_commands(app._cmds, 60000, 10) == 50


def test_credentials_without_tls_are_refused_unless_the_config_says_so(tmp_path):
    with pytest.raises(appconfig.ConfigError) as e:
        appconfig.load(_write(tmp_path, {"broker": "h", "user": "u", "password": "hunter2"}))
    assert "go over the network in clear" in str(e.value) and "hunter2" not in str(e.value)
    cfg = appconfig.load(_write(tmp_path, {"broker": "h", "user": "u", "password": "hunter2",
                                           "credentials_in_clear": True}))
    assert cfg["user"] == "u"


_MP_CHECK = r"""
import sys
sys.path.insert(0, %(common)r)
import gc
import app
# app.unload frees a module's code even while something still points to the
# module (as a stale pointer on the stack did to appconfig after the boot).
gc.collect(); a = gc.mem_alloc()
import appcmd
held = [appcmd]
gc.collect(); b = gc.mem_alloc()
app.unload(appcmd)
del appcmd
gc.collect(); c = gc.mem_alloc()
assert 'appcmd' not in sys.modules
assert c - a < (b - a) // 4, (a, b, c)
import appboot, appcmd, appconfig, json
class S:
    def __init__(self): self.tail = 0
st = S()
seen = []
for boot in range(3):
    q = appboot.seq(app.Seq, st, 1, %(state)r)
    for i in range(120):
        s = q.take(); st.tail += 1; q.used(s, True); seen.append(s)
assert seen == list(range(360)), seen[-5:]
p = json.loads(app._payload('d', 1, 2, 1, 20.25, 5))
assert p['t'] == 20.25 and p['s'] == 2, p
try:
    appconfig.load(%(bad)r)
except appconfig.ConfigError as e:
    print('config:', e)
assert appcmd.command(b'{"interval_ms": 1000}') == 1000
for m, words in ((b'{"interval_ms": 10', 'not JSON'), (b'"\xff"', 'not JSON'),
                 (b'[10]', 'not a JSON object'), (b'{"x": 1}', "unknown key 'x'"),
                 (b'{"interval_ms": true}', 'must be an int'), (b'{"interval_ms": 1.5e3}', 'must be an int'),
                 (b'{"interval_ms": 518400001}', 'at most 518400000')):
    try:
        appcmd.command(m)
        raise AssertionError(m)
    except ValueError as e:
        assert words in str(e), (m, e)
class Delivered:
    retained = False
app._own[0] = b'holdfast/d/cmd'
app._own[1] = Delivered()
for m in (b'{"interval_ms": 5000}', b'[', b'{"interval_ms": 7000}', b'{"interval_ms": 9000}', b'{}'):
    app.on_cmd(b'holdfast/d/cmd', m)
app.on_cmd(b'holdfast/x/cmd', b'{"interval_ms": 2000}')
assert len(app._cmds) == 4 and app._cmds[-1] is None, app._cmds
assert appcmd.take_commands(app._cmds, 1000) == 7000 and not app._cmds
# An I2C driver's sensor function reads on after appboot, which made it, is unloaded.
sys.path.insert(0, %(drivers)r)
class Board:
    def i2c(self, cfg):
        return cfg["bus"]
read = appboot.sensor(Board(), {"i2c": {"driver": "tdriver", "bus": 7}})
app.unload(appboot)
gc.collect()
assert read() == 7.5, read()
print('micropython ok', q.boot)
"""


def test_app_logic_under_micropython(tmp_path):
    bad = _write(tmp_path, {"broker": "h", "user": "u", "password": "hunter2", "qos": 5})
    (tmp_path / "tdriver.py").write_text("def read(bus):\n    return bus + 0.5\n")
    code = _MP_CHECK % {"common": os.path.join(ROOT, "boards", "common"),
                        "state": str(tmp_path / "mpstate"), "bad": bad, "drivers": str(tmp_path)}
    exe = os.path.join(os.path.dirname(sys.executable), "micropython")
    proc = subprocess.run([exe, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=60)
    out = proc.stdout.decode()
    assert proc.returncode == 0, out
    assert "micropython ok 3" in out, out
    assert "holdfast: command: too many at once, some ignored" in out, out
    assert "'qos' must be 0, 1 or 2" in out and "hunter2" not in out, out



def test_boot_and_command_modules_do_not_import_app():
    # app imports appboot and appcmd (for one job each, then unloads them);
    # they take what they need of app as arguments, so the import goes one way.
    exe = os.path.join(os.path.dirname(sys.executable), "micropython")
    code = ("import sys\nsys.path.insert(0, %r)\nimport appboot, appcmd\n"
            "print(sorted(m for m in ('app', 'appboot', 'appcmd') if m in sys.modules))"
            % os.path.join(ROOT, "boards", "common"))
    out = subprocess.run([exe, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=60).stdout.decode()
    assert out.strip() == "['appboot', 'appcmd']", out

def test_hold_file_skips_one_boot(tmp_path, monkeypatch, capsys):
    """tools/board/deploy.py's /hf_hold: the app starts nothing (no watchdog) for one boot."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / app.HOLD).write_text("")

    class NoBoard:
        def __getattr__(self, name):
            raise AssertionError("the app touched the board: " + name)

    app.main(NoBoard())
    assert not (tmp_path / app.HOLD).exists()  # one boot only
    assert "app not started this boot" in capsys.readouterr().out

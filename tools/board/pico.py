"""The emulated Raspberry Pi Pico (tools/board/rp2040.mjs) from Python: the
tests start it, cut its power (SIGKILL) and power it on again on the same
flash file.

    with Pico(firmware, bootrom, flash_file) as pico:
        subprocess.run(["mpremote", "connect", pico.url, "exec", "print(1)"])
        pico.kill(); pico.start()

A firmware and a bootrom are the user's (docs/boards.md, "The emulated
Pico"): given() reads them from FIRMWARE and BOOTROM, as the Makefile passes
them on.
"""

import os
import re
import subprocess
import threading
import time

from board import deploy

ROOT = deploy.ROOT
RUNNER = os.path.join(ROOT, "tools", "board", "rp2040.mjs")
PACKAGE = os.path.join(ROOT, "build", "rp2040js", "node_modules", "rp2040js", "package.json")
_LISTEN = re.compile(r"^rp2040: REPL on (socket://127\.0\.0\.1:\d+)$")


def given():
    """(firmware, bootrom) from the environment, or (None, why not)."""
    fw, rom = os.environ.get("FIRMWARE"), os.environ.get("BOOTROM")
    if not fw or not rom:
        return None, ("needs an RP2040 MicroPython firmware with holdfast and the UART socket "
                      "frozen, and the RP2040 bootrom: FIRMWARE=path BOOTROM=path "
                      "(docs/boards.md, \"The emulated Pico\")")
    for what, path in (("FIRMWARE", fw), ("BOOTROM", rom)):
        if not os.path.isfile(path):
            return None, "%s=%s: no such file" % (what, path)
    if not os.path.exists(PACKAGE):
        return None, "rp2040js is not installed (make setup)"
    return (os.path.abspath(fw), os.path.abspath(rom)), None


class Pico:
    def __init__(self, firmware, bootrom, flash, port=0):
        self.firmware, self.bootrom, self.flash, self.port = firmware, bootrom, flash, port
        self.proc = None
        self.url = None
        self.lines = []  # the runner's output, each power-on's after the last

    def start(self, timeout=60.0):
        """Powers on; returns once the REPL listens and USB is up."""
        self.lines = []
        self.proc = subprocess.Popen(
            ["node", RUNNER, "--firmware", self.firmware, "--bootrom", self.bootrom,
             "--flash", self.flash, "--port", str(self.port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        self.wait_output("rp2040: USB CDC up", timeout)
        url = next(m.group(1) for m in map(_LISTEN.match, list(self.lines)) if m)
        self.port = int(url.rsplit(":", 1)[1])  # the same port at the next power-on
        self.url = url
        return self

    @staticmethod
    def _read(proc, lines):
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    def wait_output(self, text, timeout):
        end = time.monotonic() + timeout
        while not any(text in line for line in list(self.lines)):
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the reader's last lines
                raise RuntimeError("the emulated Pico ended (status %s): %s"
                                   % (self.proc.returncode, "\n".join(self.lines)[-2000:]))
            if time.monotonic() > end:
                raise TimeoutError("no %r from the emulated Pico within %.0f s: %s"
                                   % (text, timeout, "\n".join(self.lines)[-2000:]))
            time.sleep(0.05)

    def kill(self):
        """The power cut: SIGKILL, nothing flushed that the runner had not
        written through already."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
        if self.proc is not None:
            self.proc.wait()
            self.proc.stdout.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.kill()


# -- heap figures ------------------------------------------------------------------

# One fresh interpreter (mpremote's soft reset) per configuration: the free
# heap after a collection before the import, after it, after connect and after
# a QoS 1 publish is acknowledged. The store's import is part of the code.
# The UART socket's link (UART0 and its 5 KB of ring buffers, which a Pico
# W's network stack does not take from the heap) is made before the first
# figure; its socket object, as lwIP's on a Pico W, is in the figures.
_PROBE = """\
import gc,sys,socket
socket._link()
%(path)sgc.collect()
a=gc.mem_free()
from holdfast import MQTTClient
%(imp)s
gc.collect()
b=gc.mem_free()
c=MQTTClient('hf-pico-heap',%(host)r,port=%(port)d,keepalive=30%(outbox)s)
c.connect()
gc.collect()
d=gc.mem_free()
c.publish(b'hf-pico/heap',b'21.5',qos=1)
ok=c.flush(10000)
gc.collect()
print('HF heap',a,b,d,gc.mem_free(),ok)
c.disconnect()
"""

# (name, import, outbox argument)
CONFIGS = (
    ("publish-only", "", ""),
    ("+ FileStore outbox", "from holdfast.durable import FileStore",
     ",outbox=FileStore('/hf-heap-ob')"),
    ("+ FlashStore outbox (rp2.Flash, 16 blocks of 4 KB)",
     "import rp2\nfrom holdfast.durable import FlashStore",
     ",outbox=FlashStore(rp2.Flash(),prog=256,start=FLASH_START,blocks=16)"),
)
# The FlashStore's blocks: the last 16 of rp2.Flash(), which a filesystem
# with little in it does not reach (docs/boards.md says what a real Pico needs).
FLASH_START = 352 - 16
MPY_DIR = "/hft/firmware"  # where make board-test copies holdfast as .mpy


def copy_mpy(url):
    """holdfast as .mpy on the board's filesystem, where board-test puts it."""
    from board import boardtest
    files, _ = boardtest.payload()
    lib = {p: b for p, b in files.items() if p.startswith(MPY_DIR + "/")}
    boardtest.copy(deploy.Board(url), lib)


def heap(url, broker, mode):
    """{configuration: (before, after import, after connect, after publish)}
    free bytes; mode "frozen" (the firmware's) or "mpy" (copy_mpy's files)."""
    dev = deploy.Board(url)
    out = {}
    for name, imp, outbox in CONFIGS:
        code = _PROBE % {"path": "sys.path[:0]=[%r]\n" % MPY_DIR if mode == "mpy" else "",
                         "imp": imp, "host": broker[0], "port": broker[1],
                         "outbox": outbox.replace("FLASH_START", str(FLASH_START))}
        _, text = dev.run(["exec", code], resume=False, timeout=300)
        m = re.search(r"^HF heap (\d+) (\d+) (\d+) (\d+) True", text, re.M)
        if not m:
            raise RuntimeError("%s (%s): no figures from the board:\n%s" % (name, mode, text))
        out[name] = tuple(int(g) for g in m.groups())
    return out


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description="Heap figures of holdfast on the emulated Pico.")
    ap.add_argument("--flash", default=os.path.join(ROOT, "build", "emulated", "pico-heap.bin"),
                    help="its flash file (default build/emulated/pico-heap.bin)")
    a = ap.parse_args(argv)
    have, why = given()
    if have is None:
        raise SystemExit("board.pico: " + why)
    from fleet.mosquitto import Mosquitto
    os.makedirs(os.path.dirname(a.flash), exist_ok=True)
    if os.path.exists(a.flash):  # a fresh board: the FlashStore's blocks clear of old files
        os.remove(a.flash)
    broker = Mosquitto()
    broker.start()
    try:
        with Pico(have[0], have[1], a.flash) as pico:
            copy_mpy(pico.url)
            for mode in ("frozen", "mpy"):
                for name, (a0, b, d, e) in heap(pico.url, (broker.host, broker.port),
                                                mode).items():
                    print("%-6s %-52s free %d; code %.1f KB, after connect %.1f KB, "
                          "after publish %.1f KB" % (mode, name, a0, (a0 - b) / 1024,
                                                     (a0 - d) / 1024, (a0 - e) / 1024))
    finally:
        broker.close()


if __name__ == "__main__":
    main()

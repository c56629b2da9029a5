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

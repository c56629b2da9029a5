"""A user's first command on a board: `mpremote connect PORT repl`, with the
real mpremote on the emulated board's serial pseudo-terminal (its socket://
URL cannot do a REPL: mpremote's console waits on the port's file
descriptor). mpremote runs in a terminal of its own (a pty from the stdlib),
as it would in a user's shell: the test types, reads the screen, and leaves
with ctrl-].
"""

import os
import select
import subprocess
import sys
import termios
import time

import pytest

from board.emulator import Emulator

BOUND = 30.0  # seconds; only a failing run gets near it


class Terminal:
    """mpremote running in a pseudo-terminal, as in a user's shell."""

    def __init__(self, *args):
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "mpremote"] + list(args),
                                     stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True)
        os.close(slave)
        self.screen = b""

    def read_until(self, text):
        deadline = time.monotonic() + BOUND
        while text not in self.screen:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and \
                    not select.select([self.master], [], [], 0)[0]:
                pytest.fail("no %r on the screen (mpremote status %s):\n%r"
                            % (text, self.proc.poll(), self.screen))
            if select.select([self.master], [], [], min(left, 0.2))[0]:
                try:
                    self.screen += os.read(self.master, 4096)
                except OSError:  # EIO: mpremote is gone
                    pass

    def wait_console_mode(self):
        # mpremote prints its banner, then turns echo off in its terminal;
        # typed before that, the terminal itself would echo our keys.
        deadline = time.monotonic() + BOUND
        while termios.tcgetattr(self.master)[3] & termios.ECHO:
            assert time.monotonic() < deadline, self.screen
            time.sleep(0.01)

    def type(self, keys):
        os.write(self.master, keys)

    def wait(self):
        try:
            return self.proc.wait(BOUND)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            os.close(self.master)


@pytest.fixture
def board(tmp_path):
    with Emulator(str(tmp_path / "flash")) as emu:
        yield emu


def test_mpremote_repl_on_the_serial_pty(board):
    assert board.tty and os.path.exists(board.tty), board.tty
    t = Terminal("connect", board.tty, "repl")
    t.read_until(b"Use Ctrl-] or Ctrl-x to exit this shell")
    t.wait_console_mode()
    t.type(b"x = 6 * 7\r")
    t.type(b"print('the answer', x)\r")
    t.read_until(b"the answer 42")
    t.type(b"\x1d")  # ctrl-]
    assert t.wait() == 0, t.screen

    # A second session finds the same board, its state kept (nothing was
    # reset), as after unplugging and plugging in a terminal.
    t = Terminal("connect", board.tty, "repl")
    t.read_until(b"Use Ctrl-] or Ctrl-x to exit this shell")
    t.wait_console_mode()
    t.type(b"print('again', x + 1)\r")
    t.read_until(b"again 43")
    t.type(b"\x1d")
    assert t.wait() == 0, t.screen
    assert board.running


def test_mpremote_exec_and_fs_on_the_serial_pty(board, tmp_path):
    # mpremote's raw REPL (a soft reset first, then raw-paste) over the pty.
    src = tmp_path / "hello.py"
    src.write_text("print('hello from the flash')\n")
    for args, expect in (
            (["exec", "print(sum(range(10)))"], "45"),
            (["fs", "cp", str(src), ":hello.py"], "cp "),
            (["resume", "exec", "import hello"], "hello from the flash")):
        p = subprocess.run([sys.executable, "-m", "mpremote", "connect", board.tty] + args,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=BOUND)
        assert p.returncode == 0 and expect in p.stdout, (args, p.stdout, p.stderr)
    assert os.path.exists(os.path.join(board.flash, "hello.py"))


def test_repl_lines_end_as_on_a_board(board):
    # A board's REPL ends each line CR LF; with LF alone, a terminal in raw
    # mode (mpremote's) draws each line where the last one ended.
    t = Terminal("connect", board.tty, "repl")
    t.read_until(b"Use Ctrl-] or Ctrl-x to exit this shell")
    t.wait_console_mode()
    t.type(b"print('one\\ntwo')\r")
    t.read_until(b"two")
    t.type(b"for i in range(3): print('row', i)\r\r")
    t.read_until(b"row 2")
    t.type(b"\x1d")
    assert t.wait() == 0, t.screen
    assert b"one\r\ntwo\r\n" in t.screen, t.screen
    assert b"row 0\r\nrow 1\r\nrow 2\r\n" in t.screen, t.screen
    assert b"\r\r\n" not in t.screen, t.screen


def test_fs_ls_gives_each_files_size(board, tmp_path):
    src = tmp_path / "data.bin"
    src.write_bytes(b"x" * 1234)
    p = subprocess.run([sys.executable, "-m", "mpremote", "connect", board.url, "resume",
                        "fs", "cp", str(src), ":data.bin", "+", "fs", "ls", ":"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=BOUND)
    assert p.returncode == 0, (p.stdout, p.stderr)
    sizes = dict(reversed(line.split()) for line in p.stdout.splitlines()
                 if line.startswith(" ") and len(line.split()) == 2)
    assert sizes.get("data.bin") == "1234", p.stdout
    assert sizes.get("lib/") == "0", p.stdout  # a directory, as a board's LittleFS lists it
    assert sizes.get("unique_id") == str((tmp_path / "flash" / "unique_id").stat().st_size), \
        p.stdout

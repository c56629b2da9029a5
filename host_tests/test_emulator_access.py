"""Who may run code on the emulated board (issue 36, item 16 and part of
21): its REPL socket takes only mpremote from the user who started it; an
HTTP request (what a web page can make a browser send to a loopback port)
or another user's connection is refused before a byte reaches the board,
and what the board writes (config.json and its passwords) is 0600.
"""

import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from board.emulator import Emulator

BOUND = 30.0  # seconds; only a failing run gets near it


@pytest.fixture
def board(tmp_path):
    with Emulator(str(tmp_path / "flash")) as emu:
        yield emu


def _mpremote(emu, *args):
    p = subprocess.run([sys.executable, "-m", "mpremote", "connect", emu.url, "resume"]
                       + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=BOUND)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout


def _read_all(s):
    """What the emulator answers until it closes the connection."""
    s.settimeout(BOUND)
    got = b""
    while True:
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            break
        if not data:
            break
        got += data
    return got


def _payload(mark):
    # Python the board would run if the bytes reached its REPL: the lines of
    # an HTTP body are REPL lines to it.
    return ("import os\r\nos.system('touch %s')\r\n" % mark).encode()


def test_an_http_post_from_a_browser_is_refused(board, tmp_path):
    mark = tmp_path / "ran"
    body = _payload(mark)
    request = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: text/plain\r\n"
               b"Content-Length: %d\r\n\r\n" % (board.port, len(body))) + body
    with socket.create_connection(("127.0.0.1", board.port), timeout=BOUND) as s:
        s.sendall(request)
        answer = _read_all(s)
    assert b"refused" in answer and b"not mpremote" in answer, answer
    # mpremote still works, and the board ran nothing of the request: had
    # it, the file would be there by the time the next command is answered.
    assert "still here 42" in _mpremote(board, "exec", "print('still here', 6 * 7)")
    assert not mark.exists()
    assert "refused a connection to the REPL port" in board.console_text()


def test_a_line_typed_at_the_port_is_refused(board, tmp_path):
    # nc-style: plain text, no ctrl-A. The board must not see it.
    mark = tmp_path / "ran"
    with socket.create_connection(("127.0.0.1", board.port), timeout=BOUND) as s:
        s.sendall(_payload(mark))
        answer = _read_all(s)
    assert b"refused" in answer, answer
    _mpremote(board, "exec", "pass")
    assert not mark.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_another_user_is_refused_even_speaking_mpremote(board, tmp_path):
    # Exactly what mpremote sends (ctrl-C, ctrl-A, then code in the raw
    # REPL, ctrl-D to run it), from uid 65534.
    mark = tmp_path / "ran"
    script = ("import socket,sys\n"
              "s=socket.create_connection(('127.0.0.1',%d),timeout=%d)\n"
              "s.sendall(b'\\r\\x03\\r\\x01'+%r+b'\\x04')\n"
              "got=b''\n"
              "try:\n"
              "  while True:\n"
              "    d=s.recv(4096)\n"
              "    if not d: break\n"
              "    got+=d\n"
              "except ConnectionResetError:\n"
              "  got+=b' (reset)'\n"
              "sys.stdout.write(got.decode(errors='replace'))\n"
              % (board.port, BOUND, _payload(mark)))
    p = subprocess.run(["/usr/bin/python3", "-c", script], user=65534, group=65534,
                       cwd="/", capture_output=True, text=True, timeout=BOUND)
    assert p.returncode == 0 and "raw REPL" not in p.stdout, (p.stdout, p.stderr)
    _mpremote(board, "exec", "pass")
    assert not mark.exists()
    assert "refused a connection to the REPL port: made by uid 65534" in board.console_text()


def test_a_refused_connection_leaves_mpremote_connected(board, tmp_path):
    # A client that passed is replaced only by one that passes too.
    board.wait_console(">>> ")  # a ctrl-C while the board still boots would stop its boot
    good = socket.create_connection(("127.0.0.1", board.port), timeout=BOUND)
    good.sendall(b"\r\x03\r\x01")
    seen = b""
    deadline = time.monotonic() + BOUND
    while b"raw REPL; CTRL-B to exit\r\n>" not in seen:
        assert time.monotonic() < deadline, seen
        seen += good.recv(4096)
    with socket.create_connection(("127.0.0.1", board.port), timeout=BOUND) as bad:
        bad.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert b"refused" in _read_all(bad)
    good.sendall(b"print('from the first', 1 + 1)\x04")
    seen = b""
    while b"from the first 2" not in seen:
        assert time.monotonic() < deadline, seen
        data = good.recv(4096)
        assert data, seen
        seen += data
    good.close()


def test_secrets_on_the_flash_are_the_users_alone(board, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"password": "pw"}')
    _mpremote(board, "fs", "cp", str(cfg), ":config.json")
    flash = tmp_path / "flash"
    assert stat.S_IMODE(os.stat(flash / "config.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(flash).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(board.tty).st_mode) == 0o600
    # One written on the host (as the fleet tool provisions a board) is made
    # 0600 at power-on.
    board.stop()
    os.chmod(flash / "config.json", 0o644)
    board.start()
    assert stat.S_IMODE(os.stat(flash / "config.json").st_mode) == 0o600

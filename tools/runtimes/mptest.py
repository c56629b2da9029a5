"""Tiny test runner for portable tests; runs under MicroPython and CPython.

Usage:
    micropython tools/runtimes/mptest.py [-k SUBSTRING] [--mem] [DIR-OR-FILE ...]
    python3     tools/runtimes/mptest.py [-k SUBSTRING] [--mem] [DIR-OR-FILE ...]

Default: host_tests/portable.  Puts <repo>/firmware and each test directory
on sys.path, imports every test_*.py (or test_*.mpy) module, sorted by name,
and calls every module-level function named test_* that takes no arguments,
in definition order.

Precompiled run (see tools/runtimes/mpyc.py): --src DIR names where the .py
sources of .mpy test modules are, for definition order and signatures; run as
`MICROPYPATH=build/mpy/tools/runtimes micropython -m mptest --src
host_tests/portable build/mpy/host_tests/portable` and <root>/firmware is then
build/mpy/firmware (<root>: three levels up from this file, as in the checkout).
Prints PASS/FAIL per test and ends with exactly one line
"mptest: N passed, M failed".  Exit status is 1 if anything failed or no
test ran.

A test that raises SkipTest (unittest's on CPython, so pytest skips it
too; any exception class of that name on MicroPython) is reported
"SKIP <module>.<test> (<reason>)".

before_test: a runner that drives a board from outside
(tools/board/boardtest.py) sets this module global to a function; it is
called with "<module>.<test>" before each test, and a true result skips
the test without a word (the board runner announces each test there, so
one that never returns is known, and starts after an interrupted one).
Kept out of this file so that it costs the heap guard nothing.

--mem (MicroPython): after importing each test module, print
"MEM <module>: <bytes> allocated after import", the heap its import took
(test module, helpers, firmware), counted from the runner's start.  The
smallest heap each module needs is found from outside, one process per
module: `PYTHONPATH=tools python -m runtimes.mpyc --heap-report`.

Only sys, os, gc and time are used, so the same file runs on both runtimes
(MicroPython has no os.path, inspect, traceback or argparse).
"""

import sys
import os
import gc
import time

IS_MPY = sys.implementation.name == "micropython"
before_test = None  # see the module doc


# --- path helpers (string ops only; MicroPython has no os.path) -----------

def _norm(path):
    absolute = path.startswith("/")
    out = []
    for part in path.split("/"):
        if part == "" or part == ".":
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not absolute:
                out.append(part)
            continue
        out.append(part)
    s = "/".join(out)
    if absolute:
        return "/" + s
    return s or "."


def _dirname(path):
    i = path.rfind("/")
    if i < 0:
        return "."
    if i == 0:
        return "/"
    return path[:i]


def _basename(path):
    return path[path.rfind("/") + 1:]


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def _isdir(path):
    try:
        return (os.stat(path)[0] & 0o170000) == 0o040000
    except OSError:
        return False


try:
    _SCRIPT = __file__
except NameError:
    _SCRIPT = sys.argv[0]
# Kept relative when given relative: module __file__ and sys.path strings
# then have the same length wherever the checkout is, and so does the heap.
# <root>/tools/runtimes/mptest.py (or build/mpy/tools/runtimes/mptest.mpy).
ROOT = _dirname(_dirname(_dirname(_norm(_SCRIPT))))


# --- reporting ---------------------------------------------------------------

def _print_exc(exc):
    if IS_MPY:
        sys.print_exception(exc)
    else:
        import traceback
        traceback.print_exception(type(exc), exc, exc.__traceback__,
                                  file=sys.stdout)


def _now_ms():
    if IS_MPY:
        return time.ticks_ms()
    return int(time.time() * 1000)


def _elapsed_ms(t0):
    if IS_MPY:
        return time.ticks_diff(time.ticks_ms(), t0)
    return _now_ms() - t0


# --- collection --------------------------------------------------------------

def _scan_defs(path):
    """Return [(name, takes_no_args)] for top-level 'def test_*' in file order.

    Reads the source line by line (cheap on a small heap).  This gives the
    definition order on MicroPython, whose module dicts are unordered, and the
    signature, which MicroPython cannot introspect.
    """
    found = []
    pending = None  # (name, text so far) for a signature spanning lines
    f = open(path)
    try:
        for line in f:
            if pending is not None:
                text = pending[1] + line
                if ")" in text:
                    found.append((pending[0], _no_params(text)))
                    pending = None
                else:
                    pending = (pending[0], text)
                continue
            if not line.startswith("def test_"):
                continue
            rest = line[4:]
            i = rest.find("(")
            if i < 0:
                continue
            name = rest[:i].strip()
            text = rest[i + 1:]
            if ")" in text:
                found.append((name, _no_params(text)))
            else:
                pending = (name, text)
    finally:
        f.close()
    return found


def _no_params(text):
    inside = text[:text.find(")")]
    # strip comments of a multi-line signature
    parts = []
    for piece in inside.split("\n"):
        j = piece.find("#")
        if j >= 0:
            piece = piece[:j]
        parts.append(piece)
    return "".join(parts).strip() == ""


def _is_function(obj):
    if not callable(obj) or isinstance(obj, type):
        return False
    return True


def _cpython_no_args(fn):
    code = getattr(fn, "__code__", None)
    if code is None:
        return True
    ndefaults = len(getattr(fn, "__defaults__", None) or ())
    kwdefaults = getattr(fn, "__kwdefaults__", None) or {}
    return (code.co_argcount - ndefaults <= 0
            and code.co_kwonlyargcount - len(kwdefaults) <= 0)


def _collect(module, path):
    """([(name, fn)] to run, [names skipped: they take arguments]).

    path is the module's .py source, or None (then: sorted by name, and
    MicroPython cannot tell which functions take arguments).
    """
    tests = []
    skipped = []
    seen = {}
    for name, no_args in (_scan_defs(path) if path else ()):
        if name in seen:
            continue
        seen[name] = True
        fn = getattr(module, name, None)
        if fn is None or not _is_function(fn):
            continue
        if no_args if IS_MPY else _cpython_no_args(fn):
            tests.append((name, fn))
        else:
            skipped.append(name)
    extra = []
    for name in dir(module):
        if name.startswith("test_") and name not in seen:
            fn = getattr(module, name)
            if _is_function(fn) and (IS_MPY or _cpython_no_args(fn)):
                extra.append(name)
    extra.sort()
    for name in extra:
        tests.append((name, getattr(module, name)))
    return tests, skipped


def _test_files(target, src):
    """[(dir, modname, source path or None)] for a directory or a file."""
    if _isdir(target):
        tdir = target
        names = {}
        for n in os.listdir(target):
            if n.startswith("test_") and (n.endswith(".py")
                                          or n.endswith(".mpy")):
                names[n[:n.rfind(".")]] = n
        files = [names[m] for m in sorted(names)]
    else:
        tdir = _dirname(target)
        files = [_basename(target)]
    out = []
    for n in files:
        modname = n[:n.rfind(".")]
        if n.endswith(".py"):
            path = tdir + "/" + n
        else:
            path = (src or tdir) + "/" + modname + ".py"
            if not _exists(path):
                path = None
        out.append((tdir, modname, path))
    return out


def _resolve(arg):
    if _exists(arg):
        return _norm(arg)
    alt = ROOT + "/" + arg
    if _exists(alt):
        return _norm(alt)
    return None


# --- main --------------------------------------------------------------------

def main(argv):
    keyword = None
    src = None
    mem = False
    targets = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-k":
            i += 1
            if i >= len(argv):
                print("mptest: -k needs an argument")
                return 2
            keyword = argv[i]
        elif a.startswith("-k") and len(a) > 2:
            keyword = a[2:]
        elif a == "--src":
            i += 1
            if i >= len(argv) or _resolve(argv[i]) is None:
                print("mptest: --src needs an existing directory")
                return 2
            src = _resolve(argv[i])
        elif a == "--mem":
            mem = IS_MPY
        elif a in ("-h", "--help"):
            print("usage: mptest.py [-k SUBSTRING] [--src DIR] [--mem] "
                  "[DIR-OR-FILE ...]")
            return 0
        else:
            targets.append(a)
        i += 1
    if not targets:
        targets = ["host_tests/portable"]

    firmware = ROOT + "/firmware"
    if firmware not in sys.path:
        sys.path.insert(0, firmware)

    gc.collect()
    if IS_MPY:
        mem_start = gc.mem_alloc()
        free_start = gc.mem_free()
    passed = 0
    failed = 0
    nskipped = 0
    t_start = _now_ms()
    for arg in targets:
        target = _resolve(arg)
        if target is None:
            print("FAIL %s (no such file or directory)" % arg)
            failed += 1
            continue
        for tdir, modname, path in _test_files(target, src):
            if tdir not in sys.path:
                sys.path.insert(0, tdir)
            if modname in sys.modules:
                del sys.modules[modname]
            gc.collect()
            try:
                module = __import__(modname)
                tests, skipped = _collect(module, path)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # SyntaxError, ImportError, SystemExit
                print("FAIL %s (error while importing)" % modname)
                _print_exc(e)
                failed += 1
                continue
            if mem:
                gc.collect()
                print("MEM %s: %d bytes allocated after import"
                      % (modname, gc.mem_alloc() - mem_start))
            for name in skipped:
                if keyword is None or keyword in modname + "." + name:
                    print("SKIP %s.%s (takes arguments: pytest only)"
                          % (modname, name))
                    nskipped += 1
            for name, fn in tests:
                full = modname + "." + name
                if keyword is not None and keyword not in full:
                    continue
                if before_test is not None and before_test(full):
                    continue
                gc.collect()
                t0 = _now_ms()
                try:
                    result = fn()
                    if result is not None and hasattr(result, "send"):
                        raise AssertionError(
                            "test is a generator function; nothing was run")
                except KeyboardInterrupt:
                    raise
                except BaseException as e:
                    if type(e).__name__ == "SkipTest":
                        nskipped += 1
                        print("SKIP %s (%s)" % (full, e))
                        continue
                    failed += 1
                    print("FAIL %s (%d ms)" % (full, _elapsed_ms(t0)))
                    _print_exc(e)
                else:
                    passed += 1
                    print("PASS %s (%d ms)" % (full, _elapsed_ms(t0)))
                result = None
            # Drop the module so its memory can be reclaimed on small heaps.
            tests = None
            module = None
            if modname in sys.modules:
                del sys.modules[modname]
            gc.collect()

    if passed + failed == 0:
        print("no tests ran (%s)" % " ".join(targets))
    info = "%s, %d ms, %d skipped" % (sys.implementation.name,
                                       _elapsed_ms(t_start), nskipped)
    if IS_MPY:
        info += ", heap at start %d used, %d free" % (mem_start, free_start)
    print("(" + info + ")")
    print("mptest: %d passed, %d failed" % (passed, failed))
    if failed or passed == 0:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

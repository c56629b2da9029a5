"""Helpers for portable tests (run under CPython/pytest and MicroPython/mptest).

Only sys, os and time are used; keep this file tiny.
"""

import os
import sys
import time

_MPY = sys.implementation.name == "micropython"
_counter = [0]


def raises(exc_type, fn, *args, **kw):
    """Call fn(*args, **kw); return the exception it raised.

    exc_type may be a class or a tuple of classes.  Fails with AssertionError
    if nothing, or an exception of another type, was raised.
    """
    try:
        fn(*args, **kw)
    except exc_type as e:
        return e
    except Exception as e:
        raise AssertionError("expected %s, got %s: %r"
                             % (_name(exc_type), type(e).__name__, e))
    raise AssertionError("expected %s, nothing was raised" % _name(exc_type))


def _name(exc_type):
    if isinstance(exc_type, tuple):
        return " or ".join([_name(t) for t in exc_type])
    return getattr(exc_type, "__name__", str(exc_type))


def allocated(fn):
    """Bytes of heap fn() allocates, the collector held off meanwhile
    (MicroPython's gc.mem_alloc(); CPython has none)."""
    import gc
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    fn()
    b = gc.mem_alloc()
    gc.enable()
    return b - a


def tmpdir():
    """Create and return a fresh empty directory (a string path)."""
    if not _MPY:
        import tempfile
        return tempfile.mkdtemp(prefix="hf-")
    while True:
        _counter[0] += 1
        # Fixed width: the same allocations on every run and machine, so
        # the smallest-heap figures do not move with the name's length.
        path = "/tmp/hf-%010d-%08d-%04d" % (time.time(),
                                            time.ticks_us() & 0xFFFFFF,
                                            _counter[0] % 10000)
        try:
            os.mkdir(path)
            return path
        except OSError as e:
            if e.args and e.args[0] == 17:  # EEXIST: try another name
                continue
            raise


def rmtree(path):
    """Remove path and everything under it; a missing path is fine."""
    try:
        mode = os.stat(path)[0]
    except OSError:
        return
    if mode & 0o170000 != 0o040000:
        os.remove(path)
        return
    for name in os.listdir(path):
        rmtree(path + "/" + name)
    os.rmdir(path)


def held(st, pid):
    """Store st holds inbound QoS 2 id pid; its table (st.held_ids) is made
    by holdfast.held.table() with the first id held, None until then."""
    h = st.held_ids
    return h is not None and h.held(pid)

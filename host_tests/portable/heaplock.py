"""The heap-lock loop of the tests that hold a path to no allocation (a
helper of its own: support.py is imported by every portable test module,
and each byte it grows is on every module's heap figure)."""

import sys


def under_heap_lock(fn, n):
    """fn() once to warm up, then n times with MicroPython's heap locked (any
    allocation raises MemoryError: the test fails); elsewhere unlocked.
    Returns how many of the n calls returned a true value."""
    fn()
    locked = sys.implementation.name == "micropython"
    if locked:
        import micropython
        micropython.heap_lock()
    try:
        k = 0
        for _ in range(n):
            if fn():
                k += 1
    finally:
        if locked:
            micropython.heap_unlock()
    return k

# The few places where MicroPython and CPython differ, mapped once so the rest
# of the package is written against one API.
try:
    from micropython import const
except ImportError:  # CPython
    def const(x):
        return x

from time import time as _now

try:
    from sys import print_exception
except ImportError:  # CPython
    import traceback  # type: ignore[import-not-found]  # CPython only

    def print_exception(e):
        traceback.print_exception(type(e), e, e.__traceback__)


def wall():
    """Wall-clock seconds: what outbox deadlines are set and checked by."""
    return int(_now())


try:
    from time import ticks_ms, ticks_diff, ticks_add, sleep_ms
except ImportError:  # CPython: same semantics, 30-bit wrap like the boards
    import time as _time

    _PERIOD = 1 << 30
    _HALF = _PERIOD >> 1

    def ticks_ms():
        return int(_time.monotonic() * 1000) & (_PERIOD - 1)

    def ticks_diff(a, b):
        return ((a - b + _HALF) & (_PERIOD - 1)) - _HALF

    def ticks_add(a, d):
        return (a + d) & (_PERIOD - 1)

    def sleep_ms(ms):
        _time.sleep(ms / 1000)

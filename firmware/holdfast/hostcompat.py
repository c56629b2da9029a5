# CPython's stand-ins for what MicroPython has built in (compat.py maps
# them); a board never loads this module.
import time as _time
import traceback  # type: ignore[import-not-found]  # CPython only: the MicroPython stubs have none

_PERIOD = 1 << 30  # ticks wrap at 30 bits, as on the boards
_HALF = _PERIOD >> 1


def const(x):
    return x


def print_exception(e):
    traceback.print_exception(type(e), e, e.__traceback__)


def ticks_ms():
    return int(_time.monotonic() * 1000) & (_PERIOD - 1)


def ticks_diff(a, b):
    return ((a - b + _HALF) & (_PERIOD - 1)) - _HALF


def ticks_add(a, d):
    return (a + d) & (_PERIOD - 1)


def sleep_ms(ms):
    _time.sleep(ms / 1000)

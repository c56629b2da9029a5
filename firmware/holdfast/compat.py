# CPython's stand-ins for what MicroPython has built in, put where the
# package's modules look for them: const() (MicroPython's compiler knows it
# without an import) as a builtin, time.ticks_ms, ticks_diff, ticks_add and
# sleep_ms, and sys.print_exception; CPython has none of these names.
# holdfast/__init__.py imports this module on CPython only, so the modules
# are written against MicroPython's API alone and a board loads none of this.
import builtins
import sys
import time
import traceback  # type: ignore[import-not-found]  # CPython only: the MicroPython stubs have none

_PERIOD = 1 << 30  # ticks wrap at 30 bits, as on the boards
_HALF = _PERIOD >> 1


def const(x):
    return x


def print_exception(e, file=None):
    traceback.print_exception(type(e), e, e.__traceback__, file=file)


def ticks_ms():
    return int(time.monotonic() * 1000) & (_PERIOD - 1)


def ticks_diff(a, b):
    return ((a - b + _HALF) & (_PERIOD - 1)) - _HALF


def ticks_add(a, d):
    return (a + d) & (_PERIOD - 1)


def sleep_ms(ms):
    time.sleep(ms / 1000)


builtins.const = const
sys.print_exception = print_exception
time.ticks_ms = ticks_ms
time.ticks_diff = ticks_diff
time.ticks_add = ticks_add
time.sleep_ms = sleep_ms

# The few places where MicroPython and CPython differ, mapped once so the rest
# of the package is written against one API. CPython's stand-ins are in
# hostcompat.py: kept out of this module, a board loads none of their code
# or names (from .mpy, even a branch never taken costs both).
try:
    from micropython import const
    from sys import print_exception
    from time import ticks_ms, ticks_diff, ticks_add, sleep_ms
except ImportError:  # CPython
    from .hostcompat import const, print_exception, ticks_ms, ticks_diff, ticks_add, sleep_ms  # type: ignore[assignment]
import time


def wall():
    """Wall-clock seconds, whole: what outbox deadlines are set and checked
    by (the unix port's and CPython's time() is a float)."""
    return int(time.time())

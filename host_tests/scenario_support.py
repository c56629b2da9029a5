# The prelude of the scenario programs (scenarios.py, tls_scenarios.py), which
# run under CPython and under MicroPython: puts firmware/ on sys.path (found
# from argv[0]: MicroPython has no os.path), and gives sleep_ms, ticks_ms and
# ticks_diff on either runtime, and RT, the runtime's name.
import sys

sys.path.insert(0, sys.argv[0].rsplit("/", 2)[0] + "/firmware")

import holdfast  # noqa: E402,F401  on CPython it puts MicroPython's ticks and sleep_ms into time
from time import sleep_ms, ticks_ms, ticks_diff  # noqa: E402

RT = sys.implementation.name

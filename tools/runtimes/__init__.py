"""The test runtimes: mptest (the portable tests on MicroPython and CPython)
and mpyc (precompile to .mpy, heap per test module)."""

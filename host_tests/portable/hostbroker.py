"""The real MQTT broker a portable test may ask for, given by whoever runs
the tests: the board-test runner sets BROKER before the first test
(tools/board/boardtest.py), host_tests/portable/conftest.py under pytest,
HOLDFAST_TEST_BROKER=host:port elsewhere. Apart from support.py: only the
modules that need a broker pay for it on the heap."""

import os
import sys

# (host, port), or None: then HOLDFAST_TEST_BROKER, or the test is skipped.
BROKER = None

if sys.implementation.name == "micropython":  # mptest skips on any SkipTest
    class SkipTest(Exception):
        pass
else:  # pytest skips on unittest's
    from unittest import SkipTest


def address():
    """(host, port) of the broker given; skips the test when none was."""
    if BROKER is not None:
        return BROKER
    try:
        given = os.getenv("HOLDFAST_TEST_BROKER")
    except AttributeError:  # a board's os has no environment
        given = None
    if not given:
        raise SkipTest("needs a real broker: the board-test runner gives one, "
                       "or HOLDFAST_TEST_BROKER=host:port")
    host, port = given.rsplit(":", 1)
    return host, int(port)

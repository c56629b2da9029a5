"""Shared pytest setup for host tests (CPython only).

- puts firmware/, host_tests/portable/ and tools/ on sys.path;
- `mosquitto` fixture: a real broker on a free loopback port
  (tools/fleet/mosquitto.py);
- prints per-runtime counts (CPython portable tests, MicroPython runs) at the
  end of the run, also kept in build/test-counts.txt.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (os.path.join(HERE, "portable"), os.path.join(ROOT, "tools"),
           os.path.join(ROOT, "firmware")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from fleet.mosquitto import BrokerError, Mosquitto  # noqa: E402
from fleet.v5broker import Mqttools  # noqa: E402

COUNTS = os.path.join(ROOT, "build", "test-counts.txt")


@pytest.fixture(scope="session")
def mosquitto(tmp_path_factory):
    """A running mosquitto for the whole session.

    .host, .port; .stop(), .start(), .restart() (same port, sessions kept via
    persistence), .kill() (crash: unsaved state lost), .log().  A test that
    stops the broker must leave it running again.
    """
    yield from _running(Mosquitto(workdir=str(tmp_path_factory.mktemp("mosquitto"))), "close")


def _running(broker, stop):
    # Started for the session (a start that fails fails the tests that need
    # it, with the broker's words), then stopped with broker.<stop>().
    try:
        broker.start()
    except BrokerError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield broker
    finally:
        getattr(broker, stop)()


@pytest.fixture(scope="session")
def mqttools():
    """A second MQTT 5 broker, mqttools' (tools/fleet/v5broker.py: QoS 0
    only), on a free loopback port for the whole session: .host, .port."""
    yield from _running(Mqttools(), "stop")


def pytest_configure(config):
    config.holdfast_counts = []  # lines added by test_micropython.py


def pytest_sessionstart(session):
    try:
        os.remove(COUNTS)
    except OSError:
        pass


def pytest_terminal_summary(terminalreporter):
    stats = terminalreporter.stats

    def portable(reports):
        return [r for r in reports
                if "portable/" in getattr(r, "nodeid", "").split("::")[0]]

    passed = len([r for r in portable(stats.get("passed", ()))
                  if r.when == "call"])
    failed = len(portable(stats.get("failed", ()))) \
        + len(portable(stats.get("error", ())))
    lines = []
    if passed or failed:
        lines.append("CPython pytest: %d passed, %d failed" % (passed, failed))
    lines += getattr(terminalreporter.config, "holdfast_counts", [])
    if not lines:
        return
    os.makedirs(os.path.dirname(COUNTS), exist_ok=True)
    with open(COUNTS, "w") as f:
        f.write("\n".join(lines) + "\n")
    terminalreporter.write_sep("-", "portable tests per runtime")
    for line in lines:
        terminalreporter.write_line(line)

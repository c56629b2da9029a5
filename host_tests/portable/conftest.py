"""pytest only (mptest and the boards never load it): a portable test
module that says NEEDS_BROKER = True gets the session's mosquitto as
hostbroker.BROKER, as the board-test runner gives a board the host's broker."""

import pytest

import hostbroker


@pytest.fixture(autouse=True)
def _real_broker(request, monkeypatch):
    if getattr(request.module, "NEEDS_BROKER", False):
        m = request.getfixturevalue("mosquitto")
        monkeypatch.setattr(hostbroker, "BROKER", (m.host, m.port))

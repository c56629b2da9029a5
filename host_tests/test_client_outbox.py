# The blocking client's outbox housekeeping without a broker (CPython): what
# runs while offline. check_msg() commits a FileStore's group once group_ms
# has passed and drops expired messages; flush() commits what is pending even
# when it cannot deliver it.
import time

import pytest

import holdfast.shell
from holdfast import MQTTClient
from holdfast.durable import FileStore


def _offline(store, **kw):
    # Never connected: nothing is sent, only the housekeeping runs.
    return MQTTClient("c", "127.0.0.1", 1, outbox=store, timeout_ms=50, **kw)


def test_flush_commits_a_group_even_when_offline(tmp_path):
    st = FileStore(str(tmp_path / "ob"), group=100)
    c = _offline(st)
    for i in range(3):
        c.publish("t", "m%d" % i, qos=1)
    assert st.uncommitted == 3
    assert c.flush(20) is False  # not delivered ...
    assert st.uncommitted == 0  # ... but committed
    assert c.pending() == 3


def test_check_msg_commits_after_group_ms(tmp_path):
    st = FileStore(str(tmp_path / "ob"), group=100, group_ms=5)
    c = _offline(st)
    c.publish("t", "m", qos=1)
    assert st.uncommitted == 1
    time.sleep(0.02)
    c.check_msg()
    assert st.uncommitted == 0


def test_check_msg_drops_expired_messages_offline(tmp_path, monkeypatch):
    clock = [1000]
    monkeypatch.setattr(holdfast.shell, "wall", lambda: clock[0])
    st = FileStore(str(tmp_path / "ob"))
    c = _offline(st)
    c.publish("t", "short", qos=1, expiry=10)
    c.publish("t", "long", qos=1, expiry=100)
    c.publish("t", "forever", qos=1)
    c.check_msg()
    assert (c.pending(), c.expired) == (3, 0)
    clock[0] = 1010
    c.check_msg()
    assert (c.pending(), c.expired) == (2, 1)
    clock[0] = 5000
    c.check_msg()
    assert (c.pending(), c.expired) == (1, 2)


def test_when_full_is_checked():
    with pytest.raises(ValueError, match="when_full"):
        MQTTClient("c", "127.0.0.1", when_full="drop")

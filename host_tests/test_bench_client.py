# The client section of the bench compares holdfast's state after connect
# with umqtt.simple's plus the buffers holdfast preallocates by default:
# those figures must be what the client really makes, or the target is
# measured against the wrong allowance.
from bench.client_rows import DEFAULT_SIZE, DEFAULT_RX, DEFAULT_RING, DEFAULT_BUFFERS
from holdfast.client import MQTTClient


def test_the_allowance_is_what_a_default_client_preallocates():
    s = MQTTClient("dev", "broker.test").session
    assert (s.size, len(s.rx.buf), len(s.store.mv)) == (DEFAULT_SIZE, DEFAULT_RX, DEFAULT_RING)
    s.start(0)  # the send buffer is made by the first start()
    assert len(s.tx) + len(s.rx.buf) + len(s.store.mv) == DEFAULT_BUFFERS

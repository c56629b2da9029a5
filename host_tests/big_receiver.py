# A subscriber that takes messages of up to 15 KB on a small heap: the
# receive limit set on its own (rx_size), the send buffer and the RAM outbox
# left at their defaults. Run by test_receive_limit.py:
#   micropython -X heapsize=N big_receiver.py PORT VIEWS
import sys
import gc
from holdfast import MQTTClient

port, views = int(sys.argv[1]), sys.argv[2] == "1"
got = []
c = MQTTClient("big-rx", "127.0.0.1", port, rx_size=16384, views=views, keepalive=30)
c.set_callback(lambda t, m: got.append((len(m), m[:4] == b"head" and m[-4:] == b"tail")))
c.connect()
c.subscribe(b"big/#", 1)
print("subscribed")
while len(got) < 2:
    c.wait_msg(1000)
gc.collect()
print("RESULT", got, c.oversized, len(c.session.tx), len(c.session.rx.buf), len(c.session.store.mv))
c.disconnect()

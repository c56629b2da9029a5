# Run by test_small_heap.py under the MicroPython unix port with -X
# heapsize=64k, the client from .mpy:
#     micropython small_heap_client.py MODPATH PORT CID N
# A subscribed client at the default size: prints READY once subscribed;
# the test then publishes messages too large for its receive buffer and N
# small ones. It waits for the N small ones, then proves they were
# acknowledged: a new link on the kept session, a marker published to itself
# comes back with nothing re-sent before it. Prints RESULT and a JSON line.
import sys

sys.path.insert(0, sys.argv[1])
port, cid, n = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
from holdfast import MQTTClient  # noqa: E402

got = []
c = MQTTClient(cid, "127.0.0.1", port, keepalive=30)
c.set_callback(lambda t, m: got.append(bytes(m)))
c.connect(clean_session=False)
c.subscribe("hf/sh/" + cid + "/#", 1)
print("READY")
for _ in range(600):  # bounded: the messages are sent once READY is read
    if len(got) >= n:
        break
    c.wait_msg(100)
small, big, up = list(got), c.oversized, c.isconnected()
c.disconnect()
del got[:]
c.connect(clean_session=False)
c.publish("hf/sh/" + cid + "/end", b"end", False, 1)
for _ in range(600):
    if b"end" in got:
        break
    c.wait_msg(100)
c.disconnect()
import json  # noqa: E402
print("RESULT " + json.dumps({"small": [m.decode() for m in small], "oversized": big, "connected": up,
                              "after": [m.decode() for m in got]}))

# Run by test_small_heap.py under the MicroPython unix port with -X
# heapsize=54k (the publish-only client's smallest heap, make bench), the
# client from .mpy:
#     micropython small_heap_publisher.py MODPATH PORT CID N
# Publishes readings 0..N-1 at QoS 1 while the test restarts the broker,
# printing "AT i" every ten; a full outbox (offline) is tried again with the
# same reading, so none is skipped. Then flushes and prints RESULT and a
# JSON line: pending, attempts, the MemoryErrors publish() raised.
import sys

sys.path.insert(0, sys.argv[1])
port, cid, n = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
from time import sleep_ms  # noqa: E402
from holdfast import MQTTClient, OutboxFull  # noqa: E402

c = MQTTClient(cid, "127.0.0.1", port, keepalive=30, backoff_ms=(100, 500), timeout_ms=2000)
c.connect()
print("READY")
i = short = 0
for _ in range(30000):  # bounded: each round sleeps 20 ms
    if i == n:
        break
    try:
        c.publish("hf/shp/" + cid, b"%d" % i, False, 1)
        i += 1
        if i % 10 == 0:
            print("AT", i)
    except OutboxFull:
        pass
    except MemoryError:  # a full outbox's words found no heap: nothing was stored
        short += 1
    c.check_msg()
    sleep_ms(20)
flushed = c.flush(30000)
import json  # noqa: E402
print("RESULT " + json.dumps({"sent": i, "flushed": flushed, "pending": c.pending(),
                              "attempts": c.attempts, "short": short}))
c.disconnect()

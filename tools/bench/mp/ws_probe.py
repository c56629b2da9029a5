# The ws bench's client (tools/bench/ws.py), one transport per process, on
# the MicroPython unix port or CPython:
#   micropython ws_probe.py FIRMWARE_DIR URL N [CAFILE]
# Prints one JSON line: the heap after connect and after the runs
# (gc.collect(), gc.mem_alloc(); MicroPython only), and QoS 0 and QoS 1
# messages per second (QoS 1: until the last is acknowledged).
import sys
sys.path.insert(0, sys.argv[1])
import gc
import json
from holdfast import MQTTClient  # first: on CPython it gives time its ticks_ms (compat.py)
from time import ticks_ms, ticks_diff


def heap():
    gc.collect()
    return gc.mem_alloc() if hasattr(gc, "mem_alloc") else None


def main():
    url = sys.argv[2]
    n = int(sys.argv[3])
    base = heap()
    ca = sys.argv[4] if len(sys.argv) > 4 else None
    c = MQTTClient("bench-" + url[:3], url, keepalive=60, ssl_params={"cafile": ca} if ca else None)
    c.connect()
    r = {"connected": heap() - base if base is not None else None}
    payload = b"x" * 32
    t0 = ticks_ms()
    for i in range(n):
        c.publish(b"bench/ws", payload, False, 0)
    c.flush(30000)
    r["qos0"] = n * 1000 / max(1, ticks_diff(ticks_ms(), t0))
    t0 = ticks_ms()
    for i in range(n):
        c.publish(b"bench/ws", payload, False, 1)
    ok = c.flush(60000)
    r["qos1"] = n * 1000 / max(1, ticks_diff(ticks_ms(), t0))
    r["acked"] = ok and c.pending() == 0
    # What one more QoS 0 and one acknowledged QoS 1 publish take, gc held off.
    if base is not None:
        gc.collect()
        gc.disable()
        a = gc.mem_alloc()
        for i in range(50):
            c.publish(b"bench/ws", payload, False, 0)
            c.publish(b"bench/ws", payload, False, 1)
            c.flush(5000)
        r["per_publish"] = (gc.mem_alloc() - a) / 100
        gc.enable()
    r["after"] = heap() - base if base is not None else None
    c.disconnect()
    print(json.dumps(r))


main()

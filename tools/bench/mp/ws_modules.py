# The ws bench's module costs (tools/bench/ws.py) on the unix port:
#   micropython ws_modules.py LIB_DIR
# Prints one JSON line: the heap each WebSocket module takes once imported
# (gc.collect(), gc.mem_alloc() deltas), and what stays after the modules
# that are dropped after use (wsopen.py, url.py) are unloaded.
import sys
sys.path.insert(0, sys.argv[1])
import gc
import json


def heap():
    gc.collect()
    return gc.mem_alloc()


from holdfast import MQTTClient  # noqa: E402,F401  the client, as a ws client has it first
from holdfast.unload import unload  # noqa: E402
unload()
r = {}
a = heap()
import holdfast.ws  # noqa: E402,F401
b = heap()
r["ws"] = b - a
import holdfast.wsopen  # noqa: E402,F401
c = heap()
r["wsopen"] = c - b
from holdfast.unload import unload  # noqa: E402,F811
unload("wsopen")
d = heap()
r["wsopen_left"] = d - b
import holdfast.url  # noqa: E402,F401
r["url"] = heap() - d
unload("url")
r["url_left"] = heap() - d
print(json.dumps(r))

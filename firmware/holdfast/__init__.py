# holdfast: an MQTT 3.1.1 / 3.1 client for MicroPython that keeps what it promised to deliver.
# This package is a face (as MicroPython's asyncio is): each public name
# below loads its module the first time it is used, so importing one
# submodule (the codec, say) does not put the whole client on a small heap.
import sys

if sys.implementation.name != "micropython":  # CPython: MicroPython's built-ins (compat.py)
    from . import compat
del sys  # a name the package would keep on a board's heap for good

# Which module holds each public name; the error classes are the errors
# package's (its own face says where each lives).
_WHERE = {"MQTTClient": "client", "AsyncClient": "aclient", "MemoryStore": "memstore",
          "FileStore": "durable", "FlashStore": "durable"}


def __getattr__(name):
    if name[:1].islower():  # a submodule: holdfast.codec without an import of it
        return __import__("holdfast." + name, None, None, [name])
    m = _WHERE.get(name, "errors")
    v = globals()[name] = getattr(__import__(m, globals(), None, (name,), 1), name)
    return v

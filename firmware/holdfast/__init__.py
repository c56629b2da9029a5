# holdfast: an MQTT 3.1.1 / 3.1 client for MicroPython that keeps what it promised to deliver.
# Names load on first use, so importing one submodule (the codec, say) does
# not put the whole client on a small heap.
import sys

if sys.implementation.name != "micropython":  # CPython: MicroPython's built-ins (compat.py)
    from . import compat
del sys  # a name the package would keep on a board's heap for good


def __getattr__(name):
    if name[:1].islower():  # a submodule: `from holdfast import codec`
        return __import__("holdfast." + name, None, None, [name])
    # AsyncClient is the one name that begins "Async", FileStore and
    # FlashStore the durable ones that end "Store": a str constant of more
    # than 10 letters would stay on a board's heap as an object (from .mpy).
    m = ("client" if name == "MQTTClient" else "aclient" if name[:5] == "Async"
         else "durable" if name[-5:] == "Store" else "errors")
    return getattr(__import__("holdfast." + m, None, None, [m]), name)

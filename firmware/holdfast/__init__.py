# holdfast: an MQTT 3.1.1 / 3.1 client for MicroPython that keeps what it promised to deliver.
# Names load on first use, so importing one submodule (the codec, say) does
# not put the whole client on a small heap.


def __getattr__(name):
    if name == "MQTTClient":
        from .client import MQTTClient as x
    elif name == "AsyncClient":
        from .aclient import AsyncClient as x
    elif name[:1].isupper():  # an error class
        x = getattr(__import__("holdfast.errors", None, None, ["errors"]), name)
    else:  # a submodule: `from holdfast import codec`
        x = __import__("holdfast." + name, None, None, [name])
    return x

# Takes a module a client runs only at times out of the heap once it is done:
# tls.py and tlssetup.py after a handshake or building the context,
# durable/scan.py after a store opens, durable/compaction.py after a
# compaction; and this module with it, so between uses none of them holds
# heap. Imported where it is used, the way those modules are.
import sys


def unload(*names):
    """Modules names below the package ("tls", "durable.scan") and this one
    leave the heap at the next collection once nothing refers to them: not
    sys.modules, nor the package that holds each (an import sets it as its
    attribute). The package's __dict__, because its __getattr__ would
    import a name again, and delattr of a name not there raises (KeyError on
    MicroPython, AttributeError on CPython). A caller's frame keeps its
    module until it returns."""
    for name in names + ("unload",):
        name = __name__[:-6] + name  # "holdfast." + name
        sys.modules.pop(name, None)
        i = name.rfind(".")
        sys.modules[name[:i]].__dict__.pop(name[i + 1:], None)

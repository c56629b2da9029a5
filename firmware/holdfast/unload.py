# Takes a module a client runs only at times out of the heap once it is done:
# tls.py and tlssetup.py after a handshake or building the context, outscan.py
# after a store opens, outmove.py after a compaction; and this module with
# it, so between uses none of them holds heap. Imported where it is used,
# the way those modules are.
import sys


def unload(*names):
    """Package modules names ("tls", "outscan") and this one leave the heap
    at the next collection once nothing refers to them: not sys.modules, nor
    the package (an import sets each as its attribute). The package's
    __dict__, because its __getattr__ would import a name again, and delattr
    of a name not there raises (KeyError on MicroPython, AttributeError on
    CPython). A caller's frame keeps its module until it returns."""
    pkg = sys.modules[__name__[:-7]].__dict__
    for name in names + ("unload",):
        sys.modules.pop(__name__[:-6] + name, None)
        pkg.pop(name, None)

# Unix-port shim for mqtt_async (micropython-mqtt): its board imports
# (machine.unique_id, network.WLAN) fail on the unix port (and on the
# WebAssembly port, where the footprint bench runs it too), and it then imports
# this module for the rest. The link is always up; getaddrinfo on the unix port
# returns a raw sockaddr, which open_connection turns back into host and port.
import asyncio
from time import ticks_ms, ticks_diff
from micropython import const


def unique_id():
    return b"unixport"


class _Wlan:
    def isconnected(self):
        return True

    def active(self, *a):
        return True

    def status(self):
        return 1010


STA_IF = _Wlan()


def is_awaitable(f):
    return f.__class__.__name__ == "generator"


async def open_connection(addr):
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
    else:  # struct sockaddr_in: family(2) port(2, big-endian) address(4)
        port = addr[2] << 8 | addr[3]
        host = "%d.%d.%d.%d" % (addr[4], addr[5], addr[6], addr[7])
    try:
        connect = asyncio.open_connection
    except AttributeError:  # the WebAssembly port's asyncio has no streams (tools/runtimes/wasm)
        from astream import open_connection as connect
    return (await connect(host, port))[0]

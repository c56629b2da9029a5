# The blocking client's I/O shell on a scripted socket and a fake clock: what
# the client tests patch in (test_client_mock, test_client_edges).
from holdfast import client as hc
from holdfast import shell, sockets
from time import ticks_add  # CPython: holdfast puts it there
import consts as mq
from fakebroker import ScriptedSocket, no_wait, wire

CONNACK = wire((mq.CONNACK, False, 0))


class Dial:
    """A connect sockets.dial() began (the first of what it gives the client):
    here to the rig's opener, connected at the first step unless told to
    stay pending for some steps that do not wait (a reconnect's; connect()
    waits for it)."""

    pending = 0

    def __init__(self, rig, host, port):
        self.rig = rig
        self.host, self.port = host, port
        self.steps = 0
        self.closed = False

    def step(self, ms):
        self.steps += 1
        if self.steps <= Dial.pending and not ms:
            return None
        return self.rig.opener(self.host, self.port, ms)

    def close(self):
        self.closed = True


def connected(d, host, port, ms):
    """sockets.connected on what Rig.dial gave."""
    return d[0].step(ms)


class Rig:
    """Patches the client's TCP connect (each made by opener()), its wait on
    the socket and the clock for one test. The clock (now) wraps as the
    port's ticks do."""

    def __init__(self, *scripts, write_limit=None):
        self.scripts = list(scripts)
        self.socks = []
        self.now = 1000
        self.write_limit = write_limit

    def dial(self, host, port):
        return (Dial(self, host, port),)

    def opener(self, host, port, timeout_ms):
        if not self.scripts:
            raise OSError(111, "connection refused")
        s = ScriptedSocket(self.scripts.pop(0), self.write_limit)
        self.socks.append(s)
        return s

    def clock(self):
        self.now = ticks_add(self.now, 1)  # every look at the clock moves it, so waits end
        return self.now

    def __enter__(self):
        self.saved = (sockets.dial, sockets.connected, hc.MQTTClient._io_wait, hc.ticks_ms,
                      hc.sleep_ms, shell.ticks_ms)
        sockets.dial = self.dial
        sockets.connected = connected
        hc.MQTTClient._io_wait = no_wait
        hc.ticks_ms = shell.ticks_ms = self.clock
        hc.sleep_ms = self.sleep
        return self

    def sleep(self, ms):
        self.now = ticks_add(self.now, ms)

    def __exit__(self, *a):
        (sockets.dial, sockets.connected, hc.MQTTClient._io_wait, hc.ticks_ms,
         hc.sleep_ms, shell.ticks_ms) = self.saved
        Dial.pending = 0

    def client(self, **kw):
        kw.setdefault("timeout_ms", 2000)
        return hc.MQTTClient(b"dev", "broker.test", keepalive=kw.pop("keepalive", 0), **kw)

# The blocking client's I/O shell on a scripted socket and a fake clock: what
# the client tests patch in (test_client_mock, test_client_edges).
from holdfast import client as hc
from holdfast import front
import consts as mq
from fakebroker import ScriptedSocket, no_wait, wire

CONNACK = wire((mq.CONNACK, False, 0))


class Dial:
    """What net.Connector gives the client: here a scripted socket, connected
    at the first step unless told to stay pending for some steps."""

    pending = 0

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.steps = 0
        self.closed = False

    def step(self):
        self.steps += 1
        if self.steps <= Dial.pending:
            return None
        return hc.net.open_socket(self.host, self.port, 0)

    def close(self):
        self.closed = True


class Rig:
    """Patches the client's socket opener, its wait on the socket and the clock for one test."""

    def __init__(self, *scripts, write_limit=None):
        self.scripts = list(scripts)
        self.socks = []
        self.now = 1000
        self.write_limit = write_limit

    def opener(self, host, port, timeout_ms):
        if not self.scripts:
            raise OSError(111, "connection refused")
        s = ScriptedSocket(self.scripts.pop(0), self.write_limit)
        self.socks.append(s)
        return s

    def clock(self):
        self.now += 1  # every look at the clock moves it, so waits end
        return self.now

    def __enter__(self):
        self.saved = (hc.net.open_socket, hc.net.Connector, hc.MQTTClient._io_wait, hc.ticks_ms,
                      hc.sleep_ms, front.ticks_ms)
        hc.net.open_socket = self.opener
        hc.net.Connector = Dial
        hc.MQTTClient._io_wait = no_wait
        hc.ticks_ms = front.ticks_ms = self.clock
        hc.sleep_ms = self.sleep
        return self

    def sleep(self, ms):
        self.now += ms

    def __exit__(self, *a):
        (hc.net.open_socket, hc.net.Connector, hc.MQTTClient._io_wait, hc.ticks_ms,
         hc.sleep_ms, front.ticks_ms) = self.saved
        Dial.pending = 0

    def client(self, **kw):
        kw.setdefault("timeout_ms", 2000)
        return hc.MQTTClient(b"dev", "broker.test", keepalive=kw.pop("keepalive", 0), **kw)

# Drives a Session (sans-I/O) or a client (through a scripted socket) from the
# broker's side, in exact bytes. Test-side helper for both runtimes.
import consts as mq
from holdfast import broker
from holdfast.session import Session
from drain import drain
from packets import current, encode

_BUF = bytearray(4096)


def wire(*packets):
    """Bytes of packets given as tuples (see packets.py)."""
    out = b""
    for p in packets:
        out += bytes(_BUF[:encode(_BUF, p)])
    return out


def parse(data):
    # A reader sized to the data: a fixed 4 KB one per call fragments a
    # small heap (the smallest-heap runs of the portable tests).
    r = broker.BrokerReader(max(16, len(data)))
    broker.feed(r, data)
    out = []
    t = r.next()
    while t:
        out.append(current(r))
        t = r.next()
    assert r.start == r.end, "trailing partial packet"
    return out


def sent(s, now=0):
    """Packets the session queued, as tuples; marks them written at now."""
    out = parse(bytes(s.tx[s.tx_start:s.tx_end]))
    if s.tx_end > s.tx_start:
        s.sent(s.tx_end - s.tx_start, now)
    return out


def feed(s, *packets, now=0):
    data = wire(*packets)
    i = 0
    while i < len(data):
        i += broker.feed(s.rx, data[i:])
        drain(s, now)
    return drain(s, now)


def reads(s, data, now=0, on=None):
    """data into the session's receive buffer as socket reads would put it
    (as much as fits each time), receive() after each; returns the events,
    each also given to on(event) as it comes (the session's fields then
    describe it)."""
    got = []
    i = 0
    while i < len(data):
        room = s.rx.tail()
        n = min(len(room), len(data) - i)
        room[:n] = data[i:i + n]
        s.rx.end += n
        i += n
        e = s.receive(now)
        while e:
            got.append(e)
            if on:
                on(e)
            e = s.receive(now)
    return got


def grant(s, out=None, limit=100):
    """Plays a broker that grants every SUBSCRIBE the session sends (out:
    packets already taken from it), until it sends none; returns the
    filters granted, in order."""
    got = []
    for _ in range(limit):
        if out is None:
            out = sent(s)
        if not out:
            return got
        for p in out:
            assert p[0] == mq.SUBSCRIBE, p
            got += [f for f, q in p[2]]
            feed(s, (mq.SUBACK, p[1], tuple(q for f, q in p[2])))
        out = None
    raise AssertionError("the session kept subscribing")


def session(now=0, present=False, **kw):
    """A Session that has sent CONNECT and got CONNACK."""
    s = Session(kw.pop("client_id", b"dev"), **kw)
    s.start(now)
    assert sent(s)[0][0] == mq.CONNECT
    feed(s, (mq.CONNACK, present, 0), now=now)
    return s


class ScriptedSocket:
    """A socket whose peer is a test: it hands out given chunks on read
    (None = EAGAIN), takes writes up to a limit per call, and can close."""

    def __init__(self, chunks=(), write_limit=None):
        self.chunks = list(chunks)
        self.written = b""
        self.write_limit = write_limit
        self.closed = False
        self.eof = False

    def push(self, data):
        self.chunks.append(data)

    def readinto(self, buf, n=None):
        if not self.chunks:
            if self.eof:
                return 0
            return None
        d = self.chunks.pop(0)
        if d is None:
            return None
        k = min(len(d), len(buf))
        buf[:k] = d[:k]
        if k < len(d):
            self.chunks.insert(0, d[k:])
        return k

    recv_into = readinto

    def write(self, buf, off=0, n=None):
        if n is None:
            n = len(buf) - off
        if self.write_limit is not None:
            n = min(n, self.write_limit)
        self.written += bytes(buf[off:off + n])
        return n

    def send(self, data):
        return self.write(data, 0, len(data))

    def close(self):
        self.closed = True

    def take(self):
        """Packets written so far, as tuples; forgets them."""
        out = parse(self.written)
        self.written = b""
        return out


def no_wait(client, ms, out=False):
    """MQTTClient._io_wait for a scripted socket: it is always ready."""
    return True

# MQTT over WebSockets, exact bytes: server= URLs (url.py) and ws.py's
# framing over a scripted link (what a real server cannot be steered to do
# byte by byte: partial writes, a frame split anywhere, a ping in the middle
# of a data frame being written). The handshake and real servers:
# test_ws.py. Runs under CPython and MicroPython (heap_lock there).

import sys

from holdfast.url import parse
from holdfast.ws import WebSocket
from holdfast.sockets import flush, read_into
from holdfast.session import Session
from holdfast import errors
from support import raises
from heaplock import under_heap_lock

T = b"s/t"


class Link:
    """A non-blocking socket as shell.py and ws.py call it, on both
    runtimes: reads come from inbound (None when it is empty), writes land
    in out, at most limit bytes a call (0: blocked). Allocates nothing per
    call (heap_lock)."""

    def __init__(self, limit=1 << 30):
        self.inb = bytearray(2048)
        self.i = self.n = 0
        self.out = bytearray(2048)
        self.o = 0
        self.limit = limit
        self.closed = False

    def push(self, data):
        for b in data:
            self.inb[self.n] = b
            self.n += 1

    def readinto(self, buf, n=-1):
        if self.closed:
            return 0
        k = self.n - self.i
        if n >= 0 and n < k:
            k = n
        if len(buf) < k:
            k = len(buf)
        if not k:
            return None
        for j in range(k):
            buf[j] = self.inb[self.i + j]
        self.i += k
        if self.i == self.n:
            self.i = self.n = 0
        return k

    def recv_into(self, buf, n=0):
        k = self.readinto(buf, n or -1)
        if k is None:
            raise OSError(11, "EAGAIN")
        return k

    def write(self, buf, off=0, n=-1):
        if n < 0:
            n = len(buf) - off
        if n > self.limit:
            n = self.limit
        room = len(self.out) - self.o  # past the end of out a write is counted, not kept
        for j in range(n if n < room else room):
            self.out[self.o + j] = buf[off + j]
        self.o += n
        return n

    def send(self, mv):
        return self.write(mv, 0, len(mv))

    def take(self):
        d = bytes(self.out[:self.o])
        self.o = 0
        return d

    def close(self):
        self.closed = True


class Zeros:
    """n zero bytes that keep only what is written to the first and the
    last 8 (and count every write)."""

    def __init__(self, n):
        self.n = n
        self.kept = bytearray(16)
        self.sets = 0

    def __len__(self):
        return self.n

    def _at(self, k):
        return k if k < 8 else k - self.n + 16 if k >= self.n - 8 else -1

    def __getitem__(self, k):
        i = self._at(k)
        return self.kept[i] if i >= 0 else 0

    def __setitem__(self, k, v):
        self.sets += 1
        i = self._at(k)
        if i >= 0:
            self.kept[i] = v


def frames(data):
    """The client frames in data: [(opcode, fin, key, unmasked payload)]."""
    out = []
    i = 0
    while i < len(data):
        b0, b1 = data[i], data[i + 1]
        assert b1 & 0x80, "an unmasked client frame"
        n = b1 & 0x7F
        i += 2
        if n == 126:
            n = data[i] << 8 | data[i + 1]
            i += 2
        elif n == 127:
            n = 0
            for k in range(8):
                n = n << 8 | data[i + k]
            i += 8
        key = data[i:i + 4]
        i += 4
        out.append((b0 & 15, bool(b0 & 0x80), bytes(key), bytes(bytearray(data[i + k] ^ key[k % 4] for k in range(n)))))
        i += n
    return out


def sframe(op, data, fin=True):
    n = len(data)
    head = bytes([(0x80 if fin else 0) | op, n]) if n < 126 else bytes([(0x80 if fin else 0) | op, 126, n >> 8, n & 255])
    return head + data


PUBACK = b"\x82\x01\x40\x82\x01\x02\x82\x02\x00\x00"  # in three frames, the id to fill in


def ws(limit=1 << 30):
    link = Link(limit)
    return WebSocket(link, None, None, bytearray(131)), link


# -- server= as a URL ------------------------------------------------------------


def test_url_forms_and_their_default_ports():
    assert parse("mqtt://broker.example", 0, None, None) == ("broker.example", 1883, None, None)
    assert parse("mqtts://broker.example", 0, None, None) == ("broker.example", 8883, True, None)
    assert parse("ws://b.example:8080/mqtt", 0, None, None) == ("b.example", 8080, None, ("/mqtt", None))
    assert parse("wss://b.example", 0, None, None) == ("b.example", 443, True, ("/", None))
    assert parse("ws://b.example", 0, None, None) == ("b.example", 80, None, ("/", None))
    assert parse("WSS://[::1]:9443/a/b?x=1", 0, None, {"X-Key": "v"}) == ("::1", 9443, True, ("/a/b?x=1", {"X-Key": "v"}))
    assert parse("mqtt://10.0.0.2:1884", 0, None, None) == ("10.0.0.2", 1884, None, None)
    assert parse("mqtt://h", 2000, None, None)[1] == 2000  # port= when the URL has none
    ctx = object()
    assert parse("wss://h/", 0, ctx, None)[2] is ctx  # an SSLContext given is used


def test_url_mistakes_are_named():
    for url, words in (("http://h/", "scheme"), ("ws://h:x/", "not a number"), ("ws:///p", "no host"),
                       ("ws://u:p@h/", "credentials"), ("mqtt://h/path", "no path"),
                       ("ws://h:70000/", "outside")):
        e = raises(ValueError, parse, url, 0, None, None)
        assert words in str(e), (url, e)
    assert "wss://" in str(raises(ValueError, parse, "ws://h/", 0, True, None))
    assert "headers=" in str(raises(ValueError, parse, "mqtt://h", 0, None, {"a": "b"}))
    assert "not a valid HTTP header" in str(raises(ValueError, parse, "ws://h/", 0, None, {"a": "b\r\nc: d"}))


def test_client_takes_a_url_and_a_plain_host_stays_as_it_was():
    from holdfast import MQTTClient
    c = MQTTClient("u", "ws://b.example/mqtt", headers={"Authorization": "Bearer x"})
    assert (c.server, c.port, c.ws, c.tls) == ("b.example", 80, ("/mqtt", {"Authorization": "Bearer x"}), None)
    c = MQTTClient("u", "b.example")
    assert (c.server, c.port, c.ws, c.tls) == ("b.example", 1883, None, None)
    c = MQTTClient("u", "mqtt://b.example:1999")
    assert (c.server, c.port, c.ws, c.tls) == ("b.example", 1999, None, None)


# -- sending -------------------------------------------------------------------------


def test_each_write_is_one_masked_binary_frame_with_a_fresh_key():
    w, link = ws()
    keys = []
    for size in (0, 5, 125, 126, 300, 2000):
        data = bytearray(bytes(range(256)) * (size // 256 + 1))[:size]
        plain = bytes(data)
        assert w.write(data, 0, size) == size
        (op, fin, key, payload), = frames(link.take())
        assert (op, fin) == (2, True) and payload == plain, size
        keys.append(key)
    # 16-bit and 64-bit length fields at their edges, over a payload of
    # zeros that keeps only its first and last 8 bytes (64 KB would not fit
    # the heap guard): each kept byte, masked in place, is its key byte.
    for size, head in ((65535, b"\x82\xfe\xff\xff"), (65536, b"\x82\xff\x00\x00\x00\x00\x00\x01\x00\x00")):
        link.out = bytearray(16)
        # CPython's socket calls take a buffer (memoryview): a real one there.
        data = Zeros(size) if sys.implementation.name == "micropython" else bytearray(size)
        assert w.write(data, 0, size) == size and link.o == len(head) + 4 + size, size
        assert bytes(link.out[:len(head)]) == head, bytes(link.out)
        key = bytes(link.out[len(head):len(head) + 4])
        ends = list(range(8)) + list(range(size - 8, size))
        assert [data[k] for k in ends] == [key[k & 3] for k in ends], size
        assert getattr(data, "sets", size) == size, size
        keys.append(key)
        link.o = 0
    assert len(set(keys)) == len(keys), keys


def test_a_write_that_blocks_is_finished_with_the_same_bytes_masked_once():
    w, link = ws(limit=3)
    tx = bytearray(b"\x30\x07\x00\x03s/tabcd")
    sent = 0
    while sent < len(tx):
        n = w.write(tx, sent, len(tx) - sent)  # as sockets.flush offers the rest again
        sent += n
    (op, fin, key, payload), = frames(link.take())
    assert payload == b"\x30\x07\x00\x03s/tabcd", payload
    link.limit = 0  # blocked: nothing written, nothing lost
    xy = bytearray(b"xy")
    assert w.write(xy, 0, 2) == 0
    link.limit = 100
    assert w.write(xy, 0, 2) == 2
    assert [f[3] for f in frames(link.take())] == [b"xy"]


# -- receiving -------------------------------------------------------------------


def read_all(w, size=64):
    buf = bytearray(size)
    got = b""
    while True:
        k = w.readinto(buf)
        if not k:
            return got, k
        got += bytes(buf[:k])


def test_packets_spanning_frames_frames_holding_several_and_continuations():
    w, link = ws()
    stream = b"\x20\x02\x00\x00" + b"\x40\x02\x00\x01" + b"\x30\x05\x00\x01ahi"
    link.push(sframe(2, stream[:3]) + sframe(2, stream[3:9]) + sframe(2, b"") + sframe(2, stream[9:]))
    assert read_all(w) == (stream, None)
    # A message in fragments: binary without FIN, continuations, the last with FIN.
    link.push(sframe(2, stream[:1], False) + sframe(0, stream[1:5], False) + sframe(0, stream[5:], True))
    assert read_all(w, 4) == (stream, None)  # a frame larger than the buffer: read on in pieces
    # The same stream one byte at a time on the wire.
    for b in sframe(2, stream[:7]) + sframe(2, stream[7:], True):
        link.push(bytes([b]))
        k = w.readinto(bytearray(1))
        assert k in (None, 1)
    assert read_all(w) == (b"", None)


def test_ping_is_answered_with_its_data_even_mid_frame():
    w, link = ws(limit=4)
    tx = bytearray(b"\x30\x0a\x00\x03s/tabcdefg")
    plain = bytes(tx)  # tx is masked in place
    n = w.write(tx, 0, len(tx))
    assert n == 4, n  # the header (in 4-byte writes), then 4 bytes of the payload: the frame is half out
    link.push(sframe(9, b"hello") + sframe(2, b"\xd0\x00"))
    assert read_all(w) == (b"\xd0\x00", None)
    assert link.o == 6 + n  # the pong waits: it cannot go inside a data frame
    sent = n
    while sent < len(tx):
        sent += w.write(tx, sent, len(tx) - sent)
    got = frames(link.take())  # the data frame done, the pong follows at once
    assert [(f[0], f[3]) for f in got] == [(2, plain), (10, b"hello")], got
    link.push(sframe(9, b""))
    read_all(w)
    assert [(f[0], f[3]) for f in frames(link.take())] == [(10, b"")]
    link.limit = 0  # a pong the socket does not take now goes before the next data frame
    link.push(sframe(9, b"p1"))
    read_all(w)
    assert link.o == 0
    link.limit = 100
    assert w.write(bytearray(b"z"), 0, 1) == 1
    assert [(f[0], f[3]) for f in frames(link.take())] == [(10, b"p1"), (2, b"z")]


def test_close_is_answered_and_the_link_is_lost():
    w, link = ws()
    link.push(sframe(8, b"\x03\xe9bye"))
    e = raises(errors.LinkDown, w.readinto, bytearray(16))
    assert "code 1001: bye" in str(e) and e.code == 1001, e
    assert [(f[0], f[3]) for f in frames(link.take())] == [(8, b"\x03\xe9")]
    w, link = ws()
    w.close()
    assert link.closed and [(f[0], f[3]) for f in frames(link.take())] == [(8, b"\x03\xe8")]


def test_frames_a_server_may_not_send_are_named_protocol_errors():
    cases = ((sframe(1, b"x"), "text"), (b"\x82\x81abcdx", "masked"), (b"\xc2\x01x", "reserved"),
             (b"\x82\x7f\x80\x00\x00\x00\x00\x00\x00\x01x", "length"), (sframe(9, b"", False), "fragmented"),
             (b"\x89\x7e\x00\xc8", "control"), (sframe(0, b"x"), "continuation"),
             (sframe(2, b"x", False) + sframe(2, b"y"), "interleaved"), (b"\x83\x00", "opcode"))
    for data, reason in cases:
        w, link = ws()
        link.push(data)
        e = raises(errors.WebSocketError, read_all, w)
        assert e.reason == reason and isinstance(e, errors.MQTTProtocolError), (reason, e)


def test_64_bit_length_field_is_read():
    w, link = ws()
    link.push(b"\x82\x7f\x00\x00\x00\x00\x00\x00\x00\x04\x20\x02\x00\x00")
    assert read_all(w) == (b"\x20\x02\x00\x00", None)


# -- nothing per publish allocates ------------------------------------------------


def test_qos0_and_acknowledged_qos1_publishes_over_ws_allocate_nothing():
    # The engine, shell.py's flush and read_into and the WebSocket link over
    # a scripted socket: a QoS 1 publish framed and masked, its PUBACK read
    # from the server's frames, a QoS 0 publish framed. On MicroPython under
    # heap_lock, so any allocation fails the test.
    s = Session(b"alloc", True, 0, 4, 256, 4)
    w, link = ws()
    s.start(0)
    s.sent(flush(w, s), 0)
    link.take()
    link.push(b"\x82\x04\x20\x02\x00\x00")
    read_into(w, s)
    assert s.receive(0) == 0 and s.state == 3, s.state
    inb = link.inb

    def one():
        pid = s.publish(T, b"21.5", 1, False, 0)
        s.sent(flush(w, s), 0)
        # The PUBACK in three frames, as aedes writes it: its first byte,
        # its length, the id. For odd ids all three are there for one read;
        # for even ids the first comes in a read of its own, and ws.py holds
        # that byte back (a packet begun in the session's buffer would cost
        # a memoryview per read, codec.Reader.tail).
        i = 0
        if not pid & 1:
            inb[0] = 0x82
            inb[1] = 1
            inb[2] = 0x40
            link.n = 3
            read_into(w, s)
            s.receive(0)
            i = 3
        for j in range(i, 10):
            inb[j - i] = PUBACK[j]
        inb[0 + 8 - i] = pid >> 8
        inb[0 + 9 - i] = pid & 0xFF
        link.n = 10 - i
        read_into(w, s)
        s.receive(0)
        s.publish(T, b"21.5", 0, False, 0)
        s.sent(flush(w, s), 0)
        link.o = 0
        return pid

    pids = under_heap_lock(one, 40)
    assert pids == 40 and len(s.store) == 0, (pids, len(s.store))
    s.publish(T, b"21.5", 0, False, 0)
    s.sent(flush(w, s), 0)
    (op, fin, key, payload), = frames(link.take())
    assert payload == b"\x30\x09\x00\x03s/t21.5", payload

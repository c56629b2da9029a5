"""A counting MQTT subscriber for the bench (CPython, raw socket, no paho).

    sub = Counter(host, port, ["bench/v0", "bench/v1"])   # QoS 0 (or qos=1)
    sub.start()
    n0 = sub.count
    ... run a client ...
    got = sub.wait_for(n0 + expected, quiet_s=0.3) - n0
    sub.stop()

It only frames packets (fixed header and remaining length) and counts the
PUBLISHes, per topic too, so it costs little CPU beside the client under
test. At QoS 1 it acknowledges every PUBLISH, the acks of one read in one
write.
"""

import socket
import struct
import threading
import time


def _str(b):
    return struct.pack("!H", len(b)) + b


def _packet(first, body):
    n = len(body)
    hdr = bytearray([first])
    while True:
        d = n & 0x7F
        n >>= 7
        hdr.append(d | 0x80 if n else d)
        if not n:
            return bytes(hdr) + body


class Counter:
    def __init__(self, host, port, topic_filter, qos=0, client_id=None):
        self.host = host
        self.port = port
        if isinstance(topic_filter, (str, bytes)):
            topic_filter = [topic_filter]
        self.filters = [f.encode() if isinstance(f, str) else f for f in topic_filter]
        self.qos = qos
        self.client_id = (client_id or "bench-counter-%d" % id(self)).encode()
        self.count = 0
        self.per_topic = {}
        self.error = None
        self._sock = None
        self._thread = None
        self._cond = threading.Condition()
        self._stop = False

    def start(self, timeout=5.0):
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        s.sendall(_packet(0x10, _str(b"MQTT") + b"\x04\x02\x00\x00" + _str(self.client_id)))
        ack = self._recv_exact(s, 4)
        if ack[0] != 0x20 or ack[3] != 0:
            raise RuntimeError("counter: CONNACK refused %r" % ack)
        body = b"".join(_str(f) + bytes([self.qos]) for f in self.filters)
        s.sendall(_packet(0x82, b"\x00\x01" + body))
        ack = self._recv_exact(s, 4 + len(self.filters))
        if ack[0] != 0x90 or 0x80 in ack[4:]:
            raise RuntimeError("counter: SUBACK refused %r" % ack)
        s.settimeout(0.2)
        self._sock = s
        self._thread = threading.Thread(target=self._run, name="bench-counter", daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _recv_exact(s, n):
        b = b""
        while len(b) < n:
            d = s.recv(n - len(b))
            if not d:
                raise RuntimeError("counter: connection closed")
            b += d
        return b

    def _run(self):
        buf = bytearray()
        s = self._sock
        try:
            while not self._stop:
                try:
                    d = s.recv(1 << 20)
                except socket.timeout:
                    continue
                if not d:
                    self.error = "broker closed the counter's connection"
                    return
                buf += d
                i = 0
                n = len(buf)
                acks = []
                got = 0
                topics = self.per_topic
                while True:
                    if i + 2 > n:
                        break
                    first = buf[i]
                    j = i + 1
                    rl = 0
                    shift = 0
                    while j < n:
                        b = buf[j]
                        j += 1
                        rl |= (b & 0x7F) << shift
                        shift += 7
                        if not b & 0x80:
                            break
                    else:
                        break
                    if j + rl > n:
                        break
                    if first >> 4 == 3:
                        got += 1
                        tl = buf[j] << 8 | buf[j + 1]
                        t = bytes(buf[j + 2:j + 2 + tl])
                        topics[t] = topics.get(t, 0) + 1
                        if first & 6:
                            pid = buf[j + 2 + tl:j + 4 + tl]
                            acks.append(b"\x40\x02" + bytes(pid))
                    i = j + rl
                del buf[:i]
                if acks:
                    s.sendall(b"".join(acks))
                if got:
                    with self._cond:
                        self.count += got
                        self._cond.notify_all()
        except OSError as e:
            if not self._stop:
                self.error = "counter: %s" % e

    def wait_for(self, target, timeout=10.0, quiet_s=0.3):
        """Wait until count >= target, or no new message for quiet_s (or
        timeout); returns the count."""
        deadline = time.monotonic() + timeout
        with self._cond:
            last = self.count
            last_t = time.monotonic()
            while self.count < target:
                now = time.monotonic()
                if now >= deadline or now - last_t >= quiet_s:
                    break
                self._cond.wait(min(quiet_s, deadline - now))
                if self.count != last:
                    last = self.count
                    last_t = time.monotonic()
            return self.count

    def stop(self):
        self._stop = True
        if self._sock is not None:
            try:
                self._sock.sendall(b"\xe0\x00")
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(2.0)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

# The physical floor: no library. CONNECT and PUBLISH are encoded once, before
# the run; each message is one write of the pre-encoded packet on a socket with
# TCP_NODELAY. QoS 1 is stop-and-wait: one PUBLISH, then read its 4-byte
# PUBACK (the id can repeat: the previous one is acknowledged).
#
# The adapter interface every lib_*.py offers to bench_mp.py:
#   load()                     import the library (timed apart from connect)
#   Client(host, port, cid, opts)
#   connect(), close()
#   topic(b) -> the topic object the library wants (bytes, or str)
#   prepare(t0, t1, payload)   called once before the runs
#   pub0(t, p), pub1(t, p)     one QoS 0 / QoS 1 publish (pub1 may return
#                              before the ack when the library pipelines)
#   drain0()                   every QoS 0 byte is handed to the socket
#   drain1()                   every QoS 1 message is acknowledged
#   sync()                     a round trip through the broker (PINGREQ, or
#                              a QoS 1 publish): every earlier packet was
#                              processed; ends each QoS 0 run
#   PIPELINED                  pub1 returns before the ack
import socket

PIPELINED = False


def load():
    pass


def _packet(first, body):
    n = len(body)
    hdr = bytearray([first])
    while True:
        d = n & 0x7F
        n >>= 7
        hdr.append(d | 0x80 if n else d)
        if not n:
            break
    return bytes(hdr) + body


def _str(b):
    return bytes([len(b) >> 8, len(b) & 0xFF]) + b


class Client:
    def __init__(self, host, port, cid, opts):
        self.addr = socket.getaddrinfo(host, port)[0][-1]
        self.cid = cid.encode()
        self.ack = bytearray(4)
        self.p0 = self.p1 = None

    def connect(self):
        s = socket.socket()
        s.setsockopt(6, 1, 1)  # IPPROTO_TCP, TCP_NODELAY
        s.connect(self.addr)
        self.s = s
        s.write(_packet(0x10, _str(b"MQTT") + b"\x04\x02\x00\x00" + _str(self.cid)))
        self._read4()
        if self.ack[0] != 0x20 or self.ack[3] != 0:
            raise OSError("CONNACK refused: %r" % bytes(self.ack))

    def topic(self, b):
        return b

    def prepare(self, t0, t1, p):
        self.p0 = _packet(0x30, _str(t0) + p)
        self.p1 = _packet(0x32, _str(t1) + b"\x00\x01" + p)

    def _read4(self):
        n = self.s.readinto(self.ack)
        if n != 4:  # rare: a short read
            while n < 4:
                b = self.s.read(4 - n)
                if not b:
                    raise OSError("connection closed")
                self.ack[n:n + len(b)] = b
                n += len(b)

    def pub0(self, t, p):
        self.s.write(self.p0)

    def pub1(self, t, p):
        self.s.write(self.p1)
        self._read4()
        if self.ack[0] != 0x40:
            raise OSError("expected PUBACK, got %r" % bytes(self.ack))

    def drain0(self):
        pass

    def drain1(self):
        pass

    def sync(self):
        self.s.write(b"\xc0\x00")
        n = 0
        while n < 2:
            n += self.s.readinto(self.ack, 2 - n)
        if self.ack[0] != 0xD0:
            raise OSError("expected PINGRESP, got %r" % bytes(self.ack))

    def close(self):
        self.s.write(b"\xe0\x00")
        self.s.close()

# A socket module for MicroPython's WebAssembly port, which has none: every
# socket is connected at once to an in-memory broker that answers what an
# MQTT 3.1.1 broker answers a publisher (CONNACK, PUBACK, PUBREC then
# PUBCOMP, SUBACK, UNSUBACK, PINGRESP). It lets the clients import, connect
# and publish on the 32-bit port: the footprint bench reads their heap there,
# and the portable client tests (which mock the network anyway) can import.
# Nothing here is a network. select.py polls these sockets.
AF_INET = 2
SOCK_STREAM = 1
IPPROTO_TCP = 6
SOL_SOCKET = 1
SO_REUSEADDR = 4
_EISCONN = 106


def getaddrinfo(host, port, af=0, type=0, proto=0, flags=0):
    return [(AF_INET, SOCK_STREAM, 0, "", (host, port))]


class socket:
    def __init__(self, af=AF_INET, type=SOCK_STREAM, proto=0):
        self.rx = bytearray()  # broker -> client, not yet read
        self.tx = bytearray()  # client -> broker, not yet a whole packet
        self.up = False

    def setsockopt(self, *a):
        pass

    def setblocking(self, flag):
        pass

    def settimeout(self, t):
        pass

    def connect(self, addr):
        if self.up:
            raise OSError(_EISCONN)
        self.up = True

    def close(self):
        self.up = False

    def write(self, buf, a=-1, b=-1):
        # As MicroPython's streams: write(buf), write(buf, n), write(buf, off, n).
        off, n = (0, a) if b < 0 else (a, b)
        b = memoryview(buf)[off:] if n < 0 else memoryview(buf)[off:off + n]
        self.tx += b
        self._answer()
        return len(b)

    send = write

    def readinto(self, buf, n=-1):
        n = min(len(buf) if n < 0 else n, len(self.rx))
        if not n:
            return None  # nothing yet, as a non-blocking socket says
        buf[:n] = self.rx[:n]
        self.rx[:n] = b""
        return n

    def read(self, n):
        b = bytes(self.rx[:n])
        self.rx[:n] = b""
        return b

    recv = read

    def _answer(self):
        t = self.tx
        while len(t) >= 2:
            rl, mul, i = 0, 1, 1
            while True:
                if i >= len(t):
                    return
                rl += (t[i] & 127) * mul
                mul <<= 7
                i += 1
                if not t[i - 1] & 128:
                    break
            if len(t) < i + rl:
                return
            kind, flags = t[0] >> 4, t[0] & 15
            body = t[i:i + rl]
            if kind == 1:  # CONNECT
                self.rx += b"\x20\x02\x00\x00"
            elif kind == 3 and flags & 6:  # PUBLISH QoS 1 or 2
                tl = body[0] << 8 | body[1]
                pid = body[2 + tl:4 + tl]
                self.rx += (b"\x40\x02" if flags & 6 == 2 else b"\x50\x02") + pid
            elif kind == 6:  # PUBREL
                self.rx += b"\x70\x02" + body[:2]
            elif kind == 8:  # SUBSCRIBE: grant each filter's QoS
                j, codes = 2, bytearray()
                while j < rl:
                    j += 2 + (body[j] << 8 | body[j + 1])
                    codes.append(body[j])
                    j += 1
                self.rx += bytes((0x90, 2 + len(codes))) + body[:2] + codes
            elif kind == 10:  # UNSUBSCRIBE
                self.rx += b"\xb0\x02" + body[:2]
            elif kind == 12:  # PINGREQ
                self.rx += b"\xd0\x00"
            t[:i + rl] = b""

# `socket` for the emulated Pico (tools/board/rp2040.mjs), frozen with its
# firmware: the Pico has no network stack and the Pico W's Wi-Fi chip is not
# emulated, so each TCP connection is a channel of frames over UART0, which
# the runner turns into a real connection on the host. Enough of
# MicroPython's socket for holdfast and the tests: non-blocking connect,
# readinto/write, and select.poll through the stream protocol (io.IOBase).
# Frames: kind, channel, length (big-endian, 2 bytes), data; the kinds are
# listed in the runner.
import io
import machine
import time

AF_INET = 2
SOCK_STREAM = 1
IPPROTO_TCP = 6
SOL_SOCKET = 1
SO_REUSEADDR = 4
TCP_NODELAY = 1

_POLLIN = 1
_POLLOUT = 4
_POLLERR = 8
_POLLHUP = 16

_SYNC = b"r\x00\x00\x06HFSYNC"  # the runner's answer to R: frames start after it
_uart = None
_open = {}  # channel: socket
_rx = bytearray()  # bytes from UART0 not yet a whole frame
_chunk = bytearray(512)
_next = [0]  # the last channel given out: a closed one is not reused at once


def _link():
    global _uart
    if _uart is None:
        u = machine.UART(0, 115200, rxbuf=4096, txbuf=1024, timeout=1000, timeout_char=1000)
        # A new interpreter (a soft reset): what an earlier one left open
        # goes, and bytes meant for it may still come, up to the runner's mark.
        u.write(b"R\x00\x00\x00")
        seen = b""
        t0 = time.ticks_ms()
        while not seen.endswith(_SYNC):
            if time.ticks_diff(time.ticks_ms(), t0) > 5000:
                raise OSError(110)  # ETIMEDOUT: no runner on UART0
            b = u.read(1)
            if b:
                seen = (seen + b)[-len(_SYNC):]
        _uart = u
    return _uart


def _send(kind, ch, data=b"", start=0, n=0):
    u = _link()
    u.write(bytes((kind, ch, n >> 8, n & 255)))
    if n:
        u.write(memoryview(data)[start:start + n])


def _pump():
    """Reads what UART0 has and hands each whole frame to its socket."""
    global _rx
    u = _link()
    while True:
        # No more than it has: readinto waits out the timeout for the rest.
        n = min(u.any(), len(_chunk))
        if not n:
            break
        n = u.readinto(_chunk, n)
        _rx.extend(memoryview(_chunk)[:n])
    while len(_rx) >= 4:
        n = (_rx[2] << 8) | _rx[3]
        if len(_rx) < 4 + n:
            break
        s = _open.get(_rx[1])
        if s is not None:
            k = _rx[0]
            if k == 100:  # d
                s.buf.extend(memoryview(_rx)[4:4 + n])
            elif k == 99:  # c
                s.up = 1
            elif k == 101:  # e: the connect failed, with this errno
                s.err = int(bytes(_rx[4:4 + n]))
                _open.pop(s.ch)
            elif k == 120:  # x: the peer closed
                s.eof = 1
                _open.pop(s.ch)
        _rx = _rx[4 + n:]  # a board's bytearray has no slice deletion


def getaddrinfo(host, port, af=0, type=0, proto=0, flags=0):
    # The host's bridge resolves the name when it connects.
    return [(AF_INET, SOCK_STREAM, IPPROTO_TCP, "", (host, port))]


class socket(io.IOBase):
    def __init__(self, af=AF_INET, type=SOCK_STREAM, proto=0):
        # Frames the host sent before it saw a close may still come: a new
        # socket takes the next free channel, not the one just closed.
        for _ in range(255):
            _next[0] = _next[0] % 255 + 1
            if _next[0] not in _open:
                break
        else:
            raise OSError(24)  # EMFILE
        self.ch = _next[0]
        self.buf = bytearray()
        self.up = self.eof = self.err = self.dialing = 0
        self.closed = False
        self.timeout = None
        _open[self.ch] = self

    def setsockopt(self, *args):
        pass

    def settimeout(self, t):
        self.timeout = t

    def setblocking(self, flag):
        self.timeout = None if flag else 0

    def _wait(self, ready):
        """Waits, as the timeout says, until ready() is true; False if not."""
        t0 = time.ticks_ms()
        while True:
            _pump()
            if ready():
                return True
            if self.timeout is not None and \
                    time.ticks_diff(time.ticks_ms(), t0) >= self.timeout * 1000:
                return False
            time.sleep_ms(1)

    def connect(self, addr):
        if self.closed:
            raise OSError(9)  # EBADF
        if not self.dialing:
            self.dialing = 1
            a = ("%s:%d" % (addr[0], addr[1])).encode()
            _send(67, self.ch, a, 0, len(a))  # C
            if self.timeout == 0:
                raise OSError(115)  # EINPROGRESS
        if not self._wait(lambda: self.up or self.err):
            raise OSError(114 if self.timeout == 0 else 110)  # EALREADY, ETIMEDOUT
        if self.err:
            raise OSError(self.err)

    def readinto(self, buf, nbytes=-1):
        if not self._wait(lambda: self.buf or self.eof or self.err):
            if self.timeout == 0:
                return None
            raise OSError(110)
        if self.err:
            raise OSError(self.err)
        n = min(len(self.buf), len(buf) if nbytes < 0 else nbytes)
        buf[:n] = self.buf[:n]
        self.buf = self.buf[n:]
        return n

    def recv(self, n):
        b = bytearray(n)
        got = self.readinto(b)
        if got is None:
            raise OSError(11)  # EAGAIN
        return bytes(b[:got])

    read = recv

    def write(self, data, start=0, n=-1):
        if self.closed or self.eof or self.err or not self.up:
            raise OSError(self.err or (128 if not self.up else 104))  # ENOTCONN, ECONNRESET
        if n < 0:
            n = len(data) - start
        at, end = start, start + n
        while at < end:
            step = min(end - at, 1024)
            _send(68, self.ch, data, at, step)  # D
            at += step
        return n

    send = sendall = write

    def close(self):
        if not self.closed:
            self.closed = True
            if _open.get(self.ch) is self:
                del _open[self.ch]
                _send(88, self.ch)  # X

    def ioctl(self, req, arg):
        if req == 3:  # MP_STREAM_POLL
            _pump()
            r = 0
            if arg & _POLLIN and (self.buf or self.eof):
                r |= _POLLIN
            if arg & _POLLOUT and self.up and not self.eof:
                r |= _POLLOUT
            if self.err:
                r |= _POLLERR
            if self.eof:
                r |= _POLLHUP
            return r
        if req == 4:  # MP_STREAM_CLOSE
            self.close()
        return 0

# MQTT over WebSockets (RFC 6455; MQTT 3.1.1 and MQTT 5, section 6): the
# link of a ws:// or wss:// client once wsopen.py's handshake is done. It
# stands where the socket stands (shell.py's flush and read_into, the
# shells' poll and asyncio), so the engine and both shells are the same over
# it. Loaded with the first ws:// or wss:// connection; a client of a plain
# host or an mqtt:// URL never imports it.
#
# Sending: each chunk the session's flush offers goes out as one binary frame,
# masked in place in the session's send buffer (section 5.3: a fresh 4-byte
# key per frame); a write that blocks is offered the rest of the same bytes
# again (front.flush), already masked. Receiving: the first frame payload of
# a read goes straight into the session's receive buffer, later ones of the
# same read are copied in behind it from a small buffer (a read at an offset
# would need a memoryview slice: heap), so a packet a broker wrote in
# several frames reaches the engine whole; headers and control frames go
# through this object's small buffers. So nothing per packet allocates: the
# buffers are made once per link.
import io
from random import getrandbits
from .sockets import MP, _blocked

# Why a frame is refused (errors/websocket.py violation() has the words).
_V_RESERVED = const(0)
_V_MASKED = const(1)
_V_LONG = const(2)
_V_OPCODE = const(3)
_V_TEXT = const(4)
_V_CONTROL_FRAGMENTED = const(5)
_V_CONTROL_LONG = const(6)
_V_CONTINUATION = const(7)
_V_INTERLEAVED = const(8)


class WebSocket(io.IOBase if MP else object):  # type: ignore[misc]
    """The WebSocket link over a connected (TLS) socket link; raw: the TCP
    socket under it, whose descriptor poll waits on; ctl: the handshake's
    131-byte buffer, from here on the control frames' (a pong is built in
    place around the ping's data)."""

    def __init__(self, link, raw, tls, ctl):
        self.s = link
        self.raw = raw
        self.tls = tls
        self.ctl = ctl
        self.hdr = bytearray(14)  # the data frame being sent: its header and key
        self.rh = bytearray(10)  # the frame being read: its header (a server's is never masked)
        self.one = bytearray(1)  # header bytes after the first two, control data: a byte at a time
        # A frame's payload after other bytes in the same read: brokers write
        # a packet in pieces (aedes: a frame for its first byte, its length, the rest).
        self.stage = bytearray(64)
        self.held = 0  # bytes of a packet's start kept in stage for the next read (_hold)
        # The MQTT stream as handed on (_scan): bytes left of the packet's
        # body, which byte of its fixed header comes next (0: its first),
        # the remaining length so far, where in this read the packet began (-1: before).
        self.pk = self.vh = self.vl = 0
        self.ps = -1
        self.hout = self.hat = 0  # header bytes left to write, and written
        self.fleft = 0  # payload bytes of the data frame being sent still to write
        self.pong = self.pat = 0  # the pong (or close) frame in ctl: its length, bytes written
        self.left = 0  # payload bytes of the data frame being read still to read
        self.hn = 0  # header bytes read
        self.op = -1  # a control frame's opcode while its data is read
        self.cn = self.cat = 0  # its data length, bytes read
        self.keep = True  # its data is kept in ctl
        self.frag = False  # inside a fragmented message: continuation frames follow
        self.more = False  # the last read took all it asked for: TLS may hold more
        self.p = None  # MicroPython's poll of raw, for the stream protocol's POLL

    # -- the socket calls shell.py makes ------------------------------------

    def readinto(self, buf):
        """The payload bytes of the frames that are there, into buf (as many
        as fit): their count; None if nothing yet, 0 at the end of the
        stream. Control frames are handled on the way (ping: pong; close:
        LinkDown)."""
        rh = self.rh
        got = self.held
        self.ps = -1
        if got:  # the start of a packet held back last time comes first
            if len(buf) < got:
                return None
            st = self.stage
            for j in range(got):
                buf[j] = st[j]
            self.held = 0
            self.ps = 0
        while True:
            if self.left:
                room = len(buf) - got
                if not room:
                    return got
                n = self.left if self.left < room else room
                if not got:  # straight into the session's buffer
                    k = self._r(buf, n)
                    if not k:
                        return k
                else:  # after bytes already there: a read at an offset needs a copy (a slice is heap)
                    st = self.stage
                    k = self._r(st, n if n < len(st) else len(st))
                    if not k:
                        return self._hold(buf, got)
                    for j in range(k):
                        buf[got + j] = st[j]
                self._scan(buf, got, got + k)
                got += k
                self.left -= k
                continue
            if self.op >= 0:
                if self.cat < self.cn:
                    k = self._r(self.one, 1)
                    if not k:
                        return self._hold(buf, got) if got else k
                    if self.keep:
                        self.ctl[6 + self.cat] = self.one[0]
                    self.cat += 1
                    continue
                self._control()
                continue
            hn = self.hn
            k = self._r(self.one if hn else rh, 1 if hn else 2)
            if not k:
                # The end of the stream shows on the next call.
                return self._hold(buf, got) if got else k
            if hn:
                rh[hn] = self.one[0]
            hn += k
            self.hn = hn
            if hn < 2:
                continue
            n = rh[1] & 0x7F
            if hn < (2 if n < 126 else 4 if n == 126 else 10):
                continue
            self.hn = 0
            self._frame(n)

    def _scan(self, buf, i, end):
        # Where the MQTT packets in buf[i:end] begin and end (their fixed
        # headers), so that _hold() knows what is a packet's start.
        while i < end:
            if self.pk:
                t = end - i if end - i < self.pk else self.pk
                self.pk -= t
                i += t
                if not self.pk:
                    self.ps = -1
                continue
            c = buf[i]
            i += 1
            if not self.vh:  # the packet's first byte
                self.vh = 1
                self.vl = 0
                self.ps = i - 1
            else:  # its remaining length, 7 bits a byte
                self.vl |= (c & 0x7F) << (7 * self.vh - 7)
                if c & 0x80 and self.vh < 4:
                    self.vh += 1
                else:
                    self.vh = 0
                    self.pk = self.vl
                    if not self.pk:
                        self.ps = -1

    def _hold(self, buf, got):
        # The count to hand the session, once the socket has no more: the
        # start of a packet begun in this read and not complete is kept
        # back (up to 64 bytes) until its rest is there. A broker that
        # writes a packet in pieces (aedes: a frame for its first byte, one
        # for its length, one for the rest) would otherwise leave part of
        # a packet in the session's buffer, and the next read into it takes
        # a memoryview of the heap (codec.Reader.tail).
        ps = self.ps
        if ps < 0 or got - ps > len(self.stage):
            return got
        st = self.stage
        for j in range(got - ps):
            st[j] = buf[ps + j]
        self.held = got - ps
        return ps or None

    def write(self, buf, off=0, n=-1):
        """MicroPython's stream write: tx[off:off + n] as one binary frame (or
        the rest of the frame begun with them); the payload bytes written."""
        if n < 0:
            n = len(buf) - off
        if not self.fleft:
            self._pong()
            if self.pong:
                return 0
            h = self.hdr
            h[0] = 0x82  # FIN, binary
            if n < 126:
                h[1] = 0x80 | n
                i = 2
            elif n < 65536:
                h[1] = 0xFE
                h[2] = n >> 8
                h[3] = n & 0xFF
                i = 4
            else:  # a send buffer of 64 KB or more (size=)
                h[1] = 0xFF
                for j in range(2, 10):
                    h[j] = n >> (72 - 8 * j) & 0xFF
                i = 10
            self.hout = i + 4
            self.hat = 0
            self.fleft = n
            _mask(h, i, buf, off, n)
        while self.hout:
            k = self._w(self.hdr, self.hat, self.hout)
            if not k:
                return 0
            self.hat += k
            self.hout -= k
        k = self._w(buf, off, self.fleft if self.fleft < n else n)
        self.fleft -= k
        if k and not self.fleft:
            self._pong()
        return k

    if not MP:  # CPython's socket calls, as shell.py makes them there
        def recv_into(self, buf):
            return self.readinto(buf)

        def send(self, mv):
            return self.write(mv, 0, len(mv))

        def fileno(self):
            return self.s.fileno()

        def pending(self):  # TLS bytes decrypted already (aclient's reader asks)
            return self.s.pending() if self.tls else 0

    else:
        def ioctl(self, req, arg):
            # MicroPython's poll (and asyncio) through the stream protocol.
            # MP_STREAM_GET_FILENO (10): without TLS poll waits on the TCP
            # socket itself; with TLS it asks MP_STREAM_POLL (3) instead, as
            # the TLS layer may hold bytes that the descriptor does not show.
            if req == 10:
                return -1 if self.tls else self.raw.fileno()
            if req != 3:
                return -1
            p = self.p
            if p is None:
                import select
                p = self.p = select.poll()
            p.register(self.raw, arg)
            r = 0
            for _, ev in p.ipoll(0):  # one reused tuple: nothing allocated
                r = ev
            if self.more or self.hn or self.op >= 0:
                r |= arg & 1  # POLLIN
            return r

    def close(self):
        # A close frame (1000, normal) before the TCP close, if the link
        # takes it at once and no frame is half written: best effort.
        if not self.fleft and not self.hout and not self.pong:
            c = self.ctl
            c[0] = 0x88
            c[1] = 0x82
            c[6] = 0x03
            c[7] = 0xE8
            _mask(c, 2, c, 6, 2)
            try:
                self._w(c, 0, 8)
            except OSError:
                pass
        self.s.close()

    # -- frames ----------------------------------------------------------------

    def _frame(self, n):
        # The header just read, n its 7-bit length: a data frame's payload
        # follows (self.left), or a control frame's data (self.op).
        rh = self.rh
        b = rh[0]
        op = b & 0x0F
        if b & 0x70:
            self._violation(_V_RESERVED, b & 0x70)
        if rh[1] & 0x80:
            self._violation(_V_MASKED, op)
        if n == 126:
            n = rh[2] << 8 | rh[3]
        elif n == 127:
            # Under 1 GiB: the top bit set breaks RFC 6455, and more than
            # any MQTT packet (256 MB) needs, or a 32-bit port's small int holds.
            if rh[2] or rh[3] or rh[4] or rh[5] or rh[6] & 0xC0:
                self._violation(_V_LONG, 0)
            n = rh[6] << 24 | rh[7] << 16 | rh[8] << 8 | rh[9]
        if op >= 8:
            if op > 10:
                self._violation(_V_OPCODE, op)
            if not b & 0x80:
                self._violation(_V_CONTROL_FRAGMENTED, op)
            if n > 125:
                self._violation(_V_CONTROL_LONG, n)
            self.op = op
            self.cn = n
            self.cat = 0
            # Its data goes into ctl unless a pong waits there to be written
            # (that one goes first; this ping then gets none).
            self.keep = not self.pong
        elif op == 2 or op == 0:
            if (op == 0) != self.frag:
                self._violation(_V_CONTINUATION if op == 0 else _V_INTERLEAVED, op)
            self.frag = not b & 0x80
            self.left = n
        else:
            self._violation(_V_TEXT if op == 1 else _V_OPCODE, op)

    def _control(self):
        # A control frame's data is in ctl[6:6 + cn].
        op = self.op
        self.op = -1
        n = self.cn if self.keep else 0
        c = self.ctl
        if op == 9 and self.keep:  # ping: the pong carries its data
            c[0] = 0x8A
            c[1] = 0x80 | n
            _mask(c, 2, c, 6, n)
            self.pong = 6 + n
            self._pong()
        elif op == 8:  # close: answered (its code echoed) if the link takes it, and the link is lost
            from .errors.websocket import closed
            e = closed(c, n)
            if not self.fleft and not self.hout and not self.pong:
                c[0] = 0x88
                c[1] = 0x82
                _mask(c, 2, c, 6, 2 if n >= 2 else 0)
                try:
                    self._w(c, 0, 8 if n >= 2 else 6)
                except OSError:
                    pass
            raise e

    def _pong(self):
        # The pending pong, once no data frame is half written.
        while self.pong and not self.fleft and not self.hout:
            k = self._w(self.ctl, self.pat, self.pong - self.pat)
            if not k:
                return
            self.pat += k
            if self.pat == self.pong:
                self.pong = self.pat = 0

    def _violation(self, why, arg):
        from .errors.websocket import violation
        raise violation(why, arg)

    # -- the link's calls, both runtimes: no data yet is None (read), 0 (write)

    def _r(self, buf, n):
        try:
            k = self.s.readinto(buf, n) if MP else self.s.recv_into(buf, n)
        except OSError as e:
            if _blocked(e):
                return None
            raise
        self.more = k == n
        return k

    def _w(self, buf, off, n):
        try:
            return (self.s.write(buf, off, n) if MP else self.s.send(memoryview(buf)[off:off + n])) or 0
        except OSError as e:
            if _blocked(e):
                return 0
            raise


def _mask(h, i, buf, off, n):
    # A fresh key into h[i:i + 4] (two 16-bit draws: small ints on a 32-bit
    # port too), and buf[off:off + n] masked with it in place, four bytes a turn.
    m = getrandbits(16)
    a = h[i] = m >> 8
    b = h[i + 1] = m & 0xFF
    m = getrandbits(16)
    c = h[i + 2] = m >> 8
    d = h[i + 3] = m & 0xFF
    end = off + n
    k = off
    while k + 4 <= end:
        buf[k] ^= a
        buf[k + 1] ^= b
        buf[k + 2] ^= c
        buf[k + 3] ^= d
        k += 4
    if k < end:
        buf[k] ^= a
        if k + 1 < end:
            buf[k + 1] ^= b
            if k + 2 < end:
                buf[k + 2] ^= c

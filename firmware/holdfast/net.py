# Non-blocking TCP (and TLS) socket helpers that behave the same on
# MicroPython and CPython: the two differ in readinto/recv_into, in how "no
# data yet" is reported, and in write with an offset.
import socket
import select

_MP = hasattr(socket.socket, "readinto")
_IPPROTO_TCP = 6
_TCP_NODELAY = 1
_WOULD_BLOCK = (11, 35, 115)  # EAGAIN (Linux, lwIP), EAGAIN (BSD), EINPROGRESS


def _blocked(e):
    return (e.args and e.args[0] in _WOULD_BLOCK) or e.__class__.__name__.startswith("SSLWant")


def open_socket(host, port, timeout_ms, tls=None):
    """Connects (resolving host anew each time), wraps in TLS when tls is an
    SSLContext, and returns the socket in non-blocking mode."""
    ai = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
    s = socket.socket(ai[0], socket.SOCK_STREAM, ai[2])
    try:
        # Each packet goes out in one write; Nagle would hold it back ~40 ms.
        s.setsockopt(_IPPROTO_TCP, _TCP_NODELAY, 1)
    except (OSError, AttributeError):
        pass
    try:
        s.settimeout(timeout_ms / 1000)
        s.connect(ai[-1])
        if tls is not None:
            # The handshake runs here, blocking, bounded by the timeout above;
            # a TLS failure comes out as tls.TLSError with the cause in words.
            from .tls import wrap
            s = wrap(tls, s, host)
        s.setblocking(False)
    except BaseException:
        s.close()
        raise
    return s


def read_into(s, buf):
    """Reads what is available into buf (never empty): the count, 0 if
    nothing yet, -1 at the end of the stream (the peer closed it)."""
    try:
        n = s.readinto(buf) if _MP else s.recv_into(buf)
    except OSError as e:
        if _blocked(e):
            return 0
        raise
    if n is None:
        return 0
    return n or -1


def flush(sock, s):
    """Writes what the socket takes of session s's queued bytes; returns the
    count. A TLS write that blocked is offered exactly the same bytes again:
    mbedtls keeps the encrypted record and, once it is out, reports the
    length of the retry as written."""
    end = s.t0 + s.offered if s.offered else s.t1
    n = write(sock, s.tx, s.t0, end)
    s.offered = end - s.t0 - n
    return n


def tls_context(ssl, params):
    """What open_socket wraps with: None without TLS; for ssl=True a verifying
    context built from ssl_params; an SSLContext as given. See tls.py."""
    if not ssl:
        if params:
            from .errors import TLSError
            raise TLSError("config", "ssl_params given but TLS is off: pass ssl=True")
        return None
    from .tls import context
    return context(ssl, params or {})


def write(s, buf, start, end):
    """Writes what the socket takes of buf[start:end]; returns the count."""
    try:
        n = s.write(buf, start, end - start) if _MP else s.send(memoryview(buf)[start:end])
    except OSError as e:
        if _blocked(e):
            return 0
        raise
    return n or 0


class Poller:
    """select.poll on one socket, without allocating per wait on MicroPython."""

    def __init__(self, s):
        self.p = select.poll()
        self.s = s
        self.mask = select.POLLIN
        self.p.register(s, self.mask)

    def wait(self, ms, out=False):
        mask = select.POLLIN | (select.POLLOUT if out else 0)
        if mask != self.mask:
            self.p.modify(self.s, mask)
            self.mask = mask
        if _MP:
            for _ in self.p.ipoll(ms):
                return True
            return False
        return bool(self.p.poll(ms))

# The socket calls both shells make: non-blocking TCP (and TLS) calls that
# behave the same on MicroPython and CPython: the two differ in
# readinto/recv_into, in how "no data yet" is reported, and in write with an
# offset. Below the shells and ws.py (a WebSocket link stands where the
# socket stands), so each imports them without importing the other.
#
# The errnos below are literals, compared one by one where they are tested:
# a tuple of them, a module-level name or a constant, is one more object on a
# board's heap. Linux and lwIP share theirs, BSD's differ.
import socket

MP = hasattr(socket.socket, "readinto")  # MicroPython: the socket calls differ
_IPPROTO_TCP = const(6)
_TCP_NODELAY = const(1)
_ETIMEDOUT = const(110)
_ECONNREFUSED = const(111)

# Error reasons (reasons.py has the words; errors/link.py makes the Unreachable).
_E_NO_TCP = const(56)
_E_NO_HOST = const(66)
_E_REFUSED = const(67)
_E_NO_ROUTE = const(68)


def _blocked(e):
    # EAGAIN (Linux, lwIP), EAGAIN (BSD), EINPROGRESS; 2 and 3: CPython's
    # ssl.SSLWantReadError and SSLWantWriteError (SSL_ERROR_WANT_READ and
    # _WRITE; no socket call reports ENOENT or ESRCH, the errnos 2 and 3).
    # MicroPython's TLS reports EAGAIN.
    n = e.args[0] if e.args else 0
    return n == 11 or n == 35 or n == 115 or n == 2 or n == 3


def dial(host, port):
    """Starts a TCP connection without waiting: returns (socket, address,
    poll), for connected(); its holder closes the socket (the first) if it
    gives up before connected() returned it. Resolving the name
    (getaddrinfo) happens here and does block: no port offers it otherwise."""
    try:
        ai = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)[0]
    except OSError as e:
        from .errors.link import unreachable
        raise unreachable(e, _E_NO_HOST, host, port, e)
    sock = socket.socket(ai[0], socket.SOCK_STREAM, ai[2])
    try:
        # Each packet goes out in one write; Nagle would hold it back ~40 ms.
        sock.setsockopt(_IPPROTO_TCP, _TCP_NODELAY, 1)
    except (OSError, AttributeError):
        pass
    import select  # here, not a module global: one name less on a board's heap
    poll = select.poll()
    poll.register(sock, select.POLLOUT)
    sock.setblocking(False)
    d = (sock, ai[-1], poll)
    connected(d, host, port, -1)
    return d


def connected(pending, host, port, timeout_ms):
    """The socket of dial()'s pending connect (non-blocking) once connected, else None,
    after waiting up to timeout_ms for it: connect() waits (and a wait that
    runs out raises Unreachable), a reconnect steps with 0, dial() makes the
    first connect call with -1. A failed connect raises Unreachable; either
    way the socket is closed. TLS is the caller's (Shell._dial wraps every
    new link)."""
    sock = pending[0]
    if timeout_ms < 0 or pending[2].poll(timeout_ms):
        # Connecting again tells how the first attempt went, the same way on
        # every port (MicroPython has no getsockopt(SO_ERROR)): EISCONN once
        # it is up, the error if it failed, EINPROGRESS/EALREADY meanwhile.
        try:
            sock.connect(pending[1])
            return sock
        except OSError as e:
            n = e.args[0] if e.args else None
            if n == 106 or n == 56:  # EISCONN (Linux and lwIP, BSD)
                return sock
            if not (_blocked(e) or n == 114 or n == 37):  # EALREADY: a connect under way
                sock.close()
                from .errors.link import unreachable
                if n == _ECONNREFUSED:
                    raise unreachable(e, _E_REFUSED, host, port)
                raise unreachable(e, _E_NO_ROUTE, host, port, e)
    if timeout_ms > 0:
        sock.close()
        from .errors.link import unreachable
        raise unreachable(_ETIMEDOUT, _E_NO_TCP, host, port, timeout_ms)
    return None


def read_into(sock, session):
    """Reads what is available into the session's receive buffer: the count,
    0 if nothing yet or the buffer has no room (it holds packets the engine
    cannot take until tx drains: acknowledgements need room). At the end of
    the stream (the peer closed it) the session's eof() raises."""
    rx = session.rx
    buf = rx.tail()
    if not len(buf):
        return 0
    try:
        n = sock.readinto(buf) if MP else sock.recv_into(buf)
    except OSError as e:
        if _blocked(e):
            return 0
        raise
    if n is None:
        return 0
    if not n:
        session.eof()
    rx.end += n
    return n


def flush(sock, session):
    """Writes what the socket takes of the session's queued bytes; returns the
    count. A TLS write that blocked is offered exactly the same bytes again:
    mbedtls keeps the encrypted record and, once it is out, reports the
    length of the retry as written."""
    start = session.tx_start
    end = start + session.offered if session.offered else session.tx_end
    try:
        tx = session.tx
        n = (sock.write(tx, start, end - start) if MP else sock.send(memoryview(tx)[start:end])) or 0
    except OSError as e:
        if not _blocked(e):
            raise
        n = 0
    session.offered = end - start - n
    return n


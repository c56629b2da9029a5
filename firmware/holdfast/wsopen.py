# The WebSocket opening handshake (RFC 6455 section 4) of a ws:// or wss://
# client. Imported for each handshake and unloaded after it, like tls.py
# (unload.py): a connected client keeps only ws.py's WebSocket. The words
# of every WebSocket failure are in errors/websocket.py, loaded with the
# first; README "MQTT over WebSockets" lists every failure.
from binascii import b2a_base64
from . import errors
from .sockets import MP
from .ws import WebSocket

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # section 1.3


def upgrade(link, raw, c):
    """The connected (TLS) link as a WebSocket link to client c's server
    (c.ws: path and extra headers), the handshake bounded by c.timeout_ms.
    Closes the link and raises WebSocketRefused (not a 101 with the right
    key and the mqtt subprotocol: the status line in words), MQTTTimeout or
    LinkDown (no answer, or the link closed)."""
    from os import urandom  # here: a port without it (WebAssembly) still has the words below
    path, headers = c.ws
    host = c.server
    if ":" in host:  # an IPv6 address
        host = "[" + host + "]"
    if c.port != (443 if c.tls else 80):
        host = "%s:%d" % (host, c.port)
    key = b2a_base64(urandom(16))[:-1]
    req = ("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n"
           % (path, host, key.decode()))
    if headers:
        for k in headers:
            req += "%s: %s\r\n" % (k, headers[k])
    buf = bytearray(131)  # a line of the answer here (the rest cut), then the control frames' (ws.py)
    t = link if hasattr(link, "settimeout") else raw  # MicroPython's TLS socket: its TCP socket's
    try:
        if MP:  # ws.py's masks come from random: seeded from os.urandom for each link
            import random
            random.seed(int.from_bytes(urandom(3), "big"))
        t.settimeout(c.timeout_ms / 1000)
        link.sendall(req.encode() + b"\r\n")
        status = None
        fields = {}
        while True:
            line = _line(link, buf, c.timeout_ms)
            if not line:
                break
            if status is None:
                status = line
                continue
            i = line.find(b":")
            if i > 0:
                fields[line[:i].strip().lower()] = line[i + 1:].strip()
        if status is None:
            status = b""
        import hashlib
        want = b2a_base64(hashlib.sha1(key + _GUID).digest())[:-1]
        parts = status.split()
        code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        s = status.decode()
        why = None
        if code != 101:
            where = fields.get(b"location")
            why = ("status", "the WebSocket handshake was answered %r%s, not 101 Switching Protocols"
                   % (s, " (Location: %s)" % where.decode() if where else ""))
        elif fields.get(b"upgrade", b"").lower() != b"websocket" or b"upgrade" not in fields.get(b"connection", b"").lower():
            why = ("upgrade", "%r without Upgrade: websocket and Connection: Upgrade" % s)
        elif fields.get(b"sec-websocket-accept") != want:
            got = fields.get(b"sec-websocket-accept")
            why = ("accept", "%r with Sec-WebSocket-Accept %r, not %r: the server did not"
                   " answer this handshake's key" % (s, got and got.decode(), want.decode()))
        elif fields.get(b"sec-websocket-protocol") != b"mqtt":
            got = fields.get(b"sec-websocket-protocol")
            why = ("subprotocol", "%r without the mqtt subprotocol (Sec-WebSocket-Protocol: %s):"
                   " is it an MQTT endpoint (path %s)?" % (s, got and got.decode(), path))
        if why:
            from .errors.websocket import refused  # the error classes load with a refusal
            raise refused(code, s, why[0], why[1])
        link.setblocking(False)
    except BaseException as e:
        link.close()
        if isinstance(e, OSError) and not isinstance(e, (errors.LinkDown, errors.MQTTTimeout)):
            n = e.args[0] if e.args else None
            if n == 110 or n is None or "timed out" in str(e):  # ETIMEDOUT; CPython's socket.timeout
                e = errors.MQTTTimeout("no answer to the WebSocket handshake within %d ms" % c.timeout_ms)
        raise e
    finally:
        from .unload import unload
        unload("wsopen")
    return WebSocket(link, raw, c.tls, buf)


def _line(link, buf, ms):
    # One line of the answer, a byte at a time (the frames behind it stay
    # in the socket), without its CRLF; past len(buf) cut.
    n = 0
    one = memoryview(buf)[130:]
    while True:
        k = link.readinto(one, 1) if MP else link.recv_into(one, 1)
        if not k:
            raise errors.LinkDown("the server closed the connection during the WebSocket handshake")
        b = one[0]
        if b == 10:
            return bytes(buf[:n - 1 if n and buf[n - 1] == 13 else n])
        if n < 129:
            buf[n] = b
            n += 1

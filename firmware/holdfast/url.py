# server= as a URL: mqtt://, mqtts://, ws://, wss:// (README "MQTT over
# WebSockets"). Loaded only for a server given as a URL, and unloaded again
# once it is read (unload.py): a client keeps what parse() returns, not this.


def parse(url, port, ssl, headers):
    """(host, port, ssl, ws) from a URL, the port= and ssl= given with it and
    the extra handshake headers: ws is (path, headers) for ws:// and wss://
    (wsopen.py's handshake), else None. The scheme says TLS or not (mqtts,
    wss: ssl=True unless an SSLContext is given); the port is the URL's, else
    port=, else the scheme's (1883, 8883, 80, 443). ValueError in words for
    anything else."""
    try:
        i = url.find("://")
        scheme = url[:i].lower() if i > 0 else url
        tls = scheme in ("mqtts", "wss")
        if not tls and scheme not in ("mqtt", "ws"):
            raise ValueError("server %r: the URL scheme must be mqtt://, mqtts://, ws:// or wss://" % url)
        if ssl is not None and ssl is not False and not tls:
            raise ValueError("server %r: %s:// is without TLS; for TLS use %ss://" % (url, scheme, scheme))
        rest = url[i + 3:]
        j = rest.find("/")
        path = rest[j:] if j >= 0 else "/"
        where = rest[:j] if j >= 0 else rest
        if "@" in where:
            raise ValueError("server %r: credentials go in user= and password=, not the URL" % url)
        host = where
        k = where.rfind(":")
        if k > where.rfind("]"):  # host:port; an IPv6 address is in [brackets]
            host = where[:k]
            try:
                port = int(where[k + 1:])
            except ValueError:
                raise ValueError("server %r: port %r is not a number" % (url, where[k + 1:]))
        if host[:1] == "[":
            host = host[1:-1]
        if not host:
            raise ValueError("server %r: no host name" % url)
        if not 0 < (port or 1) < 65536:
            raise ValueError("server %r: port %d is outside 1..65535" % (url, port))
        ws = scheme[0] == "w"
        if not ws:
            if headers:
                raise ValueError("server %r: headers= go with a ws:// or wss:// URL" % url)
            if j >= 0 and path != "/":
                raise ValueError("server %r: an MQTT URL has no path; a WebSocket one is ws:// or wss://" % url)
        if headers:
            for k in headers:
                v = headers[k]
                if "\r" in k + v or "\n" in k + v or ":" in k:
                    raise ValueError("headers=: %r: %r is not a valid HTTP header" % (k, v))
        if not port:
            port = (443 if tls else 80) if ws else 8883 if tls else 1883
        return host, port, (ssl or True) if tls else None, (path, headers) if ws else None
    finally:
        from .unload import unload
        unload("url")

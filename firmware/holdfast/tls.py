# TLS for the client, one code path over MicroPython's tls module (mbedtls)
# and CPython's ssl: wraps the socket (the handshake runs in blocking mode
# under the socket's timeout, see Context.secure). Imported only when TLS is
# on, and kept to what every reconnect needs since it stays loaded: building
# the context from ssl_params and putting a failed handshake into words are
# in tlsmore.py, which drops itself from the heap after each use (a client
# builds its context once and reuses it across reconnects).
# docs/security.md describes the parameters and every failure.


class Context:
    """What MQTTClient keeps for TLS: an SSLContext (ctx) and the name to
    check and send as SNI (hostname) instead of the server address, if one
    was given. Built from MQTTClient's ssl and ssl_params (tlsmore.build)."""

    def __init__(self, tls, params):
        from . import tlsmore
        self.ctx, self.hostname = tlsmore.build(tls, params)

    def secure(self, s, host, timeout_ms):
        """Wraps a connected socket in TLS; the handshake blocks, bounded by
        timeout_ms. Returns it non-blocking; closes s on failure and raises
        TLSError when it failed for a TLS reason, the runtime's OSError for
        a timeout or a lost network."""
        host = self.hostname or host
        try:
            s.settimeout(timeout_ms / 1000)
            s = self.ctx.wrap_socket(s, server_hostname=host)
            s.setblocking(False)
        except BaseException as e:
            s.close()
            if isinstance(e, (OSError, ValueError)):
                from . import tlsmore
                e = tlsmore.explain(e, host) or e
            raise e
        return s


context = Context  # the name front.py imports


def __getattr__(name):
    # holdfast.tls.TLSError, as documented before it moved to errmore.py:
    # importing it here would load the rarer errors with every TLS client.
    if name == "TLSError":
        from .errors import TLSError
        return TLSError
    raise AttributeError(name)

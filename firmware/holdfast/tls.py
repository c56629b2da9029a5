# TLS for the client, one code path over MicroPython's ssl (mbedtls) and
# CPython's ssl: wraps the socket (the handshake runs in blocking mode under
# the socket's timeout, see Context.secure). Imported only when TLS is on, and
# kept small since it stays loaded: building the context from ssl_params and
# putting a failed handshake into words are in tlsmore.py, loaded when needed
# and dropped after (a client builds its context once and reuses it across
# reconnects). docs/security.md describes the parameters and every failure.
import sys


class Context:
    """What MQTTClient keeps for TLS: an SSLContext and the name to check
    (and send as SNI) instead of the server address, if one was given."""

    def __init__(self, ctx, hostname=None):
        self.ctx = ctx
        self.hostname = hostname

    def __repr__(self):
        return "<holdfast.tls.Context %s>" % (self.hostname or "(checks the server name)")

    def wrap_socket(self, sock, server_hostname=None):
        return wrap(self, sock, server_hostname)

    def secure(self, s, host, timeout_ms):
        """Wraps a connected socket in TLS; the handshake blocks, bounded by
        timeout_ms. Returns it non-blocking; closes s on failure."""
        try:
            s.settimeout(timeout_ms / 1000)
            s = wrap(self, s, host)
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        return s


def context(tls, params):
    """MQTTClient's ssl and ssl_params -> Context (see tlsmore.build)."""
    from . import tlsmore
    try:
        return Context(*tlsmore.build(tls, params))
    finally:
        _unload()


def wrap(tls, sock, host):
    """Wraps a connected socket (blocking, with a timeout) and runs the
    handshake. Raises TLSError when it fails for a TLS reason, the runtime's
    OSError for a timeout or a lost network."""
    name = host
    if isinstance(tls, Context):
        name = tls.hostname or host
        tls = tls.ctx
    try:
        return tls.wrap_socket(sock, server_hostname=name)
    except (OSError, ValueError) as e:
        from . import tlsmore
        try:
            err = tlsmore.explain(e, name)
        finally:
            _unload()
        if err is None:
            raise
        raise err


def __getattr__(name):
    # holdfast.tls.TLSError, as documented before it moved to errmore.py:
    # importing it here would load the rarer errors with every TLS client.
    if name == "TLSError":
        from .errors import TLSError
        return TLSError
    raise AttributeError(name)


def _unload():
    # tlsmore leaves the heap at the next collection once nothing refers to
    # it: not sys.modules, nor the package (an import sets it as an attribute;
    # the package's __getattr__ would import it again, hence its __dict__).
    sys.modules.pop(__name__ + "more", None)
    pkg = sys.modules.get(__name__[:-4])
    if pkg is not None:
        pkg.__dict__.pop("tlsmore", None)

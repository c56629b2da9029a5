# TLS for the client, one code path over MicroPython's tls module (mbedtls)
# and CPython's ssl: wraps the socket (the handshake runs in blocking mode
# under the socket's timeout, see secure). Imported with each TLS handshake
# and unloaded after it (unload.py): a connected client keeps only the
# wrapped socket and the context, not this module (about 0.5 KB on the
# 64-bit unix port; a reconnect loads it again from its file). Building the
# context from ssl_params (tlssetup.context(), which the client calls once
# and reuses across reconnects) and putting a failed handshake into words
# are in tlssetup.py, unloaded the same way after each use.
# docs/security.md describes the parameters and every failure.

# holdfast.tls.TLSError, as documented before it moved to errors/tls.py:
# looked up by the errors package's __getattr__, which loads errors/tls.py
# only then (importing the class here would load it with every TLS client).
from .errors import __getattr__  # noqa: F401


def secure(tls, s, host, timeout_ms):
    """Wraps a connected socket in TLS with tls, what tlssetup.context()
    returned (the SSLContext, or it and the name to check instead of host);
    the handshake blocks, bounded by timeout_ms. Returns the socket
    non-blocking; closes s on failure and raises TLSError when it failed for
    a TLS reason, the runtime's OSError for a timeout or a lost network."""
    if isinstance(tls, tuple):
        tls, host = tls
    try:
        s.settimeout(timeout_ms / 1000)
        s = tls.wrap_socket(s, server_hostname=host)
        s.setblocking(False)
    except BaseException as e:
        s.close()
        if isinstance(e, (OSError, ValueError)):
            from . import tlssetup
            e = tlssetup.explain(e, host) or e
        raise e
    finally:
        # Both modules, once: explain() leaves tlssetup.py loaded for this.
        from .unload import unload
        unload("tls", "tlssetup")
    return s

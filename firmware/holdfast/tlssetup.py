# The part of TLS that runs once or on failure: building the context from
# ssl_params (file reading, PEM to DER, the client certificate) and putting a
# failed handshake into words. The client imports it when needed; context()
# unloads it again before it returns, tls.secure() after explain() (unload.py),
# so all that stays on the heap is the names its import interned (hence few
# functions, globals and argument names of its own, argument names the runtime or the
# client has interned already, and few names of CPython's classes and
# attributes in code only CPython runs). Messages never carry
# key material, file contents or passwords: only reasons, host names and
# file paths. docs/security.md describes the parameters and every failure.
from binascii import a2b_base64
from . import errors  # errors.TLSError at a raise: the class loads only with a failure
import sys

# MicroPython: every name here is interned already (MP is shell.py's too);
# read from sys, not imported from shell.py, so the import goes one way.
MP = sys.implementation.name == "micropython"

if MP:
    try:  # the built-in module: ssl.py, a wrapper around it, takes 1 KB more heap
        import tls as ssl
    except ImportError:  # MicroPython before 1.23: ssl is the built-in one
        import ssl  # type: ignore[no-redef]
else:
    import ssl  # type: ignore[no-redef]


def context(tls, ssl_params):
    """MQTTClient's ssl and ssl_params -> what the client keeps for TLS:
    the SSLContext, or (SSLContext, the name to check and send as SNI
    instead of the server address) when server_hostname is given. ssl=True
    builds a context from ssl_params; an SSLContext made by the caller is used
    as it is (only server_hostname may be given with it); ssl_params without ssl
    are refused."""
    # The CA and the client certificate are loaded here, not in helpers of
    # their own: each helper's name would stay interned after the drop.
    keys = ("cafile", "cadata", "certfile", "keyfile", "cert", "key", "server_hostname",
            "cert_reqs", "tls13")
    try:
        if not tls:
            raise errors.TLSError("config", "ssl_params given but TLS is off: pass ssl=True")
        for k in ssl_params:
            if k not in keys:
                raise errors.TLSError("config", "unknown ssl_params key %r (known: %s)"
                                      % (k, ", ".join(keys)))
        name = ssl_params.get("server_hostname")
        if tls is not True:
            if len(ssl_params) > (1 if name else 0):
                raise errors.TLSError("config", "ssl is an SSLContext: configure it directly; "
                                                "ssl_params can only add server_hostname")
        else:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            reqs = ssl_params.get("cert_reqs", ssl.CERT_REQUIRED)
            if reqs != ssl.CERT_REQUIRED and reqs != ssl.CERT_NONE:
                # mbedtls takes CERT_OPTIONAL as "verify, and go on if it fails":
                # the client would talk (and send its password) to anyone.
                raise errors.TLSError("config", "cert_reqs must be ssl.CERT_REQUIRED, or "
                                                "ssl.CERT_NONE to turn verification off; got %r"
                                      % (reqs,))
            if not MP:
                # CPython's names as strings longer than 10 characters, which
                # mpy-cross does not intern: a board never learns them.
                if reqs == ssl.CERT_NONE:
                    setattr(tls, "check_hostname", False)
                if not ssl_params.get("tls13"):
                    # The boards speak TLS 1.2 (MicroPython's mbedtls build has no
                    # TLS 1.3); the host client matches them, so a broker that
                    # refuses our client certificate fails the handshake on both
                    # runtimes (with 1.3 it only closes the link after the handshake).
                    setattr(tls, "maximum_version", 0x0303)  # ssl.TLSVersion.TLSv1_2
            tls.verify_mode = reqs
            # The CA that signed the broker's certificate.
            data = ssl_params.get("cadata")
            if data is None and ssl_params.get("cafile") is not None:
                data = _read(ssl_params["cafile"], "cafile")
            if data is not None:
                if isinstance(data, str):
                    data = data.encode()
                try:
                    # mbedtls here parses DER only: PEM is converted, one CA at a time
                    # (on CPython too, so both load the same bytes).
                    for _, der in der_blocks(data, "CERTIFICATE"):
                        if MP:
                            tls.load_verify_locations(der)  # the tls module takes it positional only
                        else:
                            tls.load_verify_locations(cadata=der)
                except (OSError, ValueError) as e:
                    raise errors.TLSError("config", "the CA certificate (cafile/cadata) could not be "
                                                    "loaded: %s" % _detail(e), e)
            elif reqs != ssl.CERT_NONE:
                if MP:
                    raise errors.TLSError("config", "TLS verifies the broker: give ssl_params cafile or "
                                                    "cadata (the CA that signed the broker's certificate)")
                getattr(tls, "load_default_certs")()  # CPython only: the host's trust store
            # The client certificate, if any.
            certfile = ssl_params.get("certfile")
            keyfile = ssl_params.get("keyfile")
            cert = ssl_params.get("cert")
            key = ssl_params.get("key")
            if certfile is not None or keyfile is not None or cert is not None or key is not None:
                if (certfile is None and cert is None) or (keyfile is None and key is None):
                    raise errors.TLSError("config", "a client certificate needs both a certificate "
                                                    "(certfile or cert) and its key (keyfile or key)")
                try:
                    if MP:
                        if cert is None:
                            cert = _read(certfile, "certfile")
                        if key is None:
                            key = _read(keyfile, "keyfile")
                        cert = der_blocks(cert, "CERTIFICATE")[0][1]
                        key = der_blocks(key, "PRIVATE KEY")[0][1]
                        tls.load_cert_chain(cert, key)
                    else:
                        if certfile is None or keyfile is None:
                            raise errors.TLSError("config", "CPython's ssl loads the client "
                                                            "certificate and key from files: give "
                                                            "certfile and keyfile (PEM)")
                        _path(certfile, "certfile")
                        _path(keyfile, "keyfile")
                        tls.load_cert_chain(certfile, keyfile, password=_encrypted)
                except (OSError, ValueError) as e:
                    hint = "they must match each other"
                    if not MP:  # CPython's ssl reads PEM files only; a board takes DER too
                        for f in (certfile, keyfile):
                            with open(f, "rb") as fh:
                                if fh.read(4096).find(b"-----BEGIN") < 0:
                                    hint = ("CPython's ssl takes PEM only, and %s is not PEM (DER?"
                                            " convert it with openssl x509/pkey -inform der)" % f)
                                    break
                    raise errors.TLSError("config", "the client certificate or key could not be loaded "
                                                    "(%s): %s" % (hint, _detail(e)), e)
        # The name to check, when one was given, rides with the context: a
        # client that checks the server address keeps no tuple.
        return (tls, name) if name else tls
    finally:
        from .unload import unload  # this module and tls.py leave the heap
        unload("tlssetup", "tls")


def _encrypted():
    # CPython asks for the key's passphrase through this (instead of a prompt).
    raise errors.TLSError("config", "the key is encrypted: store it unencrypted (docs/security.md)")


def der_blocks(data, name=None):
    """PEM bytes -> [(label, DER bytes)] for each -----BEGIN label----- block
    (only labels containing name, if given); DER bytes come back as
    [(None, data)]. Works on both runtimes: host tools can use it to turn
    PEM files into the DER files a board loads fastest."""
    if data.find(b"-----BEGIN") < 0:
        return [(None, data)]
    out = []
    i = 0
    while True:
        a = data.find(b"-----BEGIN ", i)
        if a < 0:
            break
        e = data.find(b"-----", a + 11)
        z = data.find(b"-----END", e + 5)
        if e < 0 or z < 0:
            break
        label = data[a + 11:e].decode()
        i = z + 8
        if name is not None and label.find(name) < 0:
            continue
        body = data[e + 5:z]
        if label.find("ENCRYPTED") >= 0 or body.find(b"Proc-Type") >= 0:
            _encrypted()
        out.append((label, a2b_base64(body)))
    if not out:
        raise errors.TLSError("config", "no %s block in the PEM data" % (name or "PEM"))
    return out


def _path(path, name):
    # Refuses certificate or key data passed where a path belongs, so that the
    # data never ends up in an error message (a file name is shown in errors).
    # name: the ssl_params key (an argument name the runtime has interned already).
    if not isinstance(path, str) or path.find("\n") >= 0 or path.find("-----") >= 0:
        raise errors.TLSError("config", "%s must be a file path (give the contents as %s)"
                       % (name, "cadata" if name == "cafile" else name[:-4]))


def _read(path, name):
    _path(path, name)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise errors.TLSError("config", "cannot read %s %r: %s" % (name, path, _detail(e)), e)


def _detail(e):
    # The runtime's exception in one line (MicroPython's mbedtls messages span lines).
    s = str(e).strip().replace("\n", "; ")
    return e.__class__.__name__ + (": " + s if s else "")


def explain(e, name):
    """The runtime's handshake exception -> TLSError with the reason in words,
    or None for a timeout or a network error that is not TLS's (raised as it
    is). tls.secure(), its caller, unloads this module after it."""
    reason = None
    n = e.args[0] if e.args and isinstance(e.args[0], int) else 0
    code = getattr(e, "verify_code", None)  # CPython: only ssl.SSLCertVerificationError has one
    if MP and isinstance(e, ValueError):
        # mbedtls' verify result, one line per problem, or a usage error.
        s = str(e)
        if s.find("server_hostname") >= 0:
            reason = "config"
        elif s.find("trusted") >= 0 or s.find("signed") >= 0:
            reason = "untrusted"
        elif s.find("expired") >= 0:
            reason = "expired"
        elif s.find("future") >= 0:
            reason = "not-yet-valid"
        elif s.find("CN") >= 0 or s.find("name") >= 0:
            reason = "hostname"
        else:
            reason = "untrusted"
    elif code is not None:
        if code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
            reason = "expired"
        elif code == 9:  # X509_V_ERR_CERT_NOT_YET_VALID
            reason = "not-yet-valid"
        elif code in (62, 64):  # hostname / IP address mismatch
            reason = "hostname"
        else:
            reason = "untrusted"
    elif isinstance(e, ValueError):
        reason = "config"
    elif n in (32, 54, 104):  # EPIPE, ECONNRESET (BSD, Linux): the peer hung up mid-handshake
        reason = "closed"
    elif MP:
        if n == -0x7780:  # MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE
            reason = "rejected"
        elif n == -0x7280:  # MBEDTLS_ERR_SSL_CONN_EOF
            reason = "closed"
        elif n < 0:  # any other mbedtls error
            reason = "handshake"
    elif hasattr(e, "reason"):  # CPython's ssl.SSLError (an OSError with library and reason)
        if n in (6, 8):  # SSL_ERROR_ZERO_RETURN, SSL_ERROR_EOF: the broker hung up
            reason = "closed"
        else:
            reason = "rejected" if str(e).find("ALERT") >= 0 else "handshake"
    if reason is None:
        return None
    words = {
        "untrusted": "the broker's certificate is not signed by a CA this client trusts (the one in"
                     " cafile/cadata; without them, on CPython, the host's trust store): wrong CA,"
                     " or someone in the middle",
        "expired": "the broker's certificate has expired (or this device's clock is wrong)",
        "not-yet-valid": "the broker's certificate is not valid yet (is this device's clock "
                         "set? sync it before connecting)",
        "hostname": "the broker's certificate is not issued for the name %r" % name,
        "rejected": "the broker refused the handshake (does it require a client "
                    "certificate, and does it trust ours?)",
        "closed": "the broker closed the connection during the handshake (it may require a "
                  "client certificate, or the port may not speak TLS)",
        "handshake": "the TLS handshake failed",
        "config": "the TLS settings are not usable",
    }[reason]
    return errors.TLSError(reason, "TLS with %s failed: %s [%s]" % (name, words, _detail(e)), e)

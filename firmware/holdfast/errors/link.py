# The link's failures: OSErrors, so a loop that catches OSError to reconnect
# catches them (errors/__init__.py says why).


class MQTTTimeout(OSError):
    """An operation did not complete within its time bound (an OSError, as
    a socket timeout is)."""


class LinkDown(OSError):
    """The connection to the broker is lost or was found dead."""


class Unreachable(OSError):
    """The broker could not be reached: its name did not resolve, or the TCP
    connect failed (refused, no route, timed out). args: the runtime's errno
    when it gave a number (ECONNREFUSED is 111), then host:port and the
    cause in words."""


def unreachable(e, code, *args):
    """The Unreachable of shell.py's socket calls, with the words of code
    (reasons.py) formatted with args. e: the runtime's OSError, or the errno
    itself. The errno stays in args[0] for code that checks it; a name that
    did not resolve has none on MicroPython ("[addrinfo error -2]")."""
    from ..reasons import text
    n = e if isinstance(e, int) else e.args[0] if e.args else None
    words = text(code, args)
    return Unreachable(n, words) if isinstance(n, int) else Unreachable(words)

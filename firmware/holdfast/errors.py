# Every failure a user can hit has a name and its cause in words.
#
# Two families, as in umqtt: what the broker or the client said about MQTT
# (refused, malformed, outbox full, TLS set-up) derives from MQTTError;
# a lost or unreachable link is an OSError (LinkDown, MQTTTimeout,
# Unreachable, and the socket's own), so a umqtt.robust-style loop that
# catches OSError to reconnect keeps working. No class can be both:
# MicroPython refuses a class with OSError and another exception class as
# bases ("multiple bases have instance lay-out conflict"). Everything:
# except (OSError, MQTTError).
#
# Only the base of the MQTT family is here. The classes of what went wrong
# load with the first one raised or caught, found by __getattr__ below,
# so `from holdfast.errors import LinkDown`, `holdfast.errors.LinkDown` and
# `holdfast.LinkDown` give the one class either way:
# - errcommon.py: what a running client meets when the link or the broker
#   fails (ConnectError, OutboxFull, MQTTTimeout, LinkDown, Unreachable);
# - errmore.py: what a broken peer, a refused subscription or TLS set-up
#   raise (MQTTProtocolError, V5Error, SubscribeError, TLSError); looked for only after errcommon.py, which it loads too (a
#   list of which name is where would be a string on the heap for good);
# - wserrors.py: MQTT over WebSockets (WebSocketError, WebSocketRefused),
#   looked for last.
# An exception class costs about 230 bytes of heap on a board, more with
# an __init__: a client that connects and publishes without a failure
# carries none of them.


class MQTTError(Exception):
    """Base of the errors about MQTT itself (not of the link errors)."""


# umqtt.simple's name for its errors (CONNACK refused, SUBACK 0x80): the
# same base, so `from holdfast import MQTTClient, MQTTException` ports as is.
MQTTException = MQTTError


def __getattr__(name):
    # Not for dunder (or any _private) names: CPython's import looks up __path__.
    if name[0] == "_":
        raise AttributeError(name)
    from . import errcommon as m
    c = getattr(m, name, None)
    if c is None:
        from . import errmore as m
        c = getattr(m, name, None)
        if c is None:
            from . import wserrors as m
            c = getattr(m, name)
    return c

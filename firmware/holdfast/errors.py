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


class MQTTError(Exception):
    """Base of the errors about MQTT itself (not of the link errors)."""


# umqtt.simple's name for its errors (CONNACK refused, SUBACK 0x80): the
# same base, so `from holdfast import MQTTClient, MQTTException` ports as is.
MQTTException = MQTTError


class ConnectError(MQTTError):
    """The broker refused the connection (CONNACK return code 1..5; with
    MQTT 5 a reason code, 0x80 and above)."""

    def __init__(self, code, msg=None):
        if msg is None:  # MQTT 5's words come from v5words.py
            from .reasons import refused  # the words load only with a refusal
            msg = refused(code)
        super().__init__(msg)
        self.code = code


class OutboxFull(MQTTError):
    """The outbox has no room for another message; publish() stored nothing."""


class MQTTTimeout(OSError):
    """An operation did not complete within its time bound (an OSError, as
    a socket timeout is)."""


class LinkDown(OSError):
    """The connection to the broker is lost or was found dead."""


def __getattr__(name):
    # The errors a running client rarely meets (MQTTProtocolError,
    # PacketTooLarge, SubscribeError, Unreachable, TLSError) are in
    # errmore.py: a class costs about 300 bytes of heap, so they load with
    # the first `from .errors import` of one of them, where it is raised or
    # caught. Not for dunder names: CPython's import looks up __path__.
    if name[:2] == "__":
        raise AttributeError(name)
    from . import errmore
    return getattr(errmore, name)

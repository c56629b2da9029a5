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


class MQTTProtocolError(MQTTError):
    """The peer sent bytes that are not valid MQTT; the connection is dropped."""


class PacketTooLarge(MQTTProtocolError):
    """An inbound PUBLISH is larger than the receive buffer; it was skipped whole."""

    def __init__(self, msg, type, length, pid, qos=0):
        super().__init__(msg)
        self.type = type
        self.length = length
        self.pid = pid
        self.qos = qos


class ConnectError(MQTTError):
    """The broker refused the connection (CONNACK return code 1..5)."""

    def __init__(self, code):
        from .reasons import refused  # the words load only with a refusal
        super().__init__(refused(code))
        self.code = code


class SubscribeError(MQTTError):
    """The broker answered 0x80 (failure) for a subscription."""


class OutboxFull(MQTTError):
    """The outbox has no room for another message; publish() stored nothing."""


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


class TLSError(MQTTError):
    """TLS could not be set up, or the handshake with the broker failed.
    .reason: one word (docs/security.md); .cause: the runtime's exception."""

    def __init__(self, reason, msg, cause=None):
        super().__init__(msg)
        self.reason = reason
        self.cause = cause

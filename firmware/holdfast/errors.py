# Every failure a user can hit has a name and its cause in words.


class MQTTError(Exception):
    """Base of every holdfast error."""


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


class MQTTTimeout(MQTTError):
    """An operation did not complete within its time bound."""


class LinkDown(MQTTError):
    """The connection to the broker is lost or was found dead."""


class TLSError(MQTTError):
    """TLS could not be set up, or the handshake with the broker failed.
    .reason: one word (docs/security.md); .cause: the runtime's exception."""

    def __init__(self, reason, msg, cause=None):
        super().__init__(msg)
        self.reason = reason
        self.cause = cause

# The errors a running client rarely meets (a broken peer, a refused
# subscription, TLS set-up), loaded with the first use of one; errors.py
# says why and finds them (`from holdfast.errors import TLSError`).
from .errors import MQTTError


class MQTTProtocolError(MQTTError):
    """The peer sent bytes that are not valid MQTT; the connection is dropped."""


class V5Error(MQTTProtocolError):
    """An MQTT 5 packet broke the protocol (mqtt5/). .code: the reason code
    that says how (0x81 malformed packet, 0x82 protocol error, ...)."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class SubscribeError(MQTTError):
    """The broker answered 0x80 (failure) for a subscription."""


class TLSError(MQTTError):
    """TLS could not be set up, or the handshake with the broker failed.
    .reason: one word (docs/security.md); .cause: the runtime's exception."""

    def __init__(self, reason, msg, cause=None):
        super().__init__(msg)
        self.reason = reason
        self.cause = cause


# TLS set-up (docs/security.md).
from .base import MQTTError


class TLSError(MQTTError):
    """TLS could not be set up, or the handshake with the broker failed.
    .reason: one word (docs/security.md); .cause: the runtime's exception."""

    def __init__(self, reason, msg, cause=None):
        super().__init__(msg)
        self.reason = reason
        self.cause = cause

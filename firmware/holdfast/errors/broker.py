# What the broker refused (a connection, a subscription) or broke (bytes
# that are not MQTT).
from .base import MQTTError


class ConnectError(MQTTError):
    """The broker refused the connection (CONNACK return code 1..5; with
    MQTT 5 a reason code, 0x80 and above)."""

    def __init__(self, code, msg=None):
        if msg is None:  # MQTT 5 passes its own words
            from ..reasons import refused  # the words load only with a refusal
            msg = refused(code)
        super().__init__(msg)
        self.code = code


class SubscribeError(MQTTError):
    """The broker answered 0x80 (failure) for a subscription."""


class MQTTProtocolError(MQTTError):
    """The peer sent bytes that are not valid MQTT; the connection is dropped."""


class V5Error(MQTTProtocolError):
    """An MQTT 5 packet broke the protocol. .code: the reason code that says
    how (0x81 malformed packet, 0x82 protocol error, ...)."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def not_broker(c, e):
    """Client c's link failed with e before CONNACK: a protocol error then
    means the peer is no MQTT broker (an HTTP server, an SSH banner...),
    whatever packet its first bytes look like; they are shown. Any other
    error is e, a subclass's too (a WebSocket's or MQTT 5's error names its
    own cause)."""
    if e.__class__ is not MQTTProtocolError:
        return e
    from ..reasons import text
    r = c.session.rx
    return MQTTProtocolError(text(78, (c.server, c.port, bytes(r.buf[:min(r.end, 32)]), e)))

# The errors a running client meets when the link or the broker fails,
# loaded with the first one raised or caught; errors.py says why and finds
# them (`from holdfast.errors import LinkDown`).
from .errors import MQTTError


class ConnectError(MQTTError):
    """The broker refused the connection (CONNACK return code 1..5; with
    MQTT 5 a reason code, 0x80 and above)."""

    def __init__(self, code, msg=None):
        if msg is None:  # MQTT 5's words come from mqtt5/reasons.py
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


class Unreachable(OSError):
    """The broker could not be reached: its name did not resolve, or the TCP
    connect failed (refused, no route, timed out). args: the runtime's errno
    when it gave a number (ECONNREFUSED is 111), then host:port and the
    cause in words."""

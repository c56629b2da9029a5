# The errors of MQTT over WebSockets (ws:// and wss://), loaded with the
# first one raised or caught; errors.py says why and finds them (`from
# holdfast.errors import WebSocketRefused`), after errcommon.py and errmore.py,
# whose classes they derive from.
from .errcommon import ConnectError
from .errmore import MQTTProtocolError


class WebSocketError(MQTTProtocolError):
    """The WebSocket server of a ws:// or wss:// URL sent a frame RFC 6455
    forbids (a text frame, a masked frame, ...); the link is closed.
    .reason: one word (README, MQTT over WebSockets)."""


class WebSocketRefused(ConnectError):
    """The server of a ws:// or wss:// URL did not upgrade to a WebSocket
    with the mqtt subprotocol: .code the HTTP status (0: none), .status the
    status line, .reason one word (status, upgrade, accept, subprotocol).
    A refusal: reconnects wait the longest delay, as for ConnectError."""

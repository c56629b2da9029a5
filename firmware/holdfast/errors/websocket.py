# MQTT over WebSockets (ws:// and wss://).
from .broker import ConnectError, MQTTProtocolError


class WebSocketError(MQTTProtocolError):
    """The WebSocket server of a ws:// or wss:// URL sent a frame RFC 6455
    forbids (a text frame, a masked frame, ...); the link is closed.
    .reason: one word (README, MQTT over WebSockets)."""


class WebSocketRefused(ConnectError):
    """The server of a ws:// or wss:// URL did not upgrade to a WebSocket
    with the mqtt subprotocol: .code the HTTP status (0: none), .status the
    status line, .reason one word (status, upgrade, accept, subprotocol).
    A refusal: reconnects wait the longest delay, as for ConnectError."""


def refused(code, status, reason, msg):
    e = WebSocketRefused(code, msg)
    e.reason = reason
    e.status = status
    return e


_WORDS = (
    "reserved bits 0x%02x set in a frame (no extension was agreed)",  # RESERVED
    "a masked frame from the server (opcode %d; section 5.1: servers do not mask)",  # MASKED
    "a frame length of 1 GiB or more (%d)",  # LONG
    "unknown opcode %d",  # OPCODE
    "a text frame (opcode %d): MQTT travels in binary frames",  # TEXT
    "a fragmented control frame (opcode %d)",  # CONTROL_FRAGMENTED
    "a control frame of %d bytes (most 125)",  # CONTROL_LONG
    "a continuation frame (opcode %d) outside a fragmented message",  # CONTINUATION
    "a new data frame (opcode %d) inside a fragmented message",  # INTERLEAVED
)


def violation(why, arg):
    """WebSocketError for a frame the server got wrong: the link is closed."""
    e = WebSocketError("WebSocket protocol error from the server: " + _WORDS[why] % arg)
    e.reason = ("reserved", "masked", "length", "opcode", "text", "fragmented", "control", "continuation",
                "interleaved")[why]
    return e


def closed(ctl, n):
    """LinkDown for the server's close frame, its data in ctl[6:6 + n]."""
    code = ctl[6] << 8 | ctl[7] if n >= 2 else 1005
    why = bytes(ctl[8:6 + n]).decode() if n > 2 else ""
    from .link import LinkDown
    e = LinkDown("the server closed the WebSocket (code %d%s)" % (code, ": " + why if why else ""))
    e.code = code
    return e

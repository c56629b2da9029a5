# The words of MQTT 5: reason codes, property names, and the errors the
# package raises, by number. Kept apart so a level-5 client that never has
# to explain anything never loads them.
from ..reasons import NAMES

REASONS = {
    0x00: "success",
    0x01: "granted QoS 1",
    0x02: "granted QoS 2",
    0x04: "disconnect with will message",
    0x10: "no matching subscribers",
    0x11: "no subscription existed",
    0x18: "continue authentication",
    0x19: "re-authenticate",
    0x80: "unspecified error",
    0x81: "malformed packet",
    0x82: "protocol error",
    0x83: "implementation specific error",
    0x84: "unsupported protocol version",
    0x85: "client identifier not valid",
    0x86: "bad user name or password",
    0x87: "not authorized",
    0x88: "server unavailable",
    0x89: "server busy",
    0x8A: "banned",
    0x8B: "server shutting down",
    0x8C: "bad authentication method",
    0x8D: "keep alive timeout",
    0x8E: "session taken over",
    0x8F: "topic filter invalid",
    0x90: "topic name invalid",
    0x91: "packet identifier in use",
    0x92: "packet identifier not found",
    0x93: "receive maximum exceeded",
    0x94: "topic alias invalid",
    0x95: "packet too large",
    0x96: "message rate too high",
    0x97: "quota exceeded",
    0x98: "administrative action",
    0x99: "payload format invalid",
    0x9A: "retain not supported",
    0x9B: "QoS not supported",
    0x9C: "use another server",
    0x9D: "server moved",
    0x9E: "shared subscriptions not supported",
    0x9F: "connection rate exceeded",
    0xA0: "maximum connect time",
    0xA1: "subscription identifiers not supported",
    0xA2: "wildcard subscriptions not supported",
}

PROPERTIES = {
    0x01: "payload format indicator",
    0x02: "message expiry interval",
    0x03: "content type",
    0x08: "response topic",
    0x09: "correlation data",
    0x0B: "subscription identifier",
    0x11: "session expiry interval",
    0x12: "assigned client identifier",
    0x13: "server keep alive",
    0x15: "authentication method",
    0x16: "authentication data",
    0x17: "request problem information",
    0x18: "will delay interval",
    0x19: "request response information",
    0x1A: "response information",
    0x1C: "server reference",
    0x1F: "reason string",
    0x21: "receive maximum",
    0x22: "topic alias maximum",
    0x23: "topic alias",
    0x24: "maximum QoS",
    0x25: "retain available",
    0x26: "user property",
    0x27: "maximum packet size",
    0x28: "wildcard subscription available",
    0x29: "subscription identifier available",
    0x2A: "shared subscription available",
}

# "@": the packet type (the first argument), "$": a property identifier
# (the next one).
TEXT = (
    '@: unknown property identifier 0x%02x',  # UNKNOWN
    '@: property $ may not be in a @',  # NOT_IN
    '@: property $ appears more than once',  # TWICE
    '@: the value of property $ runs past the properties',  # VALUE_PAST
    '@: property length %d runs past the packet',  # PLEN_PAST
    '@: property $ is %d, must be 0 or 1',  # FLAG
    '@: property $ is 0, which it must never be',  # ZERO
    '@: property $ is not valid UTF-8',  # UTF8
    'a variable byte integer is longer than 4 bytes, not in the fewest bytes, or runs past the packet',  # VARINT
    '@: reason code 0x%02x is not one a @ may carry',  # CODE
    '@: %d bytes after the properties',  # TRAILING
    'CONNACK reserved flag bits are set',  # CONNACK_FLAGS
    'CONNACK says session present with reason code 0x%02x, a refusal',  # PRESENT_REFUSED
    '@: %d bytes are too few for its fields',  # SHORT
    '@ with message id 0',  # PID_ZERO
    'PUBLISH with an empty topic and no topic alias',  # TOPIC_EMPTY
    'PUBLISH topic is not valid UTF-8',  # TOPIC_UTF8
    'wildcard in a PUBLISH topic',  # TOPIC_WILD
    '@ without a reason code',  # NO_CODES
    '0x%02x is not an MQTT 5 property identifier',  # 19 arguments: A_UNKNOWN
    'property $ may not be in a @',  # A_NOT_IN
    'property $ given twice',  # A_TWICE
    'property $: %r is outside %d..%d',  # A_RANGE
    'subscription options %r: QoS 0..2, retain handling 0..2, bits 6 and 7 zero',  # A_OPTIONS
    'string of %d bytes is longer than 65535',  # A_STR_LONG
    'a Subscription Identifier on a PUBLISH is for a broker to add, not a client',  # A_SUB_ID_OUT
    'PUBLISH with topic alias %d, above the %d this client offered',  # 26 session: ALIAS_RANGE
    'PUBLISH with topic alias %d before any PUBLISH set it on this link',  # ALIAS_UNKNOWN
    'a %d-byte packet is larger than the broker takes (its Maximum Packet Size: %d)',  # LIMIT
    'connection refused: %s%s',  # REFUSED
    'the broker closed the link: %s%s',  # SERVER_GONE
    'message %d refused by the broker: %s%s',  # REJECTED
    "a QoS %d message, above the broker's Maximum QoS %d (its CONNACK)",  # MAX_QOS
    'a retained message, and the broker takes none (Retain Available 0 in its CONNACK)',  # NO_RETAIN
    'publish(props=...) is MQTT 5: make the client with level=5',  # PROPS_LEVEL
    'subscription options (no_local, retain_as_published, retain_handling, sub_id) are MQTT 5: '
    'make the client with level=5',  # OPTS_LEVEL
)


def words(code, type=0):
    """A reason code in words, "quota exceeded (0x97)"; type: the packet it
    came in, where the words depend on it (0x00 in a DISCONNECT)."""
    if not code and type == 14:
        w = "normal disconnection"
    elif not code and type == 9:
        w = "granted QoS 0"
    else:
        w = REASONS.get(code, "unknown reason code")
    return "%s (0x%02x)" % (w, code)


def prop(p):
    return "0x%02x (%s)" % (p, PROPERTIES.get(p, "unknown"))


def text(n, args, code=-1):
    """Error n in words; code >= 0: after the reason code it is sent with."""
    t = TEXT[n]
    if "@" in t:
        a = args[0]
        t = t.replace("@", "will properties" if not a else "AUTH" if a == 15 else NAMES[a])
        args = args[1:]
    if "$" in t:
        t = t.replace("$", prop(args[0]))
        args = args[1:]
    if args:
        t = t % args
    return words(code) + ": " + t if code >= 0 else t

# The numbers the firmware keeps as private consts (a module-level name
# costs heap on a board), named here for the tests: the session's link
# states and receive() events as session.py documents them, and MQTT's
# packet types. Every test that drives a Session through CONNACK, a
# delivery or a failure, or encodes and decodes a packet, checks them.
CLOSED = 0
OFFLINE = 1
CONNECTING = 2
CONNECTED = 3
CLOSING = 4
FAILED = 5

MESSAGE = 1
DELIVERED = 2
REFUSED = 3
REJECTED = 4

ACK_ROOM = 16  # send buffer bytes kept for acknowledgements

# MQTT's packet types and limits (codec.py keeps them private).
CONNECT = 1
CONNACK = 2
PUBLISH = 3
PUBACK = 4
SKIPPED = 16  # codec.Reader.next(): an oversize PUBLISH passed over
UNDECODED = 17  # codec.Reader.next(): a PUBLISH or SUBACK before inbound.ready()
PUBREC = 5
PUBREL = 6
PUBCOMP = 7
SUBSCRIBE = 8
SUBACK = 9
UNSUBSCRIBE = 10
UNSUBACK = 11
PINGREQ = 12
PINGRESP = 13
DISCONNECT = 14
MAX_REMAINING = 268435455
SUBACK_FAILURE = 0x80

# The words of every error the core raises (codec, session, store, the
# clients), by the number it raises with. Kept apart so the text takes heap
# only once an error has to be explained.
NAMES = ("reserved", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
         "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT",
         "reserved")

TEXT = (
    'packet of %d bytes does not fit the %d bytes free in the buffer',  # FIT
    'remaining length %d is above the MQTT maximum %d',  # RL_MAX
    'string of %d bytes is longer than 65535',  # STR_LONG
    'message id %d is outside 1..65535',  # PID_RANGE
    'QoS %d is not 0, 1 or 2',  # QOS
    'empty topic',  # TOPIC_EMPTY
    'wildcard in a topic name: %r',  # TOPIC_WILD
    'protocol level %d is not 3 (MQTT 3.1), 4 (MQTT 3.1.1) or 5 (MQTT 5)',  # LEVEL
    'an empty client id needs MQTT 3.1.1 and a clean session',  # EMPTY_ID
    'keepalive %d is outside 0..65535 s',  # KEEPALIVE
    'a password needs a user name in MQTT 3.1.1',  # PW_NO_USER
    'DUP on a QoS 0 PUBLISH',  # DUP_QOS0
    'SUBSCRIBE needs at least one topic filter',  # NO_FILTER_SUB
    'UNSUBSCRIBE needs at least one topic filter',  # NO_FILTER_UNSUB
    'empty topic filter',  # FILTER_EMPTY
    'topic filter %r is not valid UTF-8',  # FILTER_UTF8
    'misplaced wildcard in topic filter %r',  # FILTER_WILD
    '@ with message id 0',  # PID_ZERO
    '%s: length field runs past the packet',  # LEN_PAST
    '%s: string length %d runs past the packet',  # STR_PAST
    'reserved packet type %d',  # RESERVED
    'PUBLISH with QoS 3',  # QOS3
    'DUP set on a QoS 0 PUBLISH',  # DUP0
    '@ fixed-header flags are %d, must be 2',  # FLAGS2
    '@ fixed-header flags are %d, must be 0',  # FLAGS0
    'remaining length has a fifth byte',  # FIFTH
    'PUBLISH with an empty topic',  # PUB_EMPTY
    'PUBLISH topic is not valid UTF-8',  # PUB_UTF8
    'wildcard in a PUBLISH topic',  # PUB_WILD
    'PUBLISH message id runs past the packet',  # PUB_PID_PAST
    '@ remaining length is %d, must be 2',  # RL2
    '@ remaining length is %d, must be 0',  # RL0
    'CONNACK reserved flag bits are set',  # CONNACK_FLAGS
    'CONNACK return code %d is reserved',  # CONNACK_CODE
    'SUBACK without a return code',  # SUBACK_EMPTY
    'SUBACK return code 0x%02x is not 0, 1, 2 or 0x80',  # SUBACK_CODE
    '@ is sent by clients, not by a broker',  # FROM_CLIENT
    '@ of %d bytes is larger than the %d-byte receive buffer',  # TOO_LARGE
    'connection closed by the broker',  # 38 session: CLOSED
    'packet id %d: must be 1..65535',  # PID_SET
    'a %d-byte packet does not fit the %d-byte send buffer (size=): it takes packets of up to %d bytes, %d are kept for acknowledgements',  # 40 TX_FIT
    '@ before CONNACK',  # EARLY
    'unexpected @ from the broker',  # UNEXPECTED
    'a second CONNACK on one connection',  # CONNACK2
    'no answer from the broker for %d ms after PINGREQ',  # NO_PINGRESP
    'an empty client id needs clean_session=True [MQTT-3.1.3-7]',  # 45 client: EMPTY_ID_CLEAN
    'no CONNACK within %d ms: is it an MQTT broker, and does it speak protocol level %d?'
    ' A broker may stay silent at a level it does not speak (level=3: MQTT 3.1, 4: MQTT 3.1.1,'
    ' 5: MQTT 5)',  # NO_CONNACK
    'a %d-byte QoS 0 PUBLISH found no room in the send buffer within %d ms',  # NO_ROOM
    'no UNSUBACK within %d ms',  # NO_UNSUBACK
    'a %d-byte message can never fit this outbox: its records hold messages of up to %d bytes',  # 49 session: NEVER_FITS
    'this call waits for the broker: not from inside a callback',  # 50 IN_CALLBACK
    "when_full=%r: use 'refuse' or 'drop_oldest'",  # front: WHEN_FULL
    'not connected to the broker (%s)',  # OFFLINE
    'subscription to %r refused by the broker when restored',  # RESTORE_REFUSED
    'subscription to %r refused by the broker',  # SUB_REFUSED
    'no SUBACK within %d ms',  # 55 NO_SUBACK
    'no TCP connection to %s:%d within %d ms',  # NO_TCP
    'outbox full: %d messages pending',  # store: FULL_SLOTS
    'outbox full: no room for a %d-byte message in %d bytes (%d messages pending)',  # FULL_BYTES
    'the broker closed the link instead of answering CONNECT: does it speak protocol level %d'
    ' (3: MQTT 3.1, MQIsdp; 4: MQTT 3.1.1; 5: MQTT 5)?',  # 59 session: CLOSED_AT_CONNECT
    'nothing from the broker for %d ms (1.5 keepalives): the link is dead',  # RX_SILENT
    'the socket took no bytes for %d ms (1.5 keepalives)',  # TX_STALLED
    'SUBACK %d: %d return codes, fewer than its filters',  # subs: SUBACK_COUNT
    '%s for message id %d, which awaits %s',  # ACK_TYPE
    'reset before CONNACK (%s): the port may expect TLS (ssl=True)',  # 64 front: RESET_AT_CONNECT
    'not connected: no connect(), or disconnect() since',  # NOT_STARTED
    'cannot resolve the host name %r (port %d): check the name, or give an IP address (%s)',  # 66 net: NO_HOST
    'connection to %s:%d refused: nothing listens there; is the broker running on that port?',  # REFUSED
    'no connection to %s:%d (%s)',  # NO_ROUTE
    'a %d-byte message is too large for the outbox (most 65535)',  # 69 durable.log: TOO_LARGE
    'outbox full: %d bytes pending, limit %d, the next record needs %d',  # FULL_LIMIT
    'outbox full: %d messages pending (slots=%d)',  # FULL_INDEX
    'outbox full: no room to record that message %d reached PUBREC',  # NO_REL
    'outbox full: the filesystem has no room for the %d bytes it keeps for acknowledgements (%s);'
    ' %d messages pending',  # durable.files: FS_RESERVE
    'outbox full: the filesystem has no room for a %d-byte record (%s); %d messages pending',  # FS_RECORD
    'a %d-byte record does not fit a %d-byte flash block',  # 75 durable.flash: BLOCK_FIT
    'flash outbox full: %d pending messages and %d held ids fill %d blocks of %d bytes',  # FLASH_FULL
    'outbox full: no room to record that inbound message %d is complete',  # durable.heldlog: NO_UNHOLD
    'not an MQTT broker at %s:%d: it answered CONNECT with %r (%s)',  # 78 front: NOT_BROKER
)

# ConnectError's reason, by CONNACK return code.
CONNACK = (
    None,
    "unacceptable protocol version",
    "client identifier rejected",
    "server unavailable",
    "bad user name or password",
    "not authorized",
)


def text(code, args):
    """The reason in words; "@" in a text stands for the packet type in args[0]."""
    t = TEXT[code]
    if "@" in t:
        t = t.replace("@", NAMES[args[0]])
        args = args[1:]
    return t % args if args else t


def refused(code):
    """ConnectError's message for a CONNACK return code."""
    reason = CONNACK[code] if 0 < code < len(CONNACK) else "unknown return code"
    return "connection refused: " + reason + " (code " + str(code) + ")"

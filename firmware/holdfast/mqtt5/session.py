# Session5: MQTT 5 as every level-5 connection runs it, what a client that
# only publishes loads (a client made with level=5; a 3.1.1 client never
# does): its CONNECT, the PUBLISH header with a Message Expiry Interval and
# a Topic Alias, CONNACK obeyed, a DISCONNECT from the broker in words. The
# rest loads on first use from the modules beside it: an inbound PUBLISH
# (inbound.py), SUBACK and UNSUBACK (subscriptions.py), properties written
# (properties.py), a message stored with its properties or sent again
# (outbox.py), a refusal or the broker's DISCONNECT in words (refused.py).
# They build on wire.py, never on this module, so importing them here closes
# no circle.
from .. import codec
from ..codec import Reader, _length_size, put_length, _u16
from .. import errors  # errors.X where raised or caught: the class loads with the first failure
from ..session import Session
from . import wire

# Packet types (codec.py's), and session.py's numbers Session5 works with:
# private, so the compiler folds them and the module holds no name for them.
_CONNACK = const(2)
_PUBLISH = const(3)
_SUBACK = const(9)
_UNSUBACK = const(11)
_DISCONNECT = const(14)
_ACK_ROOM = const(16)  # session.ACK_ROOM
_CONNECTING = const(2)  # session.CONNECTING
_CONNECTED = const(3)  # session.CONNECTED

# The property identifiers this module reads or writes (properties.py names them all).
_MESSAGE_EXPIRY = const(0x02)
_SESSION_EXPIRY = const(0x11)
_ASSIGNED_CLIENT_ID = const(0x12)
_SERVER_KEEP_ALIVE = const(0x13)
_RECEIVE_MAXIMUM = const(0x21)
_TOPIC_ALIAS_MAXIMUM = const(0x22)
_TOPIC_ALIAS = const(0x23)
_MAXIMUM_QOS = const(0x24)
_RETAIN_AVAILABLE = const(0x25)
_MAXIMUM_PACKET_SIZE = const(0x27)

_MALFORMED = const(0x81)

# Error reasons, by number; the words are in reasons.py.
_E_LIMIT = const(28)
_E_REFUSED = const(29)
_E_SERVER_GONE = const(30)

# The outbound topic aliases the client sets at most, whatever the broker takes.
_OUT = const(8)
_MORE = const(9)  # bytes MQTT 5 adds to a PUBLISH of ours at most: property length, expiry, alias


# -- packets out --------------------------------------------------------------

def out(s, topic, payload, qos, retain, pid, deadline):
    """Session s's message as an MQTT 5 PUBLISH into s.tx at s.tx_end; returns
    the offset after it. Its properties: what is left of its expiry
    (deadline: wall-clock seconds, 0: none), a Topic Alias while the broker
    takes them (the first PUBLISH of a topic on a link sets one, the next
    ones send the alias alone, with an empty topic), then s.props (s.plen
    bytes, checked by outbox.publish). A message stored with its properties
    (s.stored) goes out from its outbox record, as outbox.resend() writes it."""
    if s.stored:
        import holdfast.mqtt5.outbox as m
        m.resend(s, s.store.next(s.cursor), False)  # the one just stored: Session.publish sends it at once
        return s.tx_end
    b = s.tx
    off = s.tx_end
    topic = codec.to_bytes(topic)
    payload = codec.to_bytes(payload)
    n = len(payload)
    expiry = wire.left(deadline)
    e = 0 if expiry is None else 5
    a = 0
    new = True
    t = s.topics
    for k in range(s.alias_max):
        x = t[k]
        if x is None:  # a free alias: this topic's from now on, on this link
            t[k] = topic if type(topic) is bytes else bytes(topic)
            a = k + 1
            break
        if x == topic:
            a = k + 1
            new = False
            break
    if a:
        e += 3
    p = s.props
    if p:
        e += s.plen
    m = _length_size(e) + e
    if new:  # the payload goes in after m bytes left for the properties
        i = codec.publish(b, topic, payload, qos, retain, False, pid, off, m) - n - m
    else:  # codec's header, without the topic it checked when the alias was set
        codec._check_qos(qos)
        b[off] = 0x30 | qos << 1 | (1 if retain else 0)
        i = put_length(b, off + 1, (4 if qos else 2) + m + n)
        b[i] = b[i + 1] = 0
        i += 2
        if qos:
            i = _u16(b, i, pid)
        b[i + m:i + m + n] = payload
    i = put_length(b, i, e)
    if expiry is not None:
        b[i] = _MESSAGE_EXPIRY
        i = wire._u32(b, i + 1, expiry)
    if a:
        b[i] = _TOPIC_ALIAS
        i = _u16(b, i + 1, a)
    if p:
        import holdfast.mqtt5.properties as pr
        i = pr.write(b, i, p)
    return i + n


def start(s):
    """Session s's CONNECT at level 5: it can hold as many inbound QoS 1/2
    messages as its table of held ids, take packets as large as its buffer
    and ALIASES topic aliases. A session that is not clean lasts until the
    broker is told otherwise (s.expiry; as in 3.1.1, where MQTT 5 would end
    it with the link). codec.py writes the 3.1.1 CONNECT a little further on
    (its checks are the same), then its parts move into place with the
    properties between them. A password needs a user name, as in 3.1.1."""
    b = s.tx
    w = s.will
    p = 0 if s.clean else 5
    k = p + 24  # after the largest growth: the copy below only moves bytes forward
    end = codec.connect(b, s.client_id, True, s.keepalive, w, s.user, s.password, 4, k)
    j = k + 1
    while b[j] & 0x80:
        j += 1
    j += 1  # the 3.1.1 variable header
    rl = end - j + 12 + p + (1 if w else 0)
    b[0] = 0x10
    i = put_length(b, 1, rl)
    _move(b, i, j, 10)
    b[i + 6] = 5
    if not s.clean:
        b[i + 7] &= 0xFD
    i += 10
    j += 10
    b[i] = 11 + p
    i += 1
    if p:
        b[i] = _SESSION_EXPIRY
        i = wire._u32(b, i + 1, s.expiry)
    b[i] = _RECEIVE_MAXIMUM
    i = _u16(b, i + 1, min(s.store.held_max, 65535))
    b[i] = _TOPIC_ALIAS_MAXIMUM
    i = _u16(b, i + 1, wire.ALIASES)
    b[i] = _MAXIMUM_PACKET_SIZE
    i = wire._u32(b, i + 1, getattr(s, "rx_size", s.size))  # Session._rx_full()
    n = 2 + wire._n16(b, j)
    _move(b, i, j, n)
    i += n
    j += n
    if w:
        b[i] = 0  # no will properties
        i += 1
    _move(b, i, j, end - j)
    return i + end - j


def _move(b, i, j, n):
    # b[j:j + n] to b[i:], i <= j: in place, without a slice copy.
    for x in range(n):
        b[i + x] = b[j + x]


# -- packets in ---------------------------------------------------------------

def parse(r, type, flags, i, end):
    """Reader r's packet of type at r.buf[i:end] (the body, after the fixed
    header): its fields into r. Without properties r.p0 == r.p1. An inbound
    PUBLISH's topic is as it came (empty when the broker sent only a Topic
    Alias: Reader5 puts the topic back)."""
    r.p0 = r.p1 = r.code = 0
    if type == _PUBLISH:
        import holdfast.mqtt5.inbound as m
        m.parse(r, flags, i, end)
    elif type == _SUBACK or type == _UNSUBACK:
        import holdfast.mqtt5.subscriptions as m
        m.parse(r, type, i, end)
    else:
        wire.parse(r, type, flags, i, end)


# -- the session's part: Session5 --------------------------------------------

class Reader5(Reader):
    """codec.Reader for MQTT 5: packets decoded by parse(), and the inbound
    topic aliases of the link (inbound.alias_in: None until the first)."""

    def reset(self):  # Reader.__init__ calls it: the field is set there too
        Reader.reset(self)
        self.aliases = None

    def decode(self, type, flags, i, end):  # what Reader.next() calls at level 5
        parse(self, type, flags, i, end)
        if type == _PUBLISH:
            import holdfast.mqtt5.inbound as m
            m.alias_in(self)


class Session5(Session):
    """session.Session speaking MQTT 5 (the shell makes one for level=5): what
    CONNACK says is obeyed, refused messages are REJECTED events, a
    DISCONNECT from the broker says why. expiry: the Session Expiry
    Interval a session that is not clean asks for (never ends, as in 3.1.1:
    MQTT 5 would end it with the link)."""

    props = None  # the properties of the message publish() is given (the shells set them)

    def __init__(self, *args):
        Session.__init__(self, *args)
        import holdfast.mqtt5.session as m
        self.v5 = m  # what Session's own MQTT 5 branches call: start(), out()
        # CONNACK and the acks may carry properties (a reason string, user
        # properties) up to the Maximum Packet Size CONNECT offers, size:
        # at level 5 the receive buffer holds size bytes from the start.
        self.rx = Reader5(self.size, 5)
        self.expiry = 4294967295
        # Topics sent with an alias on this link (alias k + 1: topics[k]),
        # as many as the broker's Topic Alias Maximum (alias_max) allows.
        self.topics = None
        self.alias_max = 0
        # What the last CONNACK allows: the highest QoS, retained messages.
        self.max_qos = 2
        self.retain = 1
        self.plen = 0  # bytes of props, the next message's properties (publish(props=...))
        # True while outbox.publish() hands Session.publish a QoS 1/2 message
        # stored with its property block in front of its payload: out() then
        # sends it from the outbox record, not from the caller's objects.
        self.stored = False
        self.store.five = True  # durable.log.Log.five

    def fits(self, n):
        # The broker's Maximum Packet Size, the one check of it (publish(),
        # outbox.publish(); _fill() drops a stored message over self.limit).
        Session.fits(self, n)
        if n > self.limit:
            raise ValueError(wire._words(_E_LIMIT, (n, self.limit + _MORE)))

    def publish(self, topic, payload, qos, retain, now, deadline=0, latest=False):
        payload = codec.to_bytes(payload)  # sized as its UTF-8 bytes
        if qos > self.max_qos or retain and not self.retain or self.props:
            import holdfast.mqtt5.outbox as m
            return m.publish(self, topic, payload, qos, retain, now, deadline, latest)
        n = codec.publish_size(topic, len(payload), qos) + 1  # the property length
        if n > self.limit:
            self.fits(n)
        return Session.publish(self, topic, payload, qos, retain, now, deadline, latest)

    def _resend(self, key, dup):
        import holdfast.mqtt5.outbox as m
        m.resend(self, key, dup)

    def _fail(self, e):
        # Bytes that break MQTT 5 (a V5Error: its reason code; the 3.1.1
        # reader's errors: malformed packet): a DISCONNECT saying so, which
        # the shell writes before it closes the link if the socket takes it
        # at once. Here, not behind an import: it runs on failure.
        if (not isinstance(e, (OSError, errors.ConnectError)) and _CONNECTING <= self.state <= _CONNECTED
                and self.make_room() >= 3):
            b = self.tx
            i = self.tx_end
            b[i] = 0xE0
            b[i + 1] = 1
            b[i + 2] = getattr(e, "code", _MALFORMED)
            self.tx_end = i + 3
        Session._fail(self, e)

    def _handle(self, t, now):
        r = self.rx
        if t == _CONNACK and self.state == _CONNECTING:
            # What the broker's CONNACK says: a refusal in words; how many QoS
            # 1/2 messages it takes at once (the window), the keepalive it
            # wants, the client id it gave, the largest packet it takes.
            # Session's _handle then reconciles the ledgers.
            b = r.buf
            p0 = r.p0
            p1 = r.p1
            if r.code:
                import holdfast.mqtt5.refused as m
                raise errors.ConnectError(r.code, m.said(_E_REFUSED, r))
            self.window = min(len(self._state), wire.get(b, _RECEIVE_MAXIMUM, 65535, p0, p1))
            ka = wire.get(b, _SERVER_KEEP_ALIVE, -1, p0, p1)
            if ka >= 0:
                self.keepalive = ka  # and how long a PINGREQ may go unanswered
            cid = wire.get(b, _ASSIGNED_CLIENT_ID, None, p0, p1)
            if cid:
                self.client_id = cid
            self.max_qos = wire.get(b, _MAXIMUM_QOS, 2, p0, p1)
            self.retain = wire.get(b, _RETAIN_AVAILABLE, 1, p0, p1)
            self.alias_max = min(wire.get(b, _TOPIC_ALIAS_MAXIMUM, 0, p0, p1), _OUT)
            if self.alias_max:  # a new link: the broker knows none of our aliases
                if self.topics is None:
                    self.topics = [None] * _OUT
                for k in range(_OUT):
                    self.topics[k] = None
            # A PUBLISH of ours grows by _MORE bytes at most: the limit is
            # what leaves room for them. A Maximum Packet Size of 9 or less
            # leaves none: every message is refused (fits(), _fill()).
            self.limit = self.size - _ACK_ROOM
            most = wire.get(b, _MAXIMUM_PACKET_SIZE, 0, p0, p1)
            if most and most - _MORE < self.limit:
                self.limit = most - _MORE
        if t == _DISCONNECT:
            import holdfast.mqtt5.refused as m
            self._fail(errors.LinkDown(m.said(_E_SERVER_GONE, r, _DISCONNECT)))
        return Session._handle(self, t, now)

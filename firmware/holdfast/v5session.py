# The session's MQTT 5 side: Session5, the session.Session that Front makes
# for level=5, and Reader5, its codec.Reader. What CONNECT offers, what
# CONNACK says is obeyed, refused messages become events, a DISCONNECT from
# the broker says why, inbound topic aliases are resolved. The wire format
# is v5.py's. Loaded only by a client made with level=5.
from .compat import const, wall
from .codec import PUBLISH, PUBREC, DISCONNECT, Reader, _length_size, put_length
from .errors import MQTTError, ConnectError, LinkDown
from .session import Session, ACK_ROOM, CONNECTING, REJECTED
from .v5 import (PROTOCOL_ERROR, MESSAGE_EXPIRY, SESSION_EXPIRY, ASSIGNED_CLIENT_ID, SERVER_KEEP_ALIVE,
                 REASON_STRING, RECEIVE_MAXIMUM, TOPIC_ALIAS_MAXIMUM, TOPIC_ALIAS, MAXIMUM_PACKET_SIZE,
                 parse, find, get, words, connect, publish, publish_size, _words, _fail, _n16, _u32)
from .v5 import subscribe, unsubscribe  # noqa: F401 - what subs.py calls through Session.v5

_ALIASES = const(8)  # Topic Alias Maximum we offer: inbound aliases kept per link
_WAIT_PUBREC = const(2)  # session.py's slot state
_MORE = const(6)  # bytes MQTT 5 adds to a PUBLISH of ours at most: property length, expiry
_E_ALIAS_RANGE = const(26)
_E_ALIAS_UNKNOWN = const(27)
_E_LIMIT = const(28)
_E_REFUSED = const(29)
_E_SERVER_GONE = const(30)
_E_REJECTED = const(31)


class Reader5(Reader):
    """codec.Reader for MQTT 5: packets decoded by parse(), and the inbound
    topic aliases of the link (a PUBLISH that sets one is remembered, one
    that sends only the alias gets its topic back)."""

    def reset(self):
        Reader.reset(self)
        self.aliases = [None] * _ALIASES

    def _parse(self, type, flags, i, end):
        parse(self, type, flags, i, end)
        if type == PUBLISH:
            at = find(self.buf, self.p0, self.p1, TOPIC_ALIAS)
            if at:
                a = _n16(self.buf, at)
                if a > _ALIASES:
                    _fail(0x94, _E_ALIAS_RANGE, a, _ALIASES)
                if len(self.topic):
                    self.aliases[a - 1] = bytes(self.topic)
                elif self.aliases[a - 1] is None:
                    _fail(PROTOCOL_ERROR, _E_ALIAS_UNKNOWN, a)
                else:
                    self.topic = self.aliases[a - 1]


class Session5(Session):
    """session.Session speaking MQTT 5 (Front makes one for level=5): what
    CONNACK says is obeyed, refused messages are REJECTED events, a
    DISCONNECT from the broker says why. expiry: the Session Expiry
    Interval a session that is not clean asks for (never ends, as in 3.1.1:
    MQTT 5 would end it with the link)."""

    def __init__(self, *args):
        Session.__init__(self, *args)
        from . import v5session
        self.v5 = v5session  # what Session's own MQTT 5 branches call
        self.rx = Reader5(len(self.rx.buf), 5)
        self.limit = self.size - ACK_ROOM  # the largest packet that may go out
        self.expiry = 4294967295

    def fits(self, n):
        Session.fits(self, n)
        if n > self.limit:
            raise ValueError(_words(_E_LIMIT, (n, self.limit + _MORE)))

    def publish(self, topic, payload, qos, retain, now, deadline=0, latest=False):
        n = publish_size(topic, len(payload), qos)
        if n > self.limit:
            self.fits(n)
        return Session.publish(self, topic, payload, qos, retain, now, deadline, latest)

    def _connack(self, r, now):
        # What the broker's CONNACK says: a refusal in words; how many QoS
        # 1/2 messages it takes at once (the window), the keepalive it
        # wants, the client id it gave, the largest packet it takes.
        if self.state == CONNECTING:
            b = r.buf
            p0 = r.p0
            p1 = r.p1
            if r.code:
                raise ConnectError(r.code, _words(_E_REFUSED, (words(r.code), _said(r))))
            self.window = min(len(self._state), get(b, RECEIVE_MAXIMUM, 65535, p0, p1))
            ka = get(b, SERVER_KEEP_ALIVE, -1, p0, p1)
            if ka >= 0:
                self.keepalive = ka
                self.ping_timeout_ms = ka * 1000 or 30000
            cid = get(b, ASSIGNED_CLIENT_ID, None, p0, p1)
            if cid:
                self.client_id = cid
            self.limit = self.size - ACK_ROOM
            most = get(b, MAXIMUM_PACKET_SIZE, 0, p0, p1) - _MORE
            if 0 < most < self.limit:
                self.limit = most
        Session._connack(self, r, now)

    def _resend(self, key, dup):
        # Outbox message key as an MQTT 5 PUBLISH, with what is left of its
        # expiry. The outbox keeps the 3.1.1 packet (what a 3.1.1 client
        # stores): it is read in a little after t1, then its header is
        # written again in front of the payload, which stays where it is.
        st = self.store
        b = self.tx
        size = st.size(key)
        n = 1  # the stored packet's remaining length takes n bytes
        while _length_size(size - 1 - n) != n:
            n += 1
        rl = size - 1 - n
        expiry = left(st.deadline(key))
        e = 0 if expiry is None else 5
        m = _length_size(rl + 1 + e)
        start = self.t1
        k = start + m - n + 1 + e
        if st.get(key, b, k) == k:
            return  # lost by the store
        b[start] = b[k] | (8 if dup else 0)
        i = put_length(b, start + 1, rl + 1 + e)
        j = k + 1 + n
        for x in range(2 + _n16(b, j) + (2 if b[k] & 6 else 0)):  # topic and pid; i < j: forward is safe
            b[i] = b[j]
            i += 1
            j += 1
        b[i] = e
        if e:
            b[i + 1] = MESSAGE_EXPIRY
            _u32(b, i + 2, expiry)
        self.t1 = start + 1 + m + rl + 1 + e

    def _done(self, i, now):
        # A reason code of 0x80 or more ends the flow undelivered.
        e = Session._done(self, i, now)
        return REJECTED if self.rx.code >= 0x80 else e

    def _handle(self, t, now):
        r = self.rx
        if t == PUBREC and r.code >= 0x80:
            i = self._slot(r.pid, _WAIT_PUBREC)
            if i >= 0:
                return self._done(i, now)  # refused: no PUBREL
        if t == DISCONNECT:
            self._fail(LinkDown(_words(_E_SERVER_GONE, (words(r.code, DISCONNECT), _said(r)))))
        return Session._handle(self, t, now)


def left(deadline):
    """A deadline (wall-clock seconds, 0: none) as the Message Expiry
    Interval that is left of it (None: none)."""
    return max(0, deadline - wall()) if deadline else None


def start(s):
    """Session s's CONNECT: it can hold as many inbound QoS 1/2 messages as
    its table of held ids, and take packets as large as its buffer. A
    session that is not clean lasts until the broker is told otherwise (as
    in 3.1.1: MQTT 5 would end it with the link)."""
    props = ((RECEIVE_MAXIMUM, min(len(s.store._hpid), 65535)), (TOPIC_ALIAS_MAXIMUM, _ALIASES),
             (MAXIMUM_PACKET_SIZE, s.size))
    if not s.clean:  # s.expiry: seconds the broker keeps it after the link
        props = ((SESSION_EXPIRY, s.expiry),) + props
    w = s.will
    return connect(s.tx, s.client_id, s.clean, s.keepalive, w[0] if w else None, w[1] if w else b"",
                   w[2] if w else 0, w[3] if w else False, s.user, s.password, props)


def _said(r):
    # The Reason String of reader r's packet, if it has one.
    why = get(r.buf, REASON_STRING, None, r.p0, r.p1)
    return ": " + why.decode() if why else ""


def rejected(f):
    """Front f's QoS 1/2 message the broker refused (a PUBACK or PUBREC
    with a reason code of 0x80 or more, or PUBCOMP's 0x92): counted in
    f.rejected, said in f.last_error, and handed to f.on_rejected(pid,
    code) if the application set one."""
    s = f.s
    r = s.rx
    f.rejected = getattr(f, "rejected", 0) + 1
    f.last_error = MQTTError(_words(_E_REJECTED, (s.done_pid, words(r.code), _said(r))))
    cb = getattr(f, "on_rejected", None)
    if cb:
        cb(s.done_pid, r.code)

# The MQTT session as a sans-I/O state machine: the I/O shell puts received
# bytes into self.rx, takes bytes to send from self.tx[self.t0:self.t1], and
# passes the current tick (ms) in. The engine never touches a socket or a clock.
from array import array
from .compat import ticks_diff
from . import codec as c
from .errors import MQTTProtocolError, PacketTooLarge, ConnectError, LinkDown, OutboxFull
from .store import MemoryStore

# States of an inflight window slot.
_FREE = 0
_WAIT_PUBACK = 1
_WAIT_PUBREC = 2
_WAIT_PUBCOMP = 3

_ACK_ROOM = 16  # tx bytes kept free so an acknowledgement can always be queued


def _name(t):
    from .reasons import NAMES
    return NAMES[t]


def match(f, t):
    """True if topic t matches topic filter f (both bytes-like, no allocation)."""
    nf = len(f)
    nt = len(t)
    if nt and t[0] == 36 and nf and (f[0] == 43 or f[0] == 35):
        return False  # '$' topics are not matched by a leading wildcard
    i = j = 0
    while i < nf:
        ch = f[i]
        if ch == 35:
            return True
        if ch == 43:
            while j < nt and t[j] != 47:
                j += 1
            i += 1
            continue
        if j >= nt:  # "a/#" also matches its parent "a"
            return i + 2 == nf and ch == 47 and f[i + 1] == 35
        if ch != t[j]:
            return False
        i += 1
        j += 1
    return j == nt


class Session:
    """One client's MQTT session.

    Callbacks: on_message(topic, msg) for every inbound message (the
    umqtt.simple signature), per-filter handlers(topic, msg, retained), and
    on_delivered(pid) when an outgoing QoS 1/2 message is acknowledged. During
    a message callback self.retained, self.qos and self.dup describe it.

    Messages the outbox may drop (drop_oldest when it is full, a passed
    deadline, a newer value with latest=True) are those not yet sent on this
    connection, except a QoS 2 message that reached PUBREC or that the broker
    may hold from an earlier connection: its id could be reused, and the
    broker would take the new message for a duplicate. Counted in overflowed,
    expired and replaced.
    """

    def __init__(self, client_id, clean=True, keepalive=0, level=4, size=1024, window=16,
                 store=None, retry_ms=0, ping_timeout_ms=0, views=False, drop_oldest=False):
        self.client_id = client_id
        self.clean = clean
        self.keepalive = keepalive
        self.level = level
        self.rx = c.Reader(size, level)
        self.tx = bytearray(size)
        self.t0 = 0
        self.t1 = 0
        self.offered = 0  # bytes a blocked write must be offered again (net.flush)
        self.store = store if store is not None else MemoryStore()
        self.window = window
        self._key = array("i", [-1] * window)
        self._pid = array("H", [0] * window)
        self._state = bytearray(window)
        self._sent = array("i", [0] * window)
        self.inflight = 0
        self.cursor = -1  # highest outbox key sent on this connection
        self.dup_upto = self.store.last()  # keys up to here went out before: re-send with DUP
        self.drop_oldest = drop_oldest  # when the outbox is full; else OutboxFull
        self.next_expiry = 1 if len(self.store) else 0  # earliest deadline pending, 0: none
        self.overflowed = 0
        self.expired = 0
        self.replaced = 0
        self.next_pid = 1
        self.retry_ms = retry_ms
        # How long a PINGREQ may go unanswered; with keepalive off, ping() still works.
        self.ping_timeout_ms = ping_timeout_ms or keepalive * 1000 or 30000
        self.views = views
        self.will = None
        self.user = None
        self.password = None
        self.on_message = None
        self.on_delivered = None
        self.subs = []  # [filter bytes, qos, handler or None]
        self.connected = False
        self.session_present = False
        self.last_tx = 0
        self.last_rx = 0
        self.ping_at = -1
        self.ack_type = 0  # last SUBACK / UNSUBACK seen, for the shell's waits
        self.ack_pid = 0
        self.granted = b""
        self.sub_pid = 0  # SUBSCRIBE/UNSUBSCRIBE awaiting its ack
        self.dropped = 0  # inbound packets too large for the receive buffer
        self.retained = False
        self.qos = 0
        self.dup = False

    # -- output buffer -----------------------------------------------------

    def room(self):
        if self.t0 == self.t1:
            self.t0 = self.t1 = 0
        elif self.t0 and len(self.tx) - self.t1 < _ACK_ROOM * 4:
            self.t1 = c.shift(self.tx, self.t0, self.t1)
            self.t0 = 0
        return len(self.tx) - self.t1

    def sent(self, n, now):
        """The shell wrote n bytes of tx[t0:t1]."""
        self.t0 += n
        if self.t0 == self.t1:
            self.t0 = self.t1 = 0
        self.last_tx = now

    def _ack(self, type, pid):
        self.room()
        self.t1 = c.ack(self.tx, type, pid, False, self.t1)

    # -- connection ----------------------------------------------------------

    def start(self, now):
        """A new network connection is open: queue CONNECT."""
        self.lost()
        self.last_rx = self.last_tx = now
        w = self.will
        self.t1 = c.connect(self.tx, self.client_id, self.clean, self.keepalive,
                            w[0] if w else None, w[1] if w else b"", w[2] if w else 0,
                            w[3] if w else False, self.user, self.password, self.level)

    def lost(self):
        """The connection is gone: keep the outbox, forget the wire state."""
        if self.cursor > self.dup_upto:
            self.dup_upto = self.cursor
        self.next_expiry = 1  # what was in flight may expire now: look again
        self.connected = False
        self.cursor = -1
        self.inflight = 0
        for i in range(self.window):
            self._state[i] = _FREE
        self.rx.start = self.rx.end = self.rx.skip = 0
        self.t0 = self.t1 = 0
        self.offered = 0
        self.ping_at = -1
        self.sub_pid = 0

    def disconnect(self):
        self.room()
        self.t1 = c.empty(self.tx, c.DISCONNECT, self.t1)
        self.connected = False

    def ping(self, now):
        self.room()
        self.t1 = c.empty(self.tx, c.PINGREQ, self.t1)
        if self.ping_at < 0:
            self.ping_at = now

    # -- outgoing messages -----------------------------------------------------

    def _new_pid(self):
        while True:
            p = self.next_pid
            self.next_pid = p % 65535 + 1
            if p != self.sub_pid and not self.store.uses(p):
                return p

    def publish(self, topic, payload, qos, retain, now, deadline=0, latest=False):
        """Queue a message. QoS 0 goes straight to tx (False if tx has no room);
        QoS 1/2 goes to the outbox first and returns its message id.
        deadline: wall-clock seconds after which it is dropped unsent (0: never).
        latest: drop the unsent messages of the same topic first."""
        if not qos:
            if self.room() - _ACK_ROOM < c.publish_size(topic, len(payload), 0):
                return False
            self.t1 = c.publish(self.tx, topic, payload, 0, retain, False, 0, self.t1)
            return True
        n = c.publish_size(topic, len(payload), qos)
        if n > len(self.tx) - _ACK_ROOM:
            raise ValueError("a %d-byte PUBLISH does not fit the %d-byte send buffer" % (n, len(self.tx)))
        st = self.store
        if latest:
            k = st.find_topic(topic, self.cursor)
            while k >= 0:
                if self._droppable(k):
                    st.done(k)
                    self.replaced += 1
                k = st.find_topic(topic, k)
        pid = self._new_pid()
        while True:
            try:
                key = st.put(topic, payload, qos, retain, pid, deadline)
                break
            except OutboxFull:
                if not (self.drop_oldest and self._drop_oldest()):
                    raise
        if deadline and (not self.next_expiry or deadline < self.next_expiry):
            self.next_expiry = deadline
        if (self.connected and self.cursor == key - 1 and self.inflight < self.window
                and self.room() - _ACK_ROOM >= n):
            # The common case: window open, nothing queued before it. Encode
            # from the caller's objects rather than copying out of the outbox.
            self.t1 = c.publish(self.tx, topic, payload, qos, retain, False, pid, self.t1)
            self._track(key, pid, _WAIT_PUBACK if qos == 1 else _WAIT_PUBREC, now)
        return pid

    def _droppable(self, k):
        st = self.store
        return k > self.cursor and not st.released(k) and not (st.qos(k) == 2 and k <= self.dup_upto)

    def _drop_oldest(self):
        k = self.store.next(self.cursor)
        while k >= 0 and not self._droppable(k):
            k = self.store.next(k)
        if k < 0:
            return False
        self.store.done(k)
        self.overflowed += 1
        return True

    def expire(self, wall):
        """Drops the messages whose deadline has passed (wall: seconds, the
        clock the deadlines were set by). Cheap when none is due."""
        if not self.next_expiry or wall < self.next_expiry:
            return
        st = self.store
        soon = 0
        k = st.next(-1)
        while k >= 0:
            d = st.deadline(k)
            if d and d <= wall and self._droppable(k):
                st.done(k)
                self.expired += 1
            elif d > wall and (not soon or d < soon):
                soon = d
            k = st.next(k)
        self.next_expiry = soon

    def _track(self, key, pid, state, now):
        for i in range(self.window):
            if not self._state[i]:
                self._key[i] = key
                self._pid[i] = pid
                self._state[i] = state
                self._sent[i] = now
                self.inflight += 1
                self.cursor = key
                return

    def _fill(self, now):
        # Put queued outbox messages on the wire while the window has room.
        st = self.store
        while self.connected and self.inflight < self.window:
            k = st.next(self.cursor)
            if k < 0:
                return
            pid = st.pid(k)
            if st.released(k):
                if self.room() < _ACK_ROOM:
                    return
                self._ack(c.PUBREL, pid)
                self._track(k, pid, _WAIT_PUBCOMP, now)
            else:
                if self.room() - _ACK_ROOM < st.size(k):
                    return
                self._resend(k, k <= self.dup_upto)
                self._track(k, pid, _WAIT_PUBACK if st.qos(k) == 1 else _WAIT_PUBREC, now)

    def _resend(self, key, dup):
        start = self.t1
        self.t1 = self.store.get(key, self.tx, start)
        if dup and self.t1 > start:
            self.tx[start] |= 8

    def _slot(self, pid, state):
        for i in range(self.window):
            if self._state[i] == state and self._pid[i] == pid:
                return i
        return -1

    def _done(self, i, now):
        self.store.done(self._key[i])
        self._state[i] = _FREE
        self.inflight -= 1
        if self.on_delivered:
            self.on_delivered(self._pid[i])
        self._fill(now)

    # -- subscriptions -----------------------------------------------------------

    def subscribe(self, filters):
        """Queue SUBSCRIBE for [(filter, qos), ...]; returns its message id."""
        self.room()
        pid = self._new_pid()
        self.t1 = c.subscribe(self.tx, pid, filters, self.t1)
        self.sub_pid = pid
        return pid

    def unsubscribe(self, topics):
        self.room()
        pid = self._new_pid()
        self.t1 = c.unsubscribe(self.tx, pid, topics, self.t1)
        self.sub_pid = pid
        return pid

    def add_sub(self, flt, qos, handler):
        for s in self.subs:
            if s[0] == flt:
                s[1] = qos
                s[2] = handler
                return
        self.subs.append([flt, qos, handler])

    def remove_sub(self, flt):
        for s in self.subs:
            if s[0] == flt:
                self.subs.remove(s)
                return

    # -- input -----------------------------------------------------------------

    def receive(self, now):
        """Handle every complete packet in self.rx; returns how many."""
        n = 0
        while self.room() >= _ACK_ROOM:
            try:
                t = self.rx.next()
            except PacketTooLarge as e:
                self._too_large(e)
                continue
            if not t:
                break
            n += 1
            self.last_rx = now
            self.ping_at = -1
            self._handle(t, now)
        return n

    def _too_large(self, e):
        # Skipped whole; acknowledge it so the broker does not re-send it forever.
        self.dropped += 1
        if e.pid:
            self._ack(c.PUBACK if e.type == c.PUBLISH else c.PUBREC, e.pid)

    def _handle(self, t, now):
        r = self.rx
        if t == c.PUBLISH:
            self._deliver(now)
        elif t == c.PUBACK:
            i = self._slot(r.pid, _WAIT_PUBACK)
            if i >= 0:
                self._done(i, now)
        elif t == c.PUBREC:
            i = self._slot(r.pid, _WAIT_PUBREC)
            if i >= 0:
                try:
                    self.store.release(self._key[i])
                except OutboxFull:
                    return  # flash full: no PUBREL yet; the broker repeats PUBREC
                self._state[i] = _WAIT_PUBCOMP
                self._sent[i] = now
            if i >= 0 or self._slot(r.pid, _WAIT_PUBCOMP) >= 0:
                self._ack(c.PUBREL, r.pid)
        elif t == c.PUBCOMP:
            i = self._slot(r.pid, _WAIT_PUBCOMP)
            if i >= 0:
                self._done(i, now)
        elif t == c.PUBREL:
            try:
                self.store.drop(r.pid)
            except OutboxFull:
                return  # flash full: no PUBCOMP yet; the broker repeats PUBREL
            self._ack(c.PUBCOMP, r.pid)
        elif t == c.SUBACK or t == c.UNSUBACK:
            if r.pid == self.sub_pid:
                self.sub_pid = 0
            self.ack_type = t
            self.ack_pid = r.pid
            self.granted = bytes(r.payload) if t == c.SUBACK else b""
        elif t == c.CONNACK:
            if self.connected:
                raise MQTTProtocolError("a second CONNACK on one connection")
            if r.code:
                raise ConnectError(r.code)
            self.connected = True
            self.session_present = r.session_present
            if self.subs and not r.session_present:
                # The broker forgot our subscriptions: restore them.
                self.subscribe([(s[0], s[1]) for s in self.subs])
            self._fill(now)
        elif t != c.PINGRESP:
            raise MQTTProtocolError("unexpected %s from the broker" % _name(t))
        if not self.connected and t != c.CONNACK:
            raise MQTTProtocolError("%s before CONNACK" % _name(t))

    def _deliver(self, now):
        r = self.rx
        f = r.flags
        qos = (f >> 1) & 3
        pid = r.pid
        if qos == 2 and self.store.held(pid):
            self._ack(c.PUBREC, pid)  # a re-sent copy of one already delivered
            return
        self.retained = bool(f & 1)
        self.qos = qos
        self.dup = bool(f & 8)
        topic = r.topic
        msg = r.payload
        if not self.views:
            topic = bytes(topic)
            msg = bytes(msg)
        for s in self.subs:
            if s[2] and match(s[0], topic):
                s[2](topic, msg, self.retained)
        if self.on_message:
            self.on_message(topic, msg)
        if qos == 1:
            self._ack(c.PUBACK, pid)
        elif qos == 2:
            try:
                self.store.hold(pid)
            except OutboxFull:
                return  # not held, so no PUBREC: the broker re-sends (may deliver twice)
            self._ack(c.PUBREC, pid)

    # -- timers ----------------------------------------------------------------

    def tick(self, now):
        """Run the timers: keepalive, dead-link detection, optional retry.
        Raises LinkDown when the broker stopped answering."""
        if not self.connected:
            return
        if self.ping_at >= 0 and ticks_diff(now, self.ping_at) >= self.ping_timeout_ms:
            raise LinkDown("no answer from the broker for %d ms after PINGREQ" % ticks_diff(now, self.ping_at))
        if (self.keepalive and self.ping_at < 0 and ticks_diff(now, self.last_tx) >= self.keepalive * 1000
                and self.room() >= _ACK_ROOM):
            self.ping(now)
        if self.retry_ms and self.inflight:
            for i in range(self.window):
                st = self._state[i]
                if st and ticks_diff(now, self._sent[i]) >= self.retry_ms:
                    if self.room() - _ACK_ROOM < self.store.size(self._key[i]):
                        break
                    if st == _WAIT_PUBCOMP:
                        self._ack(c.PUBREL, self._pid[i])
                    else:
                        self._resend(self._key[i], True)
                    self._sent[i] = now
        self._fill(now)

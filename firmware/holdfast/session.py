# The MQTT session as a sans-I/O state machine: the I/O shell puts received
# bytes into self.rx, takes bytes to send from self.tx[self.t0:self.t1], and
# passes the current tick (ms) in. The engine never touches a socket or a
# clock, and never calls application code: receive() returns what happened
# and the shell hands it on once the engine's state is consistent.
# The subscribe side (subs.py), inbound messages (inbound.py) and the drop
# policies (policy.py) load on first use.
from array import array
from .compat import ticks_diff, const
from . import codec as c
from .errors import MQTTProtocolError, PacketTooLarge, ConnectError, LinkDown, OutboxFull
from .store import MemoryStore

# States of an inflight window slot.
_FREE = const(0)
_WAIT_PUBACK = const(1)
_WAIT_PUBREC = const(2)
_WAIT_PUBCOMP = const(3)

_ACK_ROOM = const(16)  # tx bytes kept free so an acknowledgement can always be queued

# What receive() returns.
MESSAGE = const(1)  # an inbound message: topic, msg, qos, retained, dup; then handled()
DELIVERED = const(2)  # an outgoing QoS 1/2 message acknowledged: done_pid
REFUSED = const(3)  # the broker refused a filter while restoring: subs.refused

# Error reasons (reasons.py has the words).
_E_CLOSED = const(38)
_E_PID_SET = const(39)
_E_TX_FIT = const(40)
_E_EARLY = const(41)
_E_UNEXPECTED = const(42)
_E_CONNACK2 = const(43)
_E_NO_PINGRESP = const(44)


class Session:
    """One client's MQTT session.

    receive() returns MESSAGE, DELIVERED or REFUSED, one event at a time;
    the shell hands each to the application and, for MESSAGE, calls
    handled() afterwards, which queues the acknowledgement. Until then the
    message's views (views=True) stay valid: nothing else is read.

    After a protocol error, a refused connection or the end of the stream
    (eof()), the session stays in error (self.error, raised again by
    receive()) and is not connected until start() begins a new link.

    Messages the outbox may drop (drop_oldest when it is full, a passed
    deadline, a newer value with latest=True) are those policy.droppable()
    allows; counted in overflowed, expired and replaced.
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
        # Earliest deadline pending (0: none). What a reopened store holds is
        # looked at once; deadlines set since are tracked as they come.
        self.next_expiry = 1 if len(self.store) else 0
        self._deadlines = self.next_expiry  # some message had a deadline: look again after a drop
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
        self.subs = None  # subs.Subs, from the first add_sub()
        self.connected = False
        self.session_present = False
        self.error = None  # why the current link is unusable (sticky until start())
        self.last_tx = 0
        self.last_rx = 0
        self.ping_at = -1
        self.packets = 0  # packets received
        self.ack_type = 0  # last SUBACK / UNSUBACK seen, for the shell's waits
        self.ack_pid = 0
        self.granted = b""
        self.sub_pid = 0  # SUBSCRIBE/UNSUBSCRIBE awaiting its ack
        self.dropped = 0  # inbound packets too large for the receive buffer
        # The message receive() returned, until handled().
        self.topic = self.msg = None
        self.retained = False
        self.qos = 0
        self.dup = False
        self._mpid = 0
        self._unacked = False
        self.done_pid = 0  # the message DELIVERED reports

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
        self.error = None
        self.last_rx = self.last_tx = now
        w = self.will
        self.t1 = c.connect(self.tx, self.client_id, self.clean, self.keepalive,
                            w[0] if w else None, w[1] if w else b"", w[2] if w else 0,
                            w[3] if w else False, self.user, self.password, self.level)

    def lost(self):
        """The connection is gone: keep the outbox, forget the wire state."""
        if self.cursor > self.dup_upto:
            self.dup_upto = self.cursor
        if self._deadlines:
            self.next_expiry = 1  # what was in flight may expire now: look again
        self.connected = False
        self.cursor = -1
        self.inflight = 0
        for i in range(self.window):
            self._state[i] = _FREE
        self.rx.reset()
        self.t0 = self.t1 = 0
        self.offered = 0
        self.ping_at = -1
        self.sub_pid = 0
        self._unacked = False
        if self.subs:
            self.subs.restart()

    def eof(self):
        """The peer closed the stream: the link is over (LinkDown, sticky)."""
        self._fail(LinkDown(c._why(_E_CLOSED)))

    def _fail(self, e):
        self.error = e
        self.connected = False
        raise e

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

    def set_next_pid(self, pid):
        """The id the next QoS 1/2 message or (UN)SUBSCRIBE tries first, 1..65535
        (ids still in use are skipped). For tests of id wrap-around."""
        if not 0 < pid < 65536:
            raise ValueError(c._why(_E_PID_SET, pid))
        self.next_pid = pid

    def new_pid(self):
        while True:
            p = self.next_pid
            self.next_pid = p % 65535 + 1
            if p != self.sub_pid and not self.store.uses(p) and not (self.subs and self.subs.uses(p)):
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
            raise ValueError(c._why(_E_TX_FIT, n, len(self.tx)))
        st = self.store
        if latest:
            from .policy import replace
            replace(self, topic)
        pid = self.new_pid()
        prev = st.last()  # keys grow but need not be consecutive
        while True:
            try:
                key = st.put(topic, payload, qos, retain, pid, deadline)
                break
            except OutboxFull:
                if not self.drop_oldest:
                    raise
                from .policy import drop_oldest
                if not drop_oldest(self):
                    raise
        if deadline:
            self._deadlines = 1
            if not self.next_expiry or deadline < self.next_expiry:
                self.next_expiry = deadline
        if (self.connected and self.cursor == prev and self.inflight < self.window
                and self.room() - _ACK_ROOM >= n):
            # The common case: window open, nothing queued before it. Encode
            # from the caller's objects rather than copying out of the outbox.
            self.t1 = c.publish(self.tx, topic, payload, qos, retain, False, pid, self.t1)
            self._track(key, pid, _WAIT_PUBACK if qos == 1 else _WAIT_PUBREC, now)
        return pid

    def expire(self, wall):
        """Drops the messages whose deadline has passed (wall: seconds, the
        clock the deadlines were set by). Cheap when none is due."""
        if self.next_expiry and wall >= self.next_expiry:
            from .policy import expire
            expire(self, wall)
            if self.next_expiry:
                self._deadlines = 1

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
        # Put queued outbox messages on the wire while the window has room,
        # after the subscriptions being restored.
        if self.subs and self.subs.todo >= 0:
            self.subs.restore(self)
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
        self.done_pid = self._pid[i]
        self._fill(now)
        return DELIVERED

    # -- subscriptions -----------------------------------------------------------

    def subscribe(self, filters):
        """Queue SUBSCRIBE for [(filter, qos), ...]; returns its message id.
        ValueError if a filter could not be restored alone in the send buffer."""
        from .subs import subscribe
        return subscribe(self, filters)

    def unsubscribe(self, topics):
        from .subs import unsubscribe
        return unsubscribe(self, topics)

    def add_sub(self, flt, qos, handler):
        """Registers a filter the broker granted: restored on a new session,
        handler(topic, msg, retained) for the messages it matches."""
        if self.subs is None:
            from .subs import Subs
            self.subs = Subs()
        self.subs.add(flt, qos, handler)

    def remove_sub(self, flt):
        if self.subs:
            self.subs.remove(flt)

    # -- input -----------------------------------------------------------------

    def receive(self, now):
        """Handles the packets in self.rx up to the next event for the
        application and returns it (MESSAGE, DELIVERED, REFUSED), or 0 once
        nothing complete is left (or tx has no room for acknowledgements)."""
        if self.error:
            raise self.error
        while self.room() >= _ACK_ROOM:
            try:
                t = self.rx.next()
                if not t:
                    return 0
                self.packets += 1
                self.last_rx = now
                self.ping_at = -1
                if not self.connected and t != c.CONNACK:
                    raise MQTTProtocolError(c._why(_E_EARLY, t))
                ev = self._handle(t, now)
            except PacketTooLarge as e:
                c.inbound().too_large(self, e)
                continue
            except (MQTTProtocolError, ConnectError) as e:
                self._fail(e)
            if ev:
                return ev
        return 0

    def _handle(self, t, now):
        r = self.rx
        if t == c.PUBLISH:
            return MESSAGE if c.inbound().deliver(self) else 0
        if t == c.PUBACK:
            i = self._slot(r.pid, _WAIT_PUBACK)
            if i >= 0:
                return self._done(i, now)
        elif t == c.PUBREC:
            i = self._slot(r.pid, _WAIT_PUBREC)
            if i >= 0:
                try:
                    self.store.release(self._key[i])
                except OutboxFull:
                    return 0  # flash full: no PUBREL yet; the broker repeats PUBREC
                self._state[i] = _WAIT_PUBCOMP
                self._sent[i] = now
            if i >= 0 or self._slot(r.pid, _WAIT_PUBCOMP) >= 0:
                self._ack(c.PUBREL, r.pid)
        elif t == c.PUBCOMP:
            i = self._slot(r.pid, _WAIT_PUBCOMP)
            if i >= 0:
                return self._done(i, now)
        elif t == c.PUBREL:
            c.inbound().pubrel(self, r.pid)
        elif t == c.SUBACK or t == c.UNSUBACK:
            a = t == c.SUBACK and self.subs and self.subs.acked(r.pid, r.payload)
            if a:  # a restore packet's: send the next
                self._fill(now)
                return REFUSED if a == 2 else 0
            if r.pid == self.sub_pid:
                self.sub_pid = 0
            self.ack_type = t
            self.ack_pid = r.pid
            self.granted = bytes(r.payload) if t == c.SUBACK else b""
        elif t == c.CONNACK:
            if self.connected:
                raise MQTTProtocolError(c._why(_E_CONNACK2))
            if r.code:
                raise ConnectError(r.code)
            self.connected = True
            self.session_present = r.session_present
            if not r.session_present and (self.clean or self.level == 4):
                # A new session on the broker: it has no QoS 2 message of
                # ours half way, and will reuse ids we still hold
                # [MQTT-3.1.2-6]. (MQTT 3.1 cannot say, unless clean.)
                self.store.forget_held()
                if self.subs and self.subs.list:
                    self.subs.todo = 0  # it forgot our subscriptions too: restore them
            self._fill(now)
        elif t != c.PINGRESP:
            raise MQTTProtocolError(c._why(_E_UNEXPECTED, t))
        return 0

    def handled(self):
        """The application has the message receive() returned: acknowledge it."""
        c.inbound().handled(self)

    # -- timers ----------------------------------------------------------------

    def tick(self, now):
        """Run the timers: keepalive, dead-link detection, optional retry.
        Raises LinkDown when the broker stopped answering."""
        if not self.connected:
            return
        if self.ping_at >= 0 and ticks_diff(now, self.ping_at) >= self.ping_timeout_ms:
            self._fail(LinkDown(c._why(_E_NO_PINGRESP, ticks_diff(now, self.ping_at))))
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

# The MQTT session as a sans-I/O state machine: the I/O shell puts received
# bytes into self.rx, takes bytes to send from self.tx[self.tx_start:self.tx_end], and
# passes the current tick (ms) in. The engine never touches a socket or a
# clock, and never calls application code: receive() returns what happened
# and the shell hands it on once the engine's state is consistent.
#
# One link state (self.state), written only here:
#
#   CLOSED --shell wants a link--> OFFLINE --start()--> CONNECTING
#   CONNECTING --CONNACK 0--> CONNECTED --disconnect()--> CLOSING
#   any link state --protocol error, refusal, EOF, dead link--> FAILED
#   any --lost()--> OFFLINE (CLOSED after disconnect())
#
# and one ledger per packet id: the inflight window (_pid/_state/_key, and sent_at)
# for outgoing messages, the outbox's held ids for inbound QoS 2 messages,
# and Subs' filters and pending unsubscribes for SUBSCRIBE/UNSUBSCRIBE.
# _handle()'s CONNACK reconciles all of them with the broker's session in
# one place.
# The subscribe side (subscriptions.py, whose request() queues a SUBSCRIBE or an
# UNSUBSCRIBE), inbound messages (inbound.py) and the drop policies
# (policies.py) load on first use.
from array import array
from time import ticks_diff, time
from . import codec
from . import errors  # errors.X where raised or caught: the class loads with the first failure

# MQTT's packet types (codec.py), private consts here: compared on every
# packet, and a const costs neither a lookup nor a name on the heap.
_CONNACK = const(2)
_PUBLISH = const(3)
_PUBACK = const(4)
_PUBREC = const(5)
_PUBREL = const(6)
_PUBCOMP = const(7)
_SUBACK = const(9)
_UNSUBACK = const(11)
_PINGREQ = const(12)
_PINGRESP = const(13)
_DISCONNECT = const(14)

# Link states (self.state) and what receive() returns: numbers, documented
# here, that the shells and tests compare with. Private consts, as every
# const in the package: a module-level name costs about 100 bytes of heap
# on a board, and each module that needs a number keeps its own const.
_CLOSED = const(0)  # no link, and none wanted (before connect(), after disconnect())
_OFFLINE = const(1)  # no link; the shell makes one when its backoff allows
_CONNECTING = const(2)  # CONNECT queued, awaiting CONNACK
_CONNECTED = const(3)
_CLOSING = const(4)  # DISCONNECT queued: nothing more goes out
_FAILED = const(5)  # self.error says why; sticky until start() or lost()

# States of an inflight window slot: the packet type it waits for.
_FREE = const(0)  # no message (and the state of an id no slot holds)
_WAIT_PUBACK = const(4)  # QoS 1, PUBLISH sent
_WAIT_PUBREC = const(5)  # QoS 2, PUBLISH sent
_WAIT_PUBCOMP = const(7)  # QoS 2, PUBREL sent

# The in-flight table: every transition of a slot on an acknowledgement, in
# one place (as coreMQTT's MQTT_CalculateStateAck and validateTransitionPublish
# and h11's _state.py keep theirs). An ack whose id no slot holds changes
# nothing (a late one: its message is done). Else the slot's state and the
# ack's type pick an entry of _ACKS, or of _ACKS_REFUSED when the broker
# refused the message (MQTT 5: a reason code of 0x80 or more):
#
#   state \ ack    PUBACK     PUBREC        PUBCOMP     refused: PUBACK    PUBREC        PUBCOMP
#   WAIT_PUBACK    DELIVERED  0             0                    REJECTED  0             0
#   WAIT_PUBREC    0          _ACK_RELEASE  0                    0         REJECTED      0
#   WAIT_PUBCOMP   0          _ACK_PUBREL   DELIVERED            0         _ACK_PUBREL   REJECTED
#
#   0: not accepted, nothing happens. _ACK_PUBREL: PUBREL again (a repeated
#   PUBREC). _ACK_RELEASE: the outbox releases the message (past PUBREC,
#   kept across power cuts), PUBREL, the slot goes to WAIT_PUBCOMP.
#   DELIVERED, REJECTED: the flow is over, the message leaves the outbox,
#   the slot is FREE and receive() returns the entry.
#
# A table is an int, one octal digit an entry (no heap on any board), its
# rows from WAIT_PUBCOMP's on the left, each from PUBCOMP's column:
# table >> 9 * row + 3 * column & 7, row (state - 3) >> 1 and column
# (type - 3) >> 1 (4, 5, 7: 0, 1, 2). When a message goes out again (the next link, retry_ms) its
# state sends its PUBLISH with DUP, WAIT_PUBCOMP its PUBREL. docs/engine.md
# has the table; host_tests/portable/test_inflight_table.py walks it.
_ACKS = const(0o_210_030_002)
_ACKS_REFUSED = const(0o_410_040_004)
_ACK_PUBREL = const(1)
_ACK_RELEASE = const(3)

_RELEASED = const(3)  # store.qos() of a QoS 2 message past PUBREC (release())

# tx bytes kept free so an acknowledgement can always be queued: the usable
# room for a PUBLISH is the send buffer's size minus this.
_ACK_ROOM = const(16)

# Receive buffer bytes before messages can arrive: 16 acks a read.
_RX_ACKS = const(64)
# The send buffer a first start() makes: CONNECT, acks and a sensor's
# readings fit it; make_room() makes it size bytes for the first packet
# that does not.
_TX_FIRST = const(256)

# What receive() returns.
_MESSAGE = const(1)  # an inbound message: topic, msg, qos, retained, dup; then inbound.handled()
_DELIVERED = const(2)  # an outgoing QoS 1/2 message acknowledged: done_pid
_REFUSED = const(3)  # the broker refused filters: subs.refused (the last), subs.nrefused (Subs.acked returns it)
_REJECTED = const(4)  # MQTT 5: the broker refused an outgoing message: done_pid, rx.code
_UNDECODED = const(17)  # codec.Reader's: a message it has no decoders for yet (inbound.ready())
_SKIPPED = const(16)  # codec.Reader's: an inbound PUBLISH too large for rx, passed over (rx.pid, rx.flags)

# Error reasons (reasons.py has the words).
_E_CLOSED = const(38)
_E_NEVER_FITS = const(49)
_E_TX_FIT = const(40)
_E_EARLY = const(41)
_E_UNEXPECTED = const(42)
_E_CONNACK2 = const(43)
_E_NO_PINGRESP = const(44)
_E_NO_CONNACK = const(46)
_E_CLOSED_AT_CONNECT = const(59)
_E_RX_SILENT = const(60)
_E_TX_STALLED = const(61)


def wall():
    """Wall-clock seconds, whole: what outbox deadlines are set and checked
    by (the unix port's and CPython's time() is a float). Here, below the
    shells and mqtt5/wire.py, which both read it."""
    return int(time())


class Session:
    """One client's MQTT session (MQTT 5: mqtt5.session.Session5).

    receive() returns MESSAGE, DELIVERED or REFUSED, one event at a time;
    the shell hands each to the application and, for MESSAGE, calls
    inbound.handled(session) afterwards, which queues the acknowledgement.
    Until then the message's views (views=True) stay valid: nothing else
    is read.

    After a protocol error, a refused connection, the end of the stream
    (eof()) or a dead link, the session is FAILED (self.error, raised again
    by receive()) until start() begins a new link or lost() ends this one.

    Messages the outbox may drop (drop_oldest when it is full, a passed
    deadline, a newer value with latest=True) are those policies.droppable()
    allows; counted in overflowed, expired and replaced.
    """

    v5 = None  # MQTT 5's encoders, in Session5: the module mqtt5.session
    # Defaults for what a client that only publishes never sets: on the
    # instance from the first time it is set. The instance's attribute table
    # then stays below 48 entries, where it grows from 47 slots to 59 (192 B
    # on a 64-bit board): __init__ adds 46.
    # The message receive() returned, until inbound.handled() (inbound.py).
    topic = msg = None
    retained = dup = False
    qos = 0
    msg_link = 0  # the link it came by: handled() acknowledges it on that one only
    # QoS 2 messages past PUBREC whose broker session was lost: they go out
    # again as PUBLISH, not PUBREL, until a PUBREC comes back (a list).
    _republish = None
    # Outbox messages dropped unsent because they can never go out on the
    # link (_fill): counted from the first.
    unsendable = 0

    def __init__(self, client_id, clean=True, keepalive=0, level=4, size=1024, window=16,
                 store=None, retry_ms=0, views=False, drop_oldest=False, connack_ms=10000):
        self.client_id = client_id
        self.clean = clean
        self.keepalive = keepalive
        # Until messages can arrive (a subscription, or a session the broker
        # keeps), only acks and CONNACK come in: a small receive buffer
        # does; _rx_full() makes it size bytes.
        self.size = size
        self.rx = codec.Reader(_RX_ACKS, level)
        # The largest PUBLISH (its 3.1.1 bytes) that may go out: the send
        # buffer's room; at MQTT 5 also the broker's Maximum Packet Size
        # (mqtt5.session.Session5). fits() says why a larger one cannot.
        self.limit = size - _ACK_ROOM
        # The send buffer is made by the first start(): after the first TCP
        # (and TLS) handshake, whose peak it would otherwise add to. It
        # holds _TX_FIRST bytes until a larger packet goes out (make_room()).
        self.tx = bytearray(0)
        self.tx_start = 0
        self.tx_end = 0
        self.offered = 0  # bytes a blocked write must be offered again (shell.flush)
        # The default outbox is sized for a sensor that publishes a reading
        # (under 128 bytes) every 10 s or slower: 16 messages ride out a
        # Wi-Fi reconnect or a broker restart, and it takes 2 KB of heap,
        # not MemoryStore()'s 4; and it holds two of the largest messages
        # the send buffer carries. Longer outages, and reboots: FileStore.
        if store is None:  # memstore.py loads only then: a FileStore never needs it
            from .memstore import MemoryStore
            store = MemoryStore(max(2048, 2 * size), 16)
        self.store = store
        self.window = window
        self._key = array("i", [-1] * window)
        self._pid = array("H", [0] * window)
        self._state = bytearray(window)
        # When each went out, for the retry (retry_ms) alone: None without one.
        # A list, not an int array: ticks keep the width the port gives them
        # (62 bits on the 64-bit unix port, where array("i") cut them at
        # 2**31); a tick is a small int, so storing one allocates nothing.
        self.sent_at = [0] * window if retry_ms else None
        self.inflight = 0
        self.cursor = -1  # highest outbox key sent on this connection
        self.dup_upto = self.store.tail - 1  # keys up to here went out before: re-send with DUP
        self.republished = 0
        self.drop_oldest = drop_oldest  # when the outbox is full; else OutboxFull
        # Earliest deadline pending (0: none). What a reopened store holds is
        # looked at once; deadlines set since are tracked as they come.
        self.next_expiry = 1 if len(self.store) else 0
        self._deadlines = self.next_expiry  # some message had a deadline: look again after a drop
        self.overflowed = 0
        self.expired = 0
        self.replaced = 0
        self.next_pid = 1
        self.retry_ms = retry_ms  # policies.retry() sends again what waits this long for its ack
        self.connack_ms = connack_ms
        self.views = views
        self.will = None
        self.user = None
        self.password = None
        self.subs = None  # subs.Subs, from the first subscribe()
        self.state = _CLOSED
        self.link = 0  # counts links: an acknowledgement belongs to the link it was made on
        self.acked = 0  # the last link that got CONNACK
        self.session_present = False
        self.error = None
        self.since = 0  # when the state was entered (CONNECTING, CONNECTED)
        self.last_tx = 0
        self.last_rx = 0
        self.drained = 0  # last time tx was empty or the socket took bytes
        self.ping_at = -1
        self.packets = 0  # packets received
        self.dropped = 0  # inbound packets too large for the receive buffer
        # The packet id of the event: the message DELIVERED (REJECTED)
        # reports, or the one MESSAGE returned, until handled().
        self.done_pid = 0

    # -- output buffer -----------------------------------------------------

    def make_room(self, n=0):
        """Bytes free at the end of tx. Once tx is empty, an n-byte packet
        it cannot hold makes it size bytes: one allocation, the first time."""
        if self.tx_start == self.tx_end:
            self.tx_start = self.tx_end = 0
            if n + _ACK_ROOM > len(self.tx) and 0 < len(self.tx) < self.size:  # 0: before start()
                self.tx = bytearray(self.size)
        elif self.tx_start and len(self.tx) - self.tx_end < _ACK_ROOM * 4:
            self.tx_end = codec.shift(self.tx, self.tx_start, self.tx_end)
            self.tx_start = 0
        return len(self.tx) - self.tx_end

    def fits(self, n):
        """Raises ValueError if an n-byte packet can never be queued: the
        send room, the one check of it (publish(); _fill() drops a stored
        message over self.limit)."""
        if n > self.size - _ACK_ROOM:
            raise ValueError(codec.why(_E_TX_FIT, n, self.size, self.size - _ACK_ROOM, _ACK_ROOM))

    def check_connect(self):
        """ValueError, in words, if the CONNECT this session sends (client id,
        will, user name, password) is wrong or can never fit the send
        buffer: the clients check it when they are given and before
        connect() opens a link, so that no reconnect can fail on it."""
        v5 = self.v5  # MQTT 5 allows an empty client id with a kept session: v5.start checks as for a clean one
        rl = codec.connect(None, self.client_id, True if v5 else self.clean, self.keepalive, self.will, self.user,
                           self.password, 4 if v5 else self.rx.level)
        if v5:  # its properties (v5.start): 12 bytes, 5 more to keep the session, 1 for the will's
            rl += 12 + (0 if self.clean else 5) + (1 if self.will else 0)
        self.fits(rl + 1 + codec._length_size(rl))

    def sent(self, n, now):
        """The shell wrote n bytes of tx[tx_start:tx_end]."""
        self.tx_start += n
        if self.tx_start == self.tx_end:
            self.tx_start = self.tx_end = 0
        self.last_tx = self.drained = now

    def _ack(self, type, pid):
        self.make_room()
        self.tx_end = codec.ack(self.tx, type, pid, self.tx_end)

    # -- the link ------------------------------------------------------------

    def start(self, now):
        """A new network connection is open: queue CONNECT."""
        self.lost(_OFFLINE)
        self.error = None
        self.state = _CONNECTING
        self.link += 1
        if not len(self.tx):
            self.tx = bytearray(min(self.size, _TX_FIRST))
        if not self.clean or self.subs:
            self._rx_full()
        self.since = self.last_rx = self.last_tx = self.drained = now
        while True:
            try:
                if self.v5:
                    self.tx_end = self.v5.start(self)
                else:
                    self.tx_end = codec.connect(self.tx, self.client_id, self.clean, self.keepalive,
                                                self.will, self.user, self.password, self.rx.level)
                return
            except ValueError:
                # Too large for the first send buffer (a long will, user or
                # password): make_room() makes it size bytes, as for any
                # packet, once. A CONNECT wrong rather than large raises the
                # same words again from the larger buffer.
                n = len(self.tx)
                self.make_room(self.size)
                if len(self.tx) == n:
                    raise

    def _rx_full(self):
        # Messages can arrive from now on (a subscription, a kept session):
        # the receive buffer becomes size bytes (rx_size's, when the
        # clients' rx_size sets the receive limit apart from size: an
        # attribute only then, as one more on the class grew its table),
        # what is buffered moving along (a subscribe() can come mid-stream),
        # and inbound.py, which takes them, loads now with the state of the
        # oversize skip: nothing is loaded or made when the first message
        # too large for the heap comes. The first time (no decoders yet, so
        # no message handed out), the message's fields go on the instance:
        # with the first message they would grow its attribute table then
        # (a 944-byte block on a 64-bit board), which a fragmented small
        # heap may not have, and wait_msg() would raise MemoryError.
        r = self.rx
        if r.inbound is None:
            self.topic = self.msg = None
            self.retained = self.dup = False
            self.qos = self.msg_link = 0
        n = getattr(self, "rx_size", self.size)
        if len(r.buf) < n:
            r = type(r)(n, r.level)  # an MQTT 5 one stays one
            r.end = n = self.rx.end - self.rx.start
            r.mv[:n] = self.rx.mv[self.rx.start:self.rx.end]
            self.rx = r
        import holdfast.inbound as m
        m.ready(r)

    def lost(self, state=-1):
        """The connection is gone: keep the outbox and the requests, forget
        the wire state. The state becomes OFFLINE (a reconnect is wanted) or
        CLOSED (none is: after disconnect(), or when given)."""
        if self.cursor > self.dup_upto:
            self.dup_upto = self.cursor
        if self._deadlines:
            self.next_expiry = 1  # what was in flight may expire now: look again
        if state < 0:
            state = _CLOSED if self.state == _CLOSING or self.state == _CLOSED else _OFFLINE
        self.state = state
        self.cursor = -1
        self.inflight = 0
        for i in range(self.window):
            self._state[i] = _FREE
        self.rx.reset()
        self.tx_start = self.tx_end = 0
        self.offered = 0
        self.ping_at = -1
        if self.subs:
            self.subs.lost()

    def eof(self):
        """The peer closed the stream: the link is over (LinkDown, sticky).
        Before CONNACK that usually means the broker would not take our
        CONNECT, as a broker that does not speak the protocol level may."""
        if self.state == _CONNECTING:
            self._fail(errors.LinkDown(codec.why(_E_CLOSED_AT_CONNECT, self.rx.level)))
        self._fail(errors.LinkDown(codec.why(_E_CLOSED)))

    def _fail(self, e):
        self.error = e
        self.state = _FAILED
        raise e

    def disconnect(self):
        """Queues DISCONNECT if there is a link; either way no reconnect follows."""
        if self.state == _CONNECTED:
            self._ack(_DISCONNECT, 0)
            self.state = _CLOSING
        elif self.state == _CONNECTING:
            self.state = _CLOSING
        else:
            self.lost(_CLOSED)

    def ping(self, now):
        self._ack(_PINGREQ, 0)
        if self.ping_at < 0:
            self.ping_at = now

    # -- outgoing messages -----------------------------------------------------

    def new_pid(self):
        while True:
            p = self.next_pid
            self.next_pid = p % 65535 + 1
            if not self.store.uses(p) and not (self.subs and self.subs.uses(p)):
                return p

    def publish(self, topic, payload, qos, retain, now, deadline=0, latest=False):
        """Queue a message. QoS 0 goes straight to tx and returns 0; offline,
        or with no room in tx now, nothing is queued and it returns n, the
        room it needs (there once make_room(n) - ACK_ROOM >= n: what a shell
        waits for, online).
        QoS 1/2 goes to the outbox first and returns its message id.
        ValueError if it can never fit the send buffer, at any QoS.
        deadline: wall-clock seconds after which it is dropped unsent (0: never);
        at MQTT 5 also its Message Expiry Interval, at every QoS.
        latest: once it is stored, drop the unsent older messages of the topic."""
        payload = codec.to_bytes(payload)  # a str is sized, stored and sent as its UTF-8 bytes
        n = codec.publish_size(topic, len(payload), qos)
        if n > self.limit:
            self.fits(n)  # raises, with the words
        pid = 0
        if qos:
            st = self.store
            pid = self.new_pid()
            prev = st.tail - 1  # keys grow but need not be consecutive
            while True:
                try:
                    key = st.put(topic, payload, qos, retain, pid, deadline)
                    break
                except errors.OutboxFull:
                    # The store's record limit: what can never fit it is
                    # refused before anything is dropped for room.
                    if n > st.most:
                        raise errors.OutboxFull(codec.why(_E_NEVER_FITS, n, st.most))
                    if not self.drop_oldest:
                        raise
                    import holdfast.policies as m  # policies.py: loaded on first use, no allocation after
                    if not m.drop_oldest(self):
                        raise
            if latest:
                import holdfast.policies as m
                m.replace(self, topic, key)
            if deadline:
                self._deadlines = 1
                if not self.next_expiry or deadline < self.next_expiry:
                    self.next_expiry = deadline
            # It goes out now in the common case, online, window open and
            # nothing queued before it; else _fill() sends it from the outbox.
            if self.cursor != prev or self.inflight >= self.window:
                return pid
        if self.state != _CONNECTED or self.make_room(n) - _ACK_ROOM < n:
            return pid or n  # QoS 0: not queued
        # Encoded from the caller's objects, not copied out of the outbox.
        if self.v5:  # MQTT 5: its properties, a topic alias
            self.tx_end = self.v5.out(self, topic, payload, qos, retain, pid, deadline)
        else:
            self.tx_end = codec.publish(self.tx, topic, payload, qos, retain, False, pid, self.tx_end)
        if qos:
            self._track(key, pid, _WAIT_PUBACK if qos == 1 else _WAIT_PUBREC, now)
        return pid

    def _track(self, key, pid, state, now):
        for i in range(self.window):
            if not self._state[i]:
                self._key[i] = key
                self._pid[i] = pid
                self._state[i] = state
                if self.sent_at:
                    self.sent_at[i] = now
                self.inflight += 1
                self.cursor = key
                return

    def _fill(self, now):
        # Put what waits on the wire while there is room: requests for the
        # subscriptions first, then outbox messages while the window is open.
        if self.state != _CONNECTED:
            return
        if self.subs:
            self.subs.send(self)
        st = self.store
        while self.inflight < self.window:
            k = st.next(self.cursor)
            if k < 0:
                return
            pid = st.pid(k)
            again = self._republish and k in self._republish  # its broker session was lost
            q = st.qos(k)
            if q == _RELEASED and not again:
                if self.make_room() < _ACK_ROOM:
                    return
                self._ack(_PUBREL, pid)
                q = _WAIT_PUBCOMP
            else:
                n = st.size(k)
                if n > self.limit:
                    # Stored before this link's limits were known (offline,
                    # another broker, a larger size=): it can never go out on
                    # it, and at the head of the outbox it would hold up the
                    # rest. Dropped unsent, counted.
                    st.done(k)
                    self.unsendable += 1
                    continue
                if self.make_room(n) - _ACK_ROOM < n:
                    return
                if again:
                    self.republished += 1
                self._resend(k, k <= self.dup_upto)
                q = _WAIT_PUBACK if q == 1 else _WAIT_PUBREC
            self._track(k, pid, q, now)  # q: what its slot waits for

    def _resend(self, key, dup):
        start = self.tx_end
        self.tx_end = self.store.get(key, self.tx, start)
        if dup and self.tx_end > start:
            self.tx[start] |= 8

    # -- input -----------------------------------------------------------------

    def receive(self, now):
        """Handles the packets in self.rx up to the next event for the
        application and returns it (MESSAGE, DELIVERED, REFUSED), or 0 once
        nothing complete is left (or tx has no room for acknowledgements)."""
        if self.error:
            raise self.error
        while self.make_room() >= _ACK_ROOM:
            try:
                t = self.rx.next()
                if t == _UNDECODED:  # a message before any subscription: its decoders load now
                    import holdfast.inbound as m
                    t = m.ready(self.rx) or self.rx.next()
                if not t:
                    return 0
                self.packets += 1
                self.last_rx = now
                self.ping_at = -1
                if self.state != _CONNECTED and t != _CONNACK:
                    raise codec.protocol_error(_E_EARLY, t)
                ev = self._handle(t, now)
            except errors.MQTTError as e:
                self._fail(e)
            if ev:
                return ev
        return 0

    def _handle(self, t, now):
        r = self.rx
        if t == _PUBLISH or t == _PUBREL or t == _SKIPPED:
            import holdfast.inbound as m
            return m.receive(self, t)
        if t == _PUBACK or t == _PUBREC or t == _PUBCOMP:
            st = self._state
            for i in range(self.window):  # the ids in flight are distinct
                if st[i] and self._pid[i] == r.pid:
                    break
            else:
                return 0
            # MQTT 5: the broker refused the message (a reason code, a byte, of
            # 0x80 or more; a 3.1.1 Reader's code is CONNACK's, 0 once connected)
            e = (_ACKS_REFUSED if r.code >> 7 else _ACKS) >> 9 * (st[i] - 3 >> 1) + 3 * (t - 3 >> 1) & 7
            if e & _ACK_PUBREL:
                if e == _ACK_RELEASE:
                    k = self._key[i]
                    if self.store.qos(k) != _RELEASED:
                        # The store full even for this (OutboxFull): the link
                        # fails (receive()), as a broker repeats PUBREC only
                        # for the DUP PUBLISH of the next link (docs/engine.md).
                        self.store.release(k)
                    if self._republish and k in self._republish:
                        self._republish.remove(k)
                    st[i] = _WAIT_PUBCOMP
                    if self.sent_at:
                        self.sent_at[i] = now
                self._ack(_PUBREL, r.pid)
            elif e:
                # The flow is over: the message is delivered, or refused.
                self.store.done(self._key[i])
                st[i] = _FREE
                self.inflight -= 1
                self.done_pid = r.pid
                self._fill(now)
                return e
        elif t == _SUBACK or t == _UNSUBACK:
            if self.subs:
                return self.subs.acked(self, t, now)

        elif t == _CONNACK:
            # The one reconciliation with the broker's session: what happens to
            # every ledger entry once the broker says whether it kept our session.
            if self.state != _CONNECTING:
                raise codec.protocol_error(_E_CONNACK2)
            if r.code:
                raise errors.ConnectError(r.code)
            self.state = _CONNECTED
            self.acked = self.link
            self.since = now
            self.session_present = sp = r.session_present
            # MQTT 3.1 cannot say whether the session was kept, unless clean.
            new = not sp and (self.clean or r.level == 4)
            if new:
                # A new session on the broker: it holds no QoS 2 message of ours
                # half way (those past PUBREC go out again as PUBLISH, the one
                # case where QoS 2 can deliver twice), and it will reuse ids we
                # still hold for inbound ones [MQTT-3.1.2-6].
                st = self.store
                if st.held_ids is not None:
                    st.held_ids.forget_held()
                k = st.next(-1)
                while k >= 0:
                    if st.qos(k) == _RELEASED:
                        if self._republish is None:
                            self._republish = []
                        if k not in self._republish:
                            self._republish.append(k)
                    k = st.next(k)
            if self.subs:
                self.subs.reconcile(new)
            self._fill(now)
        elif t != _PINGRESP:
            raise codec.protocol_error(_E_UNEXPECTED, t)
        return 0

    # -- timers ----------------------------------------------------------------

    def tick(self, now):
        """Run the timers: the CONNACK watchdog, keepalive, dead-link
        detection, optional retry. Raises MQTTTimeout or LinkDown (and the
        session is FAILED) when the broker stopped answering or the socket
        stopped taking bytes."""
        if self.state == _CONNECTING:
            if ticks_diff(now, self.since) >= self.connack_ms:
                self._fail(errors.MQTTTimeout(codec.why(_E_NO_CONNACK, self.connack_ms, self.rx.level)))
            return
        if self.state != _CONNECTED:
            return
        if self.tx_start == self.tx_end:
            self.drained = now
        ka = self.keepalive * 1000
        if self.ping_at >= 0:
            # A PINGREQ may go unanswered a keepalive; with keepalive off, ping() still works.
            waited = ticks_diff(now, self.ping_at)
            if waited >= (ka or 30000):
                self._fail(errors.LinkDown(codec.why(_E_NO_PINGRESP, waited)))
        if ka:
            # Liveness never depends on room to queue a PINGREQ: silence from
            # the broker, or a socket that takes nothing, for 1.5 keepalives.
            dead = ka + ka // 2
            silent = ticks_diff(now, self.last_rx)
            if silent >= dead:
                self._fail(errors.LinkDown(codec.why(_E_RX_SILENT, silent)))
            stalled = ticks_diff(now, self.drained)
            if stalled >= dead:
                self._fail(errors.LinkDown(codec.why(_E_TX_STALLED, stalled)))
            # Ping when we sent nothing, or heard nothing, for a keepalive: a
            # client that only publishes QoS 0 still hears from the broker.
            if (self.ping_at < 0 and (silent >= ka or ticks_diff(now, self.last_tx) >= ka)
                    and self.make_room() >= _ACK_ROOM):
                self.ping(now)
        if self.retry_ms and self.inflight:
            import holdfast.policies as m  # policies.py: loaded on first use
            m.retry(self, now)
        self._fill(now)


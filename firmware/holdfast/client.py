# The blocking client: a superset of micropython-lib's umqtt.simple API, a thin
# I/O shell around the sans-I/O Session. Every wait is bounded.
from time import ticks_ms, ticks_diff, ticks_add, sleep_ms
import select
from .shell import Shell, LINK_ERRORS
from .sockets import MP, flush, read_into

_TICK_MS = const(20)  # timers run at most this often
_RAISE = const(2)  # _pump()'s read: read, and a callback's exception comes out (Shell._events)
# The session's link states (session.py) and what Shell._ready() waits for
# (shell.py), as private consts: no module-level names.
_CLOSED = const(0)
_OFFLINE = const(1)
_CONNECTED = const(3)
_ANSWERED = const(0)
_ROOM = const(1)
_WINDOW = const(2)
_REPLIED = const(3)
_EMPTY = const(4)


class MQTTClient(Shell):
    """Blocking MQTT client. Extra keyword arguments beyond umqtt.simple's:

    level=4 (3 for MQTT 3.1, 5 for MQTT 5: docs/mqtt5.md), size=1024 (tx and rx buffer bytes),
    rx_size (the largest packet received, apart from size: a large message
    in needs no large send buffer or outbox), window=16
    (QoS 1/2 messages in flight), outbox (a store; by default a RAM one
    for 16 messages in 2 KB, or two of size: MemoryStore(max(2048, 2 * size), 16)),
    retry_ms=0 (in-session re-send of unacknowledged messages; off),
    views=False (callbacks get memoryviews valid during the call instead of
    bytes), timeout_ms=10000 (bound on every wait), reconnect=True,
    backoff_ms=(1000, 60000) (first and largest reconnect delay),
    when_full="refuse" (outbox full: publish() raises OutboxFull) or
    "drop_oldest" (the oldest unsent messages are dropped, counted in
    overflowed), headers (a dict of extra HTTP headers for the WebSocket
    handshake of a ws:// or wss:// server). server may be a URL: mqtt://,
    mqtts://, ws://host[:port]/path, wss://... (README, MQTT over WebSockets).
    """

    # What only the blocking shell keeps, as class attributes: no
    # __init__ of its own (Shell's takes the arguments above).
    _poll = None  # select.poll() on the link's socket, made by its first _io_wait(), dropped by _close()
    _ticked = 0  # when _pump() last ran the timers: any tick will do at first (_pump says why)

    # -- umqtt.simple API --------------------------------------------------------

    def connect(self, clean_session=True, timeout_ms=None):
        """Connects and waits for CONNACK (up to timeout_ms, default the
        client's). Returns the session-present flag. Raises ConnectError
        (refused, with the reason), MQTTTimeout, LinkDown or OSError; either
        way automatic reconnects follow (reconnect=True)."""
        self._connect_begin(clean_session, timeout_ms)
        try:
            self._dial(ticks_ms(), self.timeout_ms)
            self._pump(ticks_ms(), False)  # CONNECT
        except LINK_ERRORS as e:
            self._link_failed(e)
            raise
        link = self.session.link
        # The engine's CONNACK watchdog ends the wait; the bound is a backstop.
        self._wait(_ANSWERED, 0, 2 * self.session.connack_ms)
        return self._connect_end(link)

    def disconnect(self):
        s = self.session
        if self.sock:
            try:
                s.disconnect()
                deadline = ticks_add(ticks_ms(), self.timeout_ms)
                while s.tx_end > s.tx_start:
                    n = flush(self.sock, s)
                    if n:
                        s.sent(n, ticks_ms())
                        continue
                    # The deadline is ours to keep: a socket can poll
                    # writable and still take nothing. Past it the link
                    # closes with DISCONNECT unsent, as after a link error.
                    left = ticks_diff(deadline, ticks_ms())
                    if left <= 0 or not self._io_wait(left):
                        break
            except OSError:
                pass
        self._close(_CLOSED)

    def ping(self):
        self._service()
        if self.sock:
            self.session.ping(ticks_ms())
            self._pump(ticks_ms(), False)

    def publish(self, topic, msg, retain=False, qos=0, expiry=0, latest=False, props=None):
        """QoS 0: sent now (waiting up to timeout_ms for room in the send
        buffer), or dropped and counted in dropped_qos0 while offline;
        returns None. QoS 1/2: stored in the outbox first, sent when the
        window has room (waiting up to timeout_ms for it), and the message id
        returned. ValueError if it can never fit the send buffer.
        expiry: seconds after which it is dropped if still unsent (0: never);
        at MQTT 5 (any QoS) the Message Expiry Interval it carries.
        latest: drop the unsent older messages of this topic (state topics).
        From inside a callback it only queues: it never waits or reads."""
        now = ticks_ms()
        s = self.session
        if self.sock is None and not self._busy:
            self._service()
        pid = None
        if qos:
            if not self._busy and not self._ready(_WINDOW, 0):
                self._wait(_WINDOW, 0, None, True)
            pid = self._publish(topic, msg, retain, qos, expiry, latest, props, True)
        elif s.state == _CONNECTED and not (s.v5 or props) and not s.publish(topic, msg, 0, retain, now):
            pass  # the common case, without a call more
        else:
            n = self._publish(topic, msg, retain, 0, expiry, False, props, self._busy)
            if n:
                self._wait(_ROOM, n, None)
                self._publish(topic, msg, retain, 0, expiry, False, props, True)
        if self.sock is not None:
            self._pump(now, s.ping_at >= 0)
        return pid

    def subscribe(self, topic, qos=0, handler=None, **opts):
        """Returns the granted QoS; SubscribeError if the broker refused.
        handler(topic, msg, retained) gets the messages matching this filter
        from the moment the SUBSCRIBE is queued."""
        self._service()
        from .subscriptions import ask, answer  # the subscribe side: loaded on the first subscribe()
        e = ask(self, topic, qos, handler, opts)
        return answer(self, e, self._wait(_REPLIED, e, None))

    def unsubscribe(self, topic):
        self.subscribe(topic, None)  # qos None: UNSUBSCRIBE

    def check_msg(self):
        """Handles whatever has arrived, without waiting; reconnects when due.
        An exception from a callback comes out here (counted in callback_errors)."""
        self._service()
        if self.sock:
            self._pump(ticks_ms(), _RAISE)

    def wait_msg(self, timeout_ms=None):
        """Waits until a packet arrives (or timeout_ms, if given) and handles
        it. LinkDown if no link can come: after disconnect(), or with
        reconnect=False once the link is lost. MQTTError from a callback:
        nothing is read while one runs, so the wait could never end."""
        self._idle()
        deadline = ticks_add(ticks_ms(), timeout_ms) if timeout_ms is not None else None
        while True:
            self._service()
            st = self.session.state
            if st == _CLOSED or (st == _OFFLINE and not self.reconnect and self._dialing is None):
                self._idle(True)  # raises LinkDown: no link can come
            now = ticks_ms()
            if self.sock and self._pump(now, _RAISE):
                return
            left = 1000 if deadline is None else min(1000, ticks_diff(deadline, now))
            if left <= 0:
                return
            if self.sock or self._dialing is not None:
                self._io_wait(left)
            else:
                sleep_ms(max(1, min(left, self._housekeep(now))))  # until the next attempt

    # -- beyond umqtt.simple ---------------------------------------------------

    def flush(self, timeout_ms=None):
        """Waits until every accepted message is acknowledged and every QoS 0
        byte written (for example before a deep sleep). True if so. Either
        way what is still pending is then committed to the outbox's storage."""
        self._idle()
        done = self._ready(_EMPTY, 0) or timeout_ms != 0 and self._wait(_EMPTY, 0, timeout_ms, True)
        return self.session.store.sync() and done

    # -- I/O shell -------------------------------------------------------------

    def _service(self):
        # Reconnect when the link is down and the backoff delay has passed,
        # one step per call: the TCP connect never waits here.
        now = ticks_ms()
        wait = self._housekeep(now)
        try:
            if (self._dialing is not None or self.sock is None and self.session.state == _OFFLINE
                    and self.reconnect and not wait) and self._dial(now):
                self._pump(now, False)  # CONNECT
        except LINK_ERRORS as e:
            self._link_failed(e)

    def _pump(self, now, read):
        """One round of I/O without waiting: write what is queued, read what is
        there (read: True, or _RAISE), hand the engine's events to the
        application, run the timers. Reads nothing while a callback runs.
        Returns the packets handled."""
        s = self.session
        n = s.packets
        if self._busy or self.pull_held == s.link:  # a callback runs, or a message waits to be pulled
            read = False
        try:
            if s.tx_end > s.tx_start:
                w = flush(self.sock, s)
                if w:
                    s.sent(w, now)
            if read:
                read_into(self.sock, s)
        except LINK_ERRORS as e:
            self._link_failed(e)
            return 0
        if read and not self._events(now, read == _RAISE):
            return s.packets - n
        try:
            # Timers are coarse: run them at most every few ms, not per message.
            # No tick means "never": one less than _TICK_MS ago (0 <= diff)
            # skips them, any other runs them, so a _ticked half a period
            # old (ticks_diff() then negative), the first one included, cannot
            # hold them back.
            d = ticks_diff(now, self._ticked)
            if s.packets != n or not 0 <= d < _TICK_MS:
                self._ticked = now
                self._housekeep(now)
                s.tick(now)
            if s.tx_end > s.tx_start and self.sock is not None:
                w = flush(self.sock, s)
                if w:
                    s.sent(w, now)
        except LINK_ERRORS as e:
            self._link_failed(e)
        return s.packets - n

    def _wait(self, target, arg, timeout_ms, offline=False):
        # Runs the I/O until _ready(target, arg) holds (True) or timeout_ms
        # passes (False). Without a link only a reconnect can help: offline waits
        # (for the outbox, the window) keep stepping it, the others end.
        self._idle()
        deadline = ticks_add(ticks_ms(), timeout_ms or self.timeout_ms)
        while True:
            now = ticks_ms()
            if self.sock is None:
                if not offline and self._dialing is None:
                    return self._ready(target, arg)
                self._service()
            else:
                self._pump(now, True)
            if self._ready(target, arg):
                return True
            left = ticks_diff(deadline, ticks_ms())
            if left <= 0:
                return False
            if self.sock is not None or self._dialing is not None:
                self._io_wait(min(left, 100))
            else:
                sleep_ms(min(left, 50))

    def _io_wait(self, timeout_ms):
        # Waits up to timeout_ms for the link's socket to be readable (or writable,
        # while the session has bytes queued): True once it is. One poll
        # object per link; registering the socket again only sets what it
        # waits for: no allocation per wait on MicroPython. Without a link,
        # on a reconnect's pending TCP connect: dial()'s own poll, which
        # reports it writable once the connect succeeded or failed.
        if self.sock is None:
            p = self._dialing[2]
        elif self.tls and not MP and self.sock.pending():
            # CPython's TLS: bytes already decrypted, which a poll on the
            # socket does not see. (MicroPython's TLS socket reports them
            # to poll itself.)
            return True
        else:
            p = self._poll
            if p is None:
                p = self._poll = select.poll()
            s = self.session
            p.register(self.sock, select.POLLIN | (select.POLLOUT if s.tx_end > s.tx_start else 0))
        if MP:
            for _ in p.ipoll(timeout_ms):
                return True
            return False
        return bool(p.poll(timeout_ms))


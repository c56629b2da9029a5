# What the blocking and the asyncio client share, their one contract: the
# session they wrap, where the broker is, the protocol verbs (each client
# supplies only how it waits and how it writes), how the engine's events
# reach the application, what happens when the link goes down, the counters.
# The socket calls both make are in sockets.py.
from time import ticks_ms, ticks_diff, ticks_add
from sys import print_exception
from .codec import why
from . import errors  # errors.X where raised or caught: the class loads with the first failure
from .session import Session, wall
from . import sockets

try:
    from random import getrandbits
except ImportError:  # pragma: no cover - every port has it
    def getrandbits(n):  # type: ignore[misc]  # the stubs make n positional-only
        return ticks_ms() & ((1 << n) - 1)


# The session's numbers (session.py, codec.py), private consts here: a
# name imported from there would be a module-level name, which costs heap
# on a board and a dictionary lookup at every use.
_OFFLINE = const(1)
_CONNECTING = const(2)
_CONNECTED = const(3)
_MESSAGE = const(1)
_DELIVERED = const(2)
_REJECTED = const(4)
_ACK_ROOM = const(16)

# What _ready() waits for; the shells use the same numbers.
_ANSWERED = const(0)
_ROOM = const(1)
_WINDOW = const(2)
_REPLIED = const(3)
_EMPTY = const(4)

# What a link failure can raise, from the socket or from the engine; and
# MemoryError, when a failure's words or a message's copy find no heap: the
# link is dropped and tried again after the backoff, as for any failure,
# instead of raising out of every later call while the heap stays short.
LINK_ERRORS = (OSError, errors.MQTTError, MemoryError)

# Error reasons (reasons.py has the words, and makes the Unreachable the
# socket calls raise: a connected client loads none of that code).
_E_EMPTY_ID_CLEAN = const(45)
_E_NO_CONNACK = const(46)
_E_IN_CALLBACK = const(50)
_E_WHEN_FULL = const(51)
_E_OFFLINE = const(52)
_E_RESET_AT_CONNECT = const(64)
_E_NOT_STARTED = const(65)
_E_NO_TCP = const(56)
_E_NO_ROOM = const(47)


class Shell:
    # The pull API (pull.py: messages(), MQTTClient.next_msg(), async for
    # over an AsyncClient), one class attribute until first asked for: -1
    # off; else the link whose message the engine holds until pull.take()
    # hands it out (0: none held).
    pull_held = -1
    # A counter set only at MQTT 5, read as 0 until then, as every counter.
    rejected = 0  # outgoing messages the broker refused (mqtt5.refused.rejected counts them)

    # MQTTClient's arguments and defaults (client.py says what they do);
    # AsyncClient passes its own.
    def __init__(self, client_id, server, port=0, user=None, password=None, keepalive=0,
                 ssl=None, ssl_params=None, level=4, size=1024, window=16, outbox=None,
                 retry_ms=0, views=False, timeout_ms=10000, reconnect=True,
                 backoff_ms=(1000, 60000), when_full="refuse", headers=None, rx_size=0):
        drop = when_full == "drop_oldest"  # two comparisons: a tuple would be an object on the heap
        if not drop and when_full != "refuse":
            raise ValueError(why(_E_WHEN_FULL, when_full))
        # server as a URL (url.py): mqtt://, mqtts://, ws://, wss://; ws: the
        # WebSocket's path and extra headers for _dial's handshake, else None.
        self.ws = None
        if "://" in server or headers:
            from .url import parse
            server, port, ssl, self.ws = parse(server, port, ssl, headers)
        self.server = server
        # What _dial() wraps each link with: None without TLS, else what
        # tlsmore.context() returns, the SSLContext (with the name to check, a
        # tuple, when server_hostname is given); it refuses ssl_params without
        # ssl, and drops tlsmore again.
        self.tls = None
        if ssl or ssl_params:
            from .tlssetup import context
            self.tls = context(ssl, ssl_params or {})
        self.port = port or (8883 if self.tls else 1883)
        S = Session
        if level == 5:  # MQTT 5 loads only here
            from .mqtt5.session import Session5 as S
        self.session = S(client_id, True, keepalive, level, size, window, outbox, retry_ms, views,
                         drop, timeout_ms)
        if rx_size:  # the receive limit on its own (Session._rx_full())
            self.session.rx_size = rx_size
        self.session.user = user
        self.session.password = password
        self.session.check_connect()  # a user or password too large for size, before any link
        self.sock = None
        self._dialing = None  # dial()'s connect under way (begun at retry_at), while _dial() steps it
        self.timeout_ms = timeout_ms
        self.reconnect = reconnect  # after a lost link, or a failed connect()
        # When to try the broker again: exponential backoff from backoff_ms[0]
        # to backoff_ms[1], jittered (_link_failed); a link that stayed up a
        # keepalive (a minute without one) starts it again from the shortest.
        self.backoff_ms = backoff_ms
        self.backoff = 0  # the current delay in ms (0: try at once)
        self.retry_at = 0  # when the next attempt may start; once it has, when it did
        self.attempts = 0  # connections tried, failed ones too
        self.last_error = None  # why the link last went down, in words (kept after it is back up)
        self.dropped_qos0 = 0  # QoS 0 messages not sent: offline, no room in time, or in a callback
        self.restore_refused = 0  # filters the broker refused when they were restored
        self.callback_errors = 0  # exceptions raised by the application's callbacks
        self.callback_error = None  # the last of them
        self._on_message = None
        self._on_delivered = None
        self._busy = False  # a callback is running: publish() only queues

    def __repr__(self):
        # Never shows the password or key material.
        return "<%s %r %s:%d %s>" % (self.__class__.__name__, self.session.client_id, self.server,
                                     self.port, "connected" if self.isconnected() else "offline")

    def set_callback(self, f):
        """f(topic, msg) for every inbound message. During the call the
        client's retained, qos and dup describe it; with views=True topic
        and msg stay valid until it returns."""
        self._on_message = f

    def set_delivered(self, f):
        """f(pid) once an outgoing QoS 1/2 message is acknowledged."""
        self._on_delivered = f

    def __getattr__(self, name):
        # retained, qos, dup: the message a callback is given; overflowed,
        # expired, replaced, republished: what the outbox dropped or sent
        # again. Read from the session; one method costs less heap than
        # seven properties.
        if name in ("retained", "qos", "dup", "overflowed", "expired", "replaced", "republished",
                    "unsendable"):
            return getattr(self.session, name)
        if name == "oversized":  # inbound messages over the receive limit: skipped, acknowledged
            return self.session.dropped
        if name == "messages" or name == "next_msg":  # the pull API: pull.py, on first use
            import holdfast.pull as m
            return m.bind(self, name)
        if name == "set_next_pid":  # for tests of id wrap-around: loaded on first use
            import holdfast.policies as m
            return m.next_pid(self.session)
        if name == "held_evicted":  # inbound QoS 2 ids the outbox's table had to forget
            return self.session.store.held_evicted
        if name == "links":  # network connections opened (1 + reconnects): the session counts them
            return self.session.link
        raise AttributeError(name)

    def set_last_will(self, topic, msg, retain=False, qos=0):
        """ValueError if the will is wrong or the CONNECT carrying it cannot
        fit the send buffer: the will is then left as it was."""
        s = self.session
        old = s.will
        s.will = (topic, msg, qos, retain)  # str or bytes: the CONNECT encoder takes both
        try:
            s.check_connect()
        except ValueError:
            s.will = old
            raise

    def isconnected(self):
        return self.session.state == _CONNECTED

    def pending(self):
        """QoS 1/2 messages accepted by publish() and not yet acknowledged."""
        return len(self.session.store)

    # -- the verbs' halves around each client's wait -------------------------

    def _idle(self, link=False):
        # A call that waits for the broker cannot run inside a callback, and
        # one that needs the link (link=True) cannot run without it: say so
        # before doing anything.
        if self._busy:
            raise errors.MQTTError(why(_E_IN_CALLBACK))
        if link and not self.isconnected():
            raise errors.LinkDown(why(_E_OFFLINE, self.last_error) if self.last_error is not None
                                  else why(_E_NOT_STARTED))

    def _connect_begin(self, clean, timeout_ms):
        self._idle()
        s = self.session
        if not s.client_id and not clean and not s.v5:  # MQTT 5 allows it
            raise ValueError(why(_E_EMPTY_ID_CLEAN))
        s.clean = clean
        s.check_connect()  # before a link is opened, so no reconnect can fail on it
        s.connack_ms = timeout_ms or self.timeout_ms
        self._close(_OFFLINE)  # a reconnect is wanted from here on, if this one fails

    def _connect_end(self, link):
        # connect()'s outcome once the engine left CONNECTING: the session-
        # present flag if link (or a later one) got CONNACK, even if it was
        # lost since; else the named error the link ended with.
        if self.session.acked < link:
            if self.session.state == _CONNECTING:
                # The backstop ran out before the engine's watchdog: the link
                # is given up as the watchdog would, and reconnects follow.
                self._link_failed(errors.MQTTTimeout(why(_E_NO_CONNACK, self.session.connack_ms,
                                                         self.session.rx.level)))
            err = self.last_error
            if err is None:
                err = errors.MQTTTimeout(why(_E_NO_CONNACK, self.session.connack_ms, self.session.rx.level))
            raise err
        self.backoff = 0
        return self.session.session_present

    def _ready(self, target, arg):
        # What a shell's wait waits for, by number: one method, not five
        # (each costs heap on a board). A number, not a bound method: that
        # would be allocated on every wait (flush() after each burst).
        s = self.session
        if target == _ANSWERED:  # connect(): CONNACK or the link's end
            return s.state != _CONNECTING
        if target == _ROOM:  # room for an arg-byte QoS 0 message (or no link to wait for)
            return s.state != _CONNECTED or s.make_room(arg) - _ACK_ROOM >= arg
        if target == _WINDOW:  # the inflight window has a free slot
            return s.inflight < s.window or s.state != _CONNECTED
        if target == _REPLIED:  # a SUBACK/UNSUBACK for entry arg
            return arg[4] >= 0
        return not len(s.store) and s.tx_end == s.tx_start  # _EMPTY: all acknowledged and written

    def _publish(self, topic, msg, retain, qos, expiry, latest, props, last):
        # A message into the session, after the caller's waits. props: MQTT
        # 5's properties, given to the session here: a callback's publish
        # meanwhile gives its own; below level 5 a named error, before
        # anything is queued or counted. QoS 1/2: into the outbox, expiry in
        # seconds from now by the wall clock its deadlines are kept in; the
        # id. QoS 0: 0 once queued or dropped (offline; or, on the last try,
        # no room in the send buffer), else the room in bytes the caller may
        # wait for, as the session reckons it (properties included).
        s = self.session
        if s.v5:
            s.props = props
        elif props:
            from .mqtt5.reasons import text
            raise ValueError(text(34, ()))
        if qos:
            return s.publish(topic, msg, qos, retain, ticks_ms(), wall() + expiry if expiry else 0, latest)
        # The session's checks, online or offline (too big, properties and
        # all, raises); offline it queues nothing. MQTT 5 sends the expiry
        # at QoS 0 too.
        n = s.publish(topic, msg, 0, retain, ticks_ms(), wall() + expiry if expiry else 0)
        if not n:
            return 0
        if s.state == _CONNECTED:
            if not last:
                return n
            if not self._busy:
                self.last_error = errors.MQTTTimeout(why(_E_NO_ROOM, n, self.timeout_ms))
        self.dropped_qos0 += 1
        return 0

    # -- events, timers, the link ----------------------------------------------

    def _housekeep(self, now):
        # Timers that run online and offline alike. Returns the ms until the
        # next connection attempt may start (0: it may now).
        s = self.session
        s.store.tick(now)
        if s.next_expiry:  # a deadline is due: policies.py drops what has passed it
            w = wall()
            if w >= s.next_expiry:
                import holdfast.policies as m  # policies.py: loaded on first use
                m.expire(s, w)
        if s.state == _CONNECTED and self.backoff and ticks_diff(now, s.since) >= (s.keepalive * 1000 or 60000):
            self.backoff = 0
        return max(0, ticks_diff(self.retry_at, now)) if self.backoff else 0

    def _events(self, now, throw):
        """Hands what the engine reports to the application, one event at a
        time, each once the engine's state is consistent. A callback's
        exception: counted in callback_errors, then raised if throw, else
        printed; the message stays acknowledged.
        Returns False if the link failed."""
        s = self.session
        while not self._busy:
            if self.pull_held > 0:  # nothing more is taken until the pull API has the held message
                if self.pull_held == s.link and s.state == _CONNECTED:
                    return True
                self.pull_held = 0  # its link is gone (pull.take())
            try:
                e = s.receive(now)
            except LINK_ERRORS as err:
                self._link_failed(err)
                return False
            if not e:
                return True
            if e == _MESSAGE and self.pull_held >= 0:
                self.pull_held = s.link
                return True
            self._busy = True
            try:
                if e == _MESSAGE:
                    if s.subs:
                        s.subs.dispatch(s.topic, s.msg, s.retained)
                    if self._on_message:
                        self._on_message(s.topic, s.msg)
                elif e == _DELIVERED:
                    if self._on_delivered:
                        self._on_delivered(s.done_pid)
                elif e == _REJECTED:
                    import holdfast.mqtt5.refused as m
                    m.rejected(self)
                else:  # REFUSED: filters the broker refused when restored
                    import holdfast.subscriptions as m
                    m.refusals(self)
            except Exception as x:
                self.callback_errors += 1
                self.callback_error = x
                # Raised out of the blocking client's check_msg() /
                # wait_msg(), as umqtt.simple does; printed by every other
                # call that waits (connect() with a session's queued messages
                # arriving behind CONNACK, publish, flush: each reports its own
                # outcome) and by the asyncio client's task, which carries on.
                if throw:
                    raise
                print_exception(x)
            finally:
                self._busy = False
                if e == _MESSAGE:  # acknowledged once the application has it
                    import holdfast.inbound as m
                    m.handled(s)
        return True

    def _dial(self, now, timeout_ms=0):
        # One step of the TCP connect to the broker, begun (resolving the
        # host anew) when none is under way: connect() waits up to
        # timeout_ms for it (connected() raises Unreachable after that), a
        # reconnect is stepped by its shell with 0 (MQTTTimeout after
        # self.timeout_ms).
        # True once linked: TLS wrapped, WebSocket upgraded, counted, CONNECT queued; False
        # while pending.
        d = self._dialing
        if d is None:
            self.attempts += 1
            self.retry_at = now
            d = self._dialing = sockets.dial(self.server, self.port)
        sock = sockets.connected(d, self.server, self.port, timeout_ms)
        if sock is None:
            if ticks_diff(now, self.retry_at) > self.timeout_ms:
                raise errors.MQTTTimeout(why(_E_NO_TCP, self.server, self.port, self.timeout_ms))
            return False
        self._dialing = None
        raw = sock
        if self.tls:
            from .tls import secure
            sock = secure(self.tls, sock, self.server, self.timeout_ms)
        if self.ws is not None:  # ws:// and wss://: the link becomes a WebSocket (ws.py)
            from .wsopen import upgrade
            sock = upgrade(sock, raw, self)
        self.sock = sock
        self.session.start(ticks_ms())
        return True

    def _close(self, state=-1):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        if self._dialing is not None:  # a connect under way is given up
            self._dialing[0].close()
        # The blocking shell's poll object (client._io_wait) goes with its socket.
        self.sock = self._dialing = self._poll = None
        self.session.lost(state)

    def _link_failed(self, e):
        # The link failed (e: why): keep the outbox, close, and schedule a reconnect.
        s = self.session
        now = ticks_ms()
        # ECONNRESET (104 on Linux and lwIP, 54 on BSD) while CONNECT is unanswered: a TLS port, likely.
        if s.state == _CONNECTING and isinstance(e, OSError) and (e.errno == 104 or e.errno == 54):
            e = errors.LinkDown(why(_E_RESET_AT_CONNECT, e))
        elif s.acked < s.link and isinstance(e, errors.MQTTError):
            # Before CONNACK: errors/broker.py, loaded with the protocol error,
            # says what one means then.
            from .errors.broker import not_broker
            e = not_broker(self, e)
        self.last_error = e
        if s.v5 and s.tx_end > s.tx_start and self.sock is not None:
            try:  # MQTT 5: the DISCONNECT a protocol error queued, if the socket takes it now
                sockets.flush(self.sock, s)
            except OSError:
                pass
        self._close()
        # ConnectError is an MQTTError: a lost link does not load its module.
        refused = isinstance(e, errors.MQTTError) and isinstance(e, errors.ConnectError)
        if self.tls and not refused:  # TLSError is loaded: tls.py raises it
            refused = isinstance(e, errors.TLSError)
        # The next attempt waits between half and all of the delay, so a
        # fleet that lost its broker together does not come back in
        # lockstep. A refusal (credentials, authorization, TLS) will come
        # again: the longest delay, not a tight loop.
        lo, hi = self.backoff_ms
        d = hi if refused else min(hi, self.backoff * 2) if self.backoff else lo
        self.backoff = d
        half = d // 2
        self.retry_at = ticks_add(now, half + getrandbits(16) % (half + 1))

# What the blocking and the asyncio client share, their one contract: the
# session they wrap, where the broker is, how the engine's events reach the
# application, what happens when the link goes down, and the counters.
from .compat import ticks_ms, ticks_diff, wall, const
from . import net
from .codec import SUBACK_FAILURE, _b, _why
from .errors import TLSError, ConnectError, LinkDown, MQTTTimeout, SubscribeError, MQTTError
from .session import Session, MESSAGE, DELIVERED
from .backoff import Backoff

_SESSION_VIEWS = ("retained", "qos", "dup", "overflowed", "expired", "replaced")

# What a link failure can raise, from the socket or from the engine.
LINK_ERRORS = (OSError, MQTTError)

# Error reasons (reasons.py has the words).
_E_WHEN_FULL = const(51)
_E_OFFLINE = const(52)
_E_RESTORE_REFUSED = const(53)
_E_SUB_REFUSED = const(54)
_E_NO_SUBACK = const(55)
_E_NO_TCP = const(56)


class Front:
    def __init__(self, client_id, server, port, user, password, keepalive, ssl, ssl_params, level,
                 size, window, outbox, retry_ms, views, timeout_ms, backoff_ms, when_full):
        if when_full not in ("refuse", "drop_oldest"):
            raise ValueError(_why(_E_WHEN_FULL, when_full))
        self.server = server
        # What open_socket wraps with: None without TLS, else a tls.Context
        # (tls.py loads only then).
        self.tls = None
        if ssl:
            from .tls import context
            self.tls = context(ssl, ssl_params or {})
        elif ssl_params:
            raise TLSError("config", "ssl_params given but TLS is off: pass ssl=True")
        self.port = port or (8883 if self.tls else 1883)
        self.s = Session(client_id, True, keepalive, level, size, window, outbox, retry_ms, 0, views,
                         when_full == "drop_oldest")
        self.s.user = user
        self.s.password = password
        self.sock = None
        self.timeout_ms = timeout_ms
        self.backoff = Backoff(backoff_ms[0], backoff_ms[1])
        self.links = 0  # network connections opened (1 + reconnects)
        self.attempts = 0  # connections tried, failed ones too
        self.last_error = None  # why the link last went down, in words
        self.dropped_qos0 = 0  # QoS 0 messages not sent: offline, or no room while in a callback
        self.restore_refused = 0  # filters the broker refused when they were restored
        self.callback_errors = 0  # exceptions raised by the application's callbacks
        self.callback_error = None  # the last of them
        self._on_message = None
        self._on_delivered = None
        self._busy = False  # a callback is running: publish() only queues

    def __repr__(self):
        # Never shows the password or key material.
        return "<%s %r %s:%d %s>" % (self.__class__.__name__, self.s.client_id, self.server,
                                     self.port, "connected" if self.s.connected else "offline")

    def set_callback(self, f):
        """f(topic, msg) for every inbound message. During the call the
        client's retained, qos and dup describe it; with views=True topic
        and msg stay valid until it returns."""
        self._on_message = f

    def set_delivered(self, f):
        """f(pid) once an outgoing QoS 1/2 message is acknowledged."""
        self._on_delivered = f

    def set_next_pid(self, pid):
        """The packet id the next QoS 1/2 publish (or subscribe) tries first,
        1..65535; ids still in use are skipped. For tests of id wrap-around."""
        self.s.set_next_pid(pid)

    def __getattr__(self, name):
        # retained, qos, dup: the message a callback is given; overflowed,
        # expired, replaced: messages dropped unsent (when_full="drop_oldest",
        # expiry, latest=True). Read from the session; one method costs less
        # heap than six properties.
        if name in _SESSION_VIEWS:
            return getattr(self.s, name)
        raise AttributeError(name)

    def set_last_will(self, topic, msg, retain=False, qos=0):
        self.s.will = (_b(topic), _b(msg), qos, retain)

    def isconnected(self):
        return self.sock is not None and self.s.connected

    def pending(self):
        """QoS 1/2 messages accepted by publish() and not yet acknowledged."""
        return len(self.s.store)

    def _queue(self, topic, msg, retain, qos, expiry, latest, now):
        # A QoS 1/2 message into the session; expiry in seconds from now.
        return self.s.publish(topic, msg, qos, retain, now, wall() + expiry if expiry else 0, latest)

    def _housekeep(self):
        # Timers that run online and offline alike.
        self.s.store.tick(ticks_ms())
        if self.s.next_expiry:
            self.s.expire(wall())

    def _need_link(self):
        if not self.isconnected():
            raise LinkDown(_why(_E_OFFLINE, self.last_error))

    def _events(self, now):
        """Hands what the engine reports to the application, one event at a
        time, each once the engine's state is consistent. A callback's
        exception: counted in callback_errors, then raised (blocking client)
        or printed (asyncio, see _report); the message stays acknowledged.
        Returns False if the link failed."""
        s = self.s
        while not self._busy:
            try:
                e = s.receive(now)
            except LINK_ERRORS as err:
                self._drop(err)
                return False
            if not e:
                return True
            self._busy = True
            try:
                if e == MESSAGE:
                    if s.subs:
                        s.subs.dispatch(s.topic, s.msg, s.retained)
                    if self._on_message:
                        self._on_message(s.topic, s.msg)
                elif e == DELIVERED:
                    if self._on_delivered:
                        self._on_delivered(s.done_pid)
                else:  # REFUSED
                    self.restore_refused += 1
                    self.last_error = SubscribeError(_why(_E_RESTORE_REFUSED, s.subs.refused))
            except Exception as x:
                self.callback_errors += 1
                self.callback_error = x
                self._report(x)
            finally:
                self._busy = False
                if e == MESSAGE:
                    s.handled()
        return True

    def _suback(self, arrived, topic, qos, handler):
        # After the wait for SUBACK: the granted QoS, or why there is none.
        if not arrived:
            raise MQTTTimeout(_why(_E_NO_SUBACK, self.timeout_ms))
        g = self.s.granted[0]
        if g == SUBACK_FAILURE:
            raise SubscribeError(_why(_E_SUB_REFUSED, topic))
        self.s.add_sub(topic, qos, handler)
        return g

    def _connect_socket(self):
        # connect(): the caller waits anyway.
        self.attempts += 1
        self.sock = net.open_socket(self.server, self.port, self.timeout_ms, self.tls)
        self.links += 1

    def _dialer(self):
        # A reconnect: a TCP connect the shell steps without waiting.
        self.attempts += 1
        return net.Connector(self.server, self.port)

    def _dialed(self, sock, since, now):
        # What a step of _dialer() gave: True once linked (TLS included),
        # False while pending; MQTTTimeout after timeout_ms.
        if sock is None:
            if ticks_diff(now, since) > self.timeout_ms:
                raise MQTTTimeout(_why(_E_NO_TCP, self.server, self.port, self.timeout_ms))
            return False
        self.sock = self.tls.secure(sock, self.server, self.timeout_ms) if self.tls else sock
        self.links += 1
        return True

    def _close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.s.lost()

    def _drop(self, err):
        # The link failed: keep the outbox, close, and schedule a reconnect.
        self.last_error = err
        self._close()
        if isinstance(err, (ConnectError, TLSError)):  # will fail the same way again
            self.backoff.refused(ticks_ms())
        else:
            self.backoff.failed(ticks_ms())

# What the blocking and the asyncio client share: the session they wrap, where
# the broker is, and what happens when the link goes down.
from .compat import ticks_ms, wall
from . import net
from .codec import SUBACK_FAILURE, _b
from .errors import TLSError, ConnectError, LinkDown, MQTTTimeout, SubscribeError
from .session import Session
from .backoff import Backoff


class Front:
    def __init__(self, client_id, server, port, user, password, keepalive, ssl, ssl_params, level,
                 size, window, outbox, retry_ms, views, timeout_ms, backoff_ms, when_full):
        if when_full not in ("refuse", "drop_oldest"):
            raise ValueError("when_full=%r: use 'refuse' or 'drop_oldest'" % (when_full,))
        self.server = server
        self.tls = net.tls_context(ssl, ssl_params)
        self.port = port or (8883 if self.tls else 1883)
        self.s = Session(client_id, True, keepalive, level, size, window, outbox, retry_ms, 0, views,
                         when_full == "drop_oldest")
        self.s.user = user
        self.s.password = password
        self.sock = None
        self.timeout_ms = timeout_ms
        self.backoff = Backoff(backoff_ms[0], backoff_ms[1])
        self.links = 0  # network connections opened (1 + reconnects)
        self.last_error = None  # why the link last went down, in words

    def __repr__(self):
        # Never shows the password or key material.
        return "<%s %r %s:%d %s>" % (self.__class__.__name__, self.s.client_id, self.server,
                                     self.port, "connected" if self.s.connected else "offline")

    def set_callback(self, f):
        """f(topic, msg) for every inbound message."""
        self.s.on_message = f

    def set_delivered(self, f):
        """f(pid) once an outgoing QoS 1/2 message is acknowledged."""
        self.s.on_delivered = f

    def set_last_will(self, topic, msg, retain=False, qos=0):
        self.s.will = (_b(topic), _b(msg), qos, retain)

    def isconnected(self):
        return self.sock is not None and self.s.connected

    def pending(self):
        """QoS 1/2 messages accepted by publish() and not yet acknowledged."""
        return len(self.s.store)

    @property
    def overflowed(self):
        """Messages dropped unsent to make room (when_full="drop_oldest")."""
        return self.s.overflowed

    @property
    def expired(self):
        """Messages dropped unsent because their expiry passed."""
        return self.s.expired

    @property
    def replaced(self):
        """Messages dropped unsent because a newer one (latest=True) took their place."""
        return self.s.replaced

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
            raise LinkDown("not connected to the broker (%s)" % self.last_error)

    def _suback(self, arrived, topic, qos, handler):
        # After the wait for SUBACK: the granted QoS, or why there is none.
        if not arrived:
            raise MQTTTimeout("no SUBACK within %d ms" % self.timeout_ms)
        g = self.s.granted[0]
        if g == SUBACK_FAILURE:
            raise SubscribeError("subscription to %r refused by the broker" % topic)
        self.s.add_sub(topic, qos, handler)
        return g

    def _connect_socket(self):
        self.sock = net.open_socket(self.server, self.port, self.timeout_ms, self.tls)
        self.links += 1

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

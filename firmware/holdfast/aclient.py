# The asyncio client: the same Session engine behind coroutines, for boards
# whose application is built on asyncio. One task reads and runs the timers;
# publish() and friends only queue bytes and write what the socket takes.
import asyncio
from .compat import ticks_ms, ticks_diff, ticks_add
from . import net
from .codec import _b
from .errors import TLSError, MQTTProtocolError, ConnectError, MQTTTimeout, LinkDown
from .front import Front

_MP = hasattr(asyncio, "core")


if _MP:
    async def _readable(s):
        # Resumes when s has data to read (or is closed).
        yield asyncio.core._io_queue.queue_read(s)
else:
    async def _readable(s):
        if hasattr(s, "pending") and s.pending():  # TLS bytes already decrypted
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = s.fileno()
        loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            loop.remove_reader(fd)


async def _sleep_ms(ms):
    await asyncio.sleep(ms / 1000)


class AsyncClient(Front):
    """asyncio MQTT client. Arguments as MQTTClient's; every method that
    talks to the broker is a coroutine. After connect() a background task
    keeps the link: keepalive, reconnect with backoff, re-sending the outbox.
    """

    def __init__(self, client_id, server, port=0, user=None, password=None, keepalive=60,
                 ssl=None, ssl_params=None, level=4, size=1024, window=16, outbox=None, retry_ms=0,
                 views=False, timeout_ms=10000, backoff_ms=(1000, 60000), when_full="refuse"):
        Front.__init__(self, client_id, server, port, user, password, keepalive, ssl, ssl_params,
                       level, size, window, outbox, retry_ms, views, timeout_ms, backoff_ms, when_full)
        self.progress = asyncio.Event()
        self.task = None

    async def connect(self, clean_session=True):
        """Connects and waits for CONNACK; afterwards the link is kept up in
        the background. Raises ConnectError, MQTTTimeout or OSError."""
        self.s.clean = clean_session
        self._close()
        self._open()
        if self.task is None:
            self.task = asyncio.create_task(self._run())
        if not await self._until(self._connected, self.timeout_ms):
            err = self.last_error
            if isinstance(err, ConnectError):
                self._stop()
                raise err
            self._stop()
            raise MQTTTimeout("no CONNACK within %d ms (%s)" % (self.timeout_ms, err))
        self.backoff.reset()
        return self.s.session_present

    async def publish(self, topic, msg, retain=False, qos=0, expiry=0, latest=False):
        """As MQTTClient.publish; waits (bounded) for room in the window."""
        s = self.s
        if not qos:
            if not self.isconnected():
                return None
            if not s.publish(topic, msg, 0, retain, ticks_ms()):
                await self._until(self._tx_room, self.timeout_ms)
                s.publish(topic, msg, 0, retain, ticks_ms())
            self._write()
            return None
        if self.isconnected() and s.inflight >= s.window:
            await self._until(self._window_open, self.timeout_ms)
        pid = self._queue(topic, msg, retain, qos, expiry, latest, ticks_ms())
        self._write()
        return pid

    async def subscribe(self, topic, qos=0, handler=None):
        topic = _b(topic)
        self._need_link()
        pid = self.s.subscribe([(topic, qos)])
        self._write()
        arrived = await self._until(lambda: self.s.ack_pid == pid, self.timeout_ms)
        return self._suback(arrived, topic, qos, handler)

    async def unsubscribe(self, topic):
        topic = _b(topic)
        self._need_link()
        pid = self.s.unsubscribe([topic])
        self.s.remove_sub(topic)
        self._write()
        if not await self._until(lambda: self.s.ack_pid == pid, self.timeout_ms):
            raise MQTTTimeout("no UNSUBACK within %d ms" % self.timeout_ms)

    async def flush(self, timeout_ms=None):
        """As MQTTClient.flush."""
        done = await self._until(lambda: not len(self.s.store), timeout_ms or self.timeout_ms)
        return self.s.store.sync() and done

    async def disconnect(self):
        if self.sock is not None:
            self.s.disconnect()
            self._write()
        self._stop()

    # -- internals -----------------------------------------------------------

    def _connected(self):
        return self.s.connected

    def _window_open(self):
        return self.s.inflight < self.s.window or not self.s.connected

    def _tx_room(self):
        return self.s.room() > 64

    def _open(self):
        self._connect_socket()
        self.s.start(ticks_ms())
        self._write()

    def _stop(self):
        if self.task is not None:
            self.task.cancel()
            self.task = None
        self._close()

    def _drop(self, err):
        Front._drop(self, err)
        self.progress.set()  # wake the waiters: they see the link is down

    def _write(self):
        s = self.s
        if self.sock is None:
            return
        try:
            while s.t1 > s.t0:
                n = net.flush(self.sock, s)
                if not n:
                    return  # the timer task writes the rest
                s.sent(n, ticks_ms())
        except OSError as e:
            self._drop(e)

    async def _until(self, cond, timeout_ms):
        deadline = ticks_add(ticks_ms(), timeout_ms)
        while not cond():
            left = ticks_diff(deadline, ticks_ms())
            if left <= 0:
                return False
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), min(left, 100) / 1000)
            except asyncio.TimeoutError:
                pass
        return True

    async def _run(self):
        # Reader: wait for bytes, feed the engine, wake the waiters.
        ticker = asyncio.create_task(self._tick())
        try:
            while True:
                if self.sock is None:
                    now = ticks_ms()
                    if not self.backoff.due(now):
                        await _sleep_ms(min(self.backoff.wait_ms(now), 1000))
                        continue
                    try:
                        self._open()
                    except (OSError, TLSError) as e:
                        self._drop(e)
                        continue
                sock = self.sock
                await _readable(sock)
                if sock is not self.sock:
                    continue
                try:
                    n = net.read_into(sock, self.s.rx.tail())
                    if n:
                        self.s.rx.filled(n)
                        self.s.receive(ticks_ms())
                except (OSError, MQTTProtocolError, LinkDown, ConnectError) as e:
                    self._drop(e)
                    continue
                self._write()
                self.progress.set()
        finally:
            ticker.cancel()

    async def _tick(self):
        # Timers and leftover writes, a few times a second.
        while True:
            await _sleep_ms(100)
            self._housekeep()
            if self.sock is None:
                continue
            s = self.s
            if not s.connected and ticks_diff(ticks_ms(), s.last_rx) > self.timeout_ms:
                self._drop(MQTTTimeout("no CONNACK within %d ms" % self.timeout_ms))
                continue
            try:
                s.tick(ticks_ms())
            except LinkDown as e:
                self._drop(e)
                continue
            self._write()

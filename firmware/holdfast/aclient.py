# The asyncio client: the same Session engine behind coroutines, for boards
# whose application is built on asyncio. One task reads and runs the timers;
# publish() and friends only queue bytes and write what the socket takes.
import asyncio
from time import ticks_ms, ticks_diff, ticks_add
from sys import print_exception
from .shell import Shell, LINK_ERRORS
from .sockets import flush, read_into

# The session's link states (session.py) and what Shell._ready() waits for
# (shell.py), as private consts: no module-level names.
_CLOSED = const(0)
_OFFLINE = const(1)
_ANSWERED = const(0)
_ROOM = const(1)
_WINDOW = const(2)
_REPLIED = const(3)
_EMPTY = const(4)
_ACK_ROOM = const(16)  # tx bytes Session.receive() needs free to take a packet (session.py)

_MP = hasattr(asyncio, "core")


if _MP:
    async def _readable(c, s):
        # Resumes when s has data to read, or is closed (poll reports the
        # closed descriptor, which wakes the reader).
        yield asyncio.core._io_queue.queue_read(s)
else:
    async def _readable(c, s):
        # Resumes when s has data to read, or when the client drops the link: a closed
        # descriptor is never reported to add_reader, so _close() wakes us.
        if hasattr(s, "pending") and s.pending():  # TLS bytes already decrypted
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = s.fileno()
        loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
        c.waker = fut
        try:
            await fut
        finally:
            c.waker = None
            loop.remove_reader(fd)


async def _sleep_ms(ms):
    await asyncio.sleep(ms / 1000)


class AsyncClient(Shell):
    """asyncio MQTT client. Arguments as MQTTClient's; every method that
    talks to the broker is a coroutine. After connect() a background task
    keeps the link: keepalive, reconnect with backoff, re-sending the outbox.
    """

    def __init__(self, client_id, server, port=0, user=None, password=None, keepalive=60,
                 ssl=None, ssl_params=None, level=4, size=1024, window=16, outbox=None, retry_ms=0,
                 views=False, timeout_ms=10000, reconnect=True, backoff_ms=(1000, 60000),
                 when_full="refuse", headers=None, rx_size=0):
        Shell.__init__(self, client_id, server, port, user, password, keepalive, ssl, ssl_params,
                       level, size, window, outbox, retry_ms, views, timeout_ms, reconnect,
                       backoff_ms, when_full, headers, rx_size)
        self.progress = asyncio.Event()
        self.task = None
        self.faults = 0  # unexpected exceptions the background task survived (in last_error)
        self.waker = None

    async def connect(self, clean_session=True, timeout_ms=None):
        """Connects and waits for CONNACK; afterwards the link is kept up in
        the background. Raises ConnectError, MQTTTimeout, LinkDown or OSError
        as soon as the attempt fails (and the task stops)."""
        self._connect_begin(clean_session, timeout_ms)
        try:
            self._dial(ticks_ms(), self.timeout_ms)
            self._write()
        except LINK_ERRORS as e:
            self._link_failed(e)
            self._stop()
            raise
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
        # The engine's CONNACK watchdog ends the wait; the bound is a backstop.
        link = self.session.link
        await self._until(_ANSWERED, 0, 2 * self.session.connack_ms)
        try:
            return self._connect_end(link)
        except Exception:
            self._stop()
            raise

    async def publish(self, topic, msg, retain=False, qos=0, expiry=0, latest=False, props=None):
        """As MQTTClient.publish; waits (bounded) for room in the window."""
        pid = None
        if qos:
            if not self._busy and not self._ready(_WINDOW, 0):
                await self._until(_WINDOW, 0, self.timeout_ms)
            pid = self._publish(topic, msg, retain, qos, expiry, latest, props, True)
        else:
            n = self._publish(topic, msg, retain, 0, expiry, False, props, self._busy)
            if n:
                await self._until(_ROOM, n, self.timeout_ms)
                self._publish(topic, msg, retain, 0, expiry, False, props, True)
        self._write()
        return pid

    async def subscribe(self, topic, qos=0, handler=None, **opts):
        from .subscriptions import ask, answer  # the subscribe side: loaded on the first subscribe()
        e = ask(self, topic, qos, handler, opts)
        self._write()
        return answer(self, e, await self._until(_REPLIED, e, self.timeout_ms))

    async def unsubscribe(self, topic):
        await self.subscribe(topic, None)  # qos None: UNSUBSCRIBE

    async def flush(self, timeout_ms=None):
        """As MQTTClient.flush."""
        self._idle()
        done = self._ready(_EMPTY, 0) or timeout_ms != 0 and await self._until(
            _EMPTY, 0, self.timeout_ms if timeout_ms is None else timeout_ms)
        return self.session.store.sync() and done

    # The pull API (pull.py): `async for topic, msg, retained, qos in c` (or
    # c.messages() first, before subscribe() not to miss a retained
    # message), as MQTTClient.next_msg() gives them; it ends after disconnect().
    def __aiter__(self):
        if self.pull_held < 0:
            self.pull_held = 0
        return self

    async def __anext__(self):
        import holdfast.pull as p
        while True:
            m = p.take(self)
            if m is not None:
                self.progress.set()  # the reader waits for this (_read)
                return m
            if self.session.state == _CLOSED:
                raise StopAsyncIteration
            self.progress.clear()
            await self.progress.wait()

    async def ping(self):
        """Sends PINGREQ; LinkDown without a link. A PINGRESP that does not
        come within the keepalive (30 s with keepalive=0) drops the link."""
        self._idle(True)
        self.session.ping(ticks_ms())
        self._write()

    async def disconnect(self):
        """Queues DISCONNECT and waits (up to timeout_ms) until the socket
        has taken it and what was queued before it, as MQTTClient does: a
        link closed without it makes the broker publish the will. Then
        closes the link and stops the task."""
        s = self.session
        if self.sock is not None:
            s.disconnect()
            deadline = ticks_add(ticks_ms(), self.timeout_ms)
            self._write()
            while s.tx_end > s.tx_start and self.sock is not None and ticks_diff(deadline, ticks_ms()) > 0:
                await _sleep_ms(20)  # a full socket buffer: it takes more once the peer reads
                self._write()
        self._stop()

    # -- internals -----------------------------------------------------------

    def _stop(self):
        if self.task is not None:
            self.task.cancel()
            self.task = None
        self._close(_CLOSED)

    def _close(self, state=-1):
        Shell._close(self, state)
        # The reader may be parked on the old socket: wake it, and the
        # waiters, who see the link is down.
        if self.waker is not None and not self.waker.done():
            self.waker.set_result(None)
        self.progress.set()

    def _write(self):
        s = self.session
        if self.sock is None:
            return
        try:
            while s.tx_end > s.tx_start:
                n = flush(self.sock, s)
                if not n:
                    return  # the timer task writes the rest
                s.sent(n, ticks_ms())
        except OSError as e:
            self._link_failed(e)

    async def _until(self, target, arg, timeout_ms):
        self._idle()
        deadline = ticks_add(ticks_ms(), timeout_ms)
        while not self._ready(target, arg):
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
        # Reader: wait for bytes, feed the engine, hand its events on, wake
        # the waiters (_read). It outlives every failure: a link error drops
        # the link (reconnect follows), anything else is counted in faults,
        # kept in last_error, and the link is dropped too, as its state is
        # unknown.
        ticker = asyncio.create_task(self._tick())
        try:
            while True:
                try:
                    await self._read()
                except LINK_ERRORS as e:
                    self._link_failed(e)
                except Exception as e:
                    self._fault(e)
                    await _sleep_ms(100)
        finally:
            ticker.cancel()

    async def _read(self):
        # One turn of the reader; without a link, a step of the reconnect
        # when the backoff allows.
        sock = self.sock
        if sock is None:
            now = ticks_ms()
            if self._dialing is None:
                if self.session.state != _OFFLINE or not self.reconnect:
                    await _sleep_ms(100)  # closed, or no reconnects: connect() starts again
                    return
                wait = self._housekeep(now)  # ms until the next attempt
                if wait:
                    await _sleep_ms(min(wait, 1000))
                    return
            # The reconnect's TCP connect, a step a turn while the other
            # tasks run (connect() and _stop() give it up: _close()).
            if self._dial(now):
                self._write()
            else:
                await _sleep_ms(20)
            return
        s = self.session
        if self.pull_held == s.link:  # a message waits to be pulled: go on once it is (__anext__)
            self.progress.clear()
            await self.progress.wait()
            if self._events(ticks_ms(), False):  # what was read behind it
                self._write()
            self.progress.set()
            return
        # What rx holds that the engine left for want of room to acknowledge
        # it is taken before the socket is waited on: the broker may send
        # nothing more (keepalive=0), and its packets would wait for good.
        if s.rx.end == s.rx.start or s.make_room() >= _ACK_ROOM:
            await _readable(self, sock)
        else:
            await _sleep_ms(10)  # the socket took none of the acks: let it drain
        if sock is not self.sock:
            return
        # Nothing read into a full rx: it holds packets the engine cannot
        # take until tx drains (acknowledgements need room).
        full = not read_into(sock, s) and s.rx.end == len(s.rx.buf)
        while self._events(ticks_ms(), False):
            short = s.make_room() < _ACK_ROOM  # receive() stopped for room, not for want of packets
            self._write()
            if not short or s.make_room() < _ACK_ROOM:
                break  # all taken; or the socket took nothing: the next turn goes on
        self.progress.set()
        if full:
            await _sleep_ms(10)  # let the ticker write

    def _fault(self, e):
        self.faults += 1
        print_exception(e)
        self._link_failed(e)

    async def _tick(self):
        # Timers and leftover writes, a few times a second; as the reader,
        # it outlives every failure.
        while True:
            await _sleep_ms(100)
            try:
                self._housekeep(ticks_ms())
                if self.sock is not None:
                    self.session.tick(ticks_ms())
                    self._write()
            except LINK_ERRORS as e:
                self._link_failed(e)
            except Exception as e:
                self._fault(e)


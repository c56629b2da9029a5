"""A TCP proxy that adds latency and injects faults (CPython, asyncio).

    from fleet.proxy import Proxy
    with Proxy(0, ("127.0.0.1", broker_port), delay_ms=10) as p:   # 20 ms RTT
        connect("127.0.0.1", p.port)
        p.set_blackhole(True)     # partition: nothing passes either way
        p.set_blackhole(False)    # healed: held bytes flow again
        p.reset_all()             # RST both sides of every connection

Every byte is forwarded in order. Each direction is delayed separately, so
delay_ms=10 adds 20 ms to a round trip. Faults:

    delay_ms, jitter_ms   one-way delay, plus a uniform random 0..jitter_ms
                          (never reordering: a chunk leaves after the previous)
    reset_prob            per forwarded chunk, the probability that the
                          connection is reset (RST to both sides)
    reset_after_bytes     reset a connection once it forwarded this many bytes
                          (either direction); 0 = never
    blackhole             partition: stop reading both sides, so bytes stay in
                          the kernel buffers, senders stall, nothing arrives;
                          on heal they flow (as TCP would after a short outage).
                          With drop=True the bytes read are discarded instead.
                          New connections are accepted (the kernel does that)
                          but not connected onward until healed.
    refuse                new connections are reset at once (broker down)

Limits: the client's TCP peer is the proxy's kernel, so the client sees its
own segments acknowledged at once even during a partition; a black hole here
is at the byte-stream level, not the packet level.

CLI (for shells and other processes); SIGUSR1 toggles the black hole,
SIGUSR2 resets every connection, SIGINT/SIGTERM stop:

    PYTHONPATH=tools python -m fleet.proxy --target 127.0.0.1:1883 [--listen 127.0.0.1:0]
        [--delay-ms 10] [--jitter-ms 0] [--reset-prob 0] [--seed N]
"""

import argparse
import asyncio
import collections
import random
import signal
import socket
import struct
import sys
import threading

_QUEUE_LIMIT = 1 << 20  # bytes held per direction before reading pauses


class _Pipe:
    """One direction of one connection: read, hold until due, write."""

    def __init__(self, proxy, conn, reader, writer, name):
        self.proxy = proxy
        self.conn = conn
        self.reader = reader
        self.writer = writer
        self.name = name
        self.q = collections.deque()
        self.queued = 0
        self.ready = asyncio.Event()
        self.room = asyncio.Event()
        self.room.set()
        self.last_due = 0.0

    async def read_loop(self):
        p = self.proxy
        loop = asyncio.get_running_loop()
        try:
            while True:
                await p._healed.wait()
                await self.room.wait()
                data = await self.reader.read(65536)
                if not data:
                    self._put(None, loop.time())
                    return
                if p.blackhole and p.drop:
                    p.stats["dropped_bytes"] += len(data)
                    continue
                self.conn.forwarded += len(data)
                if p.reset_prob and p._rng.random() < p.reset_prob:
                    self.conn.reset("random reset")
                    return
                if p.reset_after_bytes and self.conn.forwarded >= p.reset_after_bytes:
                    self.conn.reset("reset after %d bytes" % p.reset_after_bytes)
                    return
                delay = p.delay_ms
                if p.jitter_ms:
                    delay += p._rng.random() * p.jitter_ms
                due = max(self.last_due, loop.time() + delay / 1000.0)
                self._put(data, due)
        except (ConnectionError, OSError):
            self.conn.reset(None)
        except asyncio.CancelledError:
            pass

    def _put(self, data, due):
        self.last_due = due
        self.q.append((due, data))
        if data is not None:
            self.queued += len(data)
            if self.queued > _QUEUE_LIMIT:
                self.room.clear()
        self.ready.set()

    async def write_loop(self):
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self.q:
                    self.ready.clear()
                    await self.ready.wait()
                due, data = self.q[0]
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self.proxy._healed.wait()
                self.q.popleft()
                if data is None:
                    if self.writer.can_write_eof():
                        self.writer.write_eof()
                    self.conn.half_closed()
                    return
                self.queued -= len(data)
                if self.queued <= _QUEUE_LIMIT // 2:
                    self.room.set()
                self.writer.write(data)
                self.proxy.stats[self.name + "_bytes"] += len(data)
                await self.writer.drain()
        except (ConnectionError, OSError):
            self.conn.reset(None)
        except asyncio.CancelledError:
            pass


class _Conn:
    def __init__(self, proxy, cr, cw):
        self.proxy = proxy
        self.cr, self.cw = cr, cw
        self.ur = self.uw = None
        self.tasks = []
        self.forwarded = 0
        self.closed_halves = 0
        self.done = False

    async def run(self):
        p = self.proxy
        try:
            await p._healed.wait()
            self.ur, self.uw = await asyncio.open_connection(*p.target)
        except (ConnectionError, OSError):
            self.reset(None)
            return
        except asyncio.CancelledError:
            self.reset(None)
            return
        up = _Pipe(p, self, self.cr, self.uw, "up")
        down = _Pipe(p, self, self.ur, self.cw, "down")
        self.tasks = [asyncio.ensure_future(c) for c in
                      (up.read_loop(), up.write_loop(), down.read_loop(), down.write_loop())]
        try:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        except asyncio.CancelledError:
            pass
        self.close()

    def half_closed(self):
        self.closed_halves += 1
        if self.closed_halves >= 2:
            self.close()

    def close(self):
        if self.done:
            return
        self.done = True
        for w in (self.cw, self.uw):
            if w is not None:
                w.close()
        for t in self.tasks:
            t.cancel()
        self.proxy._conns.discard(self)

    def reset(self, why):
        """Abort both sides with RST."""
        if self.done:
            return
        if why:
            self.proxy.stats["resets"] += 1
        for w in (self.cw, self.uw):
            if w is None:
                continue
            sock = w.get_extra_info("socket")
            try:
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            w.transport.abort()
        self.done = True
        for t in self.tasks:
            t.cancel()
        self.proxy._conns.discard(self)


class Proxy:
    """See the module docstring. start() runs it on its own thread and event
    loop; every setter may be called from any thread."""

    def __init__(self, listen_port=0, target=("127.0.0.1", 1883), delay_ms=0, jitter_ms=0,
                 reset_prob=0.0, reset_after_bytes=0, blackhole=False, drop=False, refuse=False,
                 listen_host="127.0.0.1", seed=None):
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.port = None
        self.target = (target[0], int(target[1]))
        self.delay_ms = delay_ms
        self.jitter_ms = jitter_ms
        self.reset_prob = reset_prob
        self.reset_after_bytes = reset_after_bytes
        self.blackhole = blackhole
        self.drop = drop
        self.refuse = refuse
        self._rng = random.Random(seed)
        self.stats = {"connections": 0, "up_bytes": 0, "down_bytes": 0, "resets": 0,
                      "refused": 0, "dropped_bytes": 0}
        self._conns = set()
        self._loop = None
        self._thread = None
        self._server = None
        self._healed = None
        self._started = threading.Event()
        self._error = None

    # -- lifecycle ------------------------------------------------------------

    def start(self, timeout=10.0):
        """Start on a background thread; returns self once listening."""
        self._thread = threading.Thread(target=self._thread_main, name="proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError("proxy did not start within %.0f s" % timeout)
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout=10.0):
        loop = self._loop
        if loop is None or self._thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            fut.result(timeout)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- fault control (thread-safe) ----------------------------------------------

    def set_delay(self, delay_ms, jitter_ms=None):
        self.delay_ms = delay_ms
        if jitter_ms is not None:
            self.jitter_ms = jitter_ms

    def set_blackhole(self, on, drop=False):
        """Partition (on=True) or heal. drop=True discards bytes read meanwhile."""
        self.drop = drop
        self.blackhole = on
        self._call(self._apply_blackhole)

    def set_refuse(self, on):
        self.refuse = on

    def reset_all(self):
        """RST every open connection (both sides)."""
        self._call(self._reset_all)

    @property
    def connections(self):
        return len(self._conns)

    # -- internals ------------------------------------------------------------

    def _call(self, fn):
        loop = self._loop
        if loop is None:
            return
        if threading.current_thread() is self._thread:
            fn()
        else:
            done = threading.Event()

            def run():
                try:
                    fn()
                finally:
                    done.set()
            loop.call_soon_threadsafe(run)
            done.wait(5.0)

    def _apply_blackhole(self):
        if self.blackhole and not self.drop:
            self._healed.clear()
        else:
            self._healed.set()

    def _reset_all(self):
        for c in list(self._conns):
            c.reset("reset_all")

    def _thread_main(self):
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:  # report to start()
            self._error = e
            self._started.set()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _serve(self):
        self._healed = asyncio.Event()
        self._apply_blackhole()
        self._server = await asyncio.start_server(self._accept, self.listen_host, self.listen_port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader, writer):
        self.stats["connections"] += 1
        if self.refuse:
            self.stats["refused"] += 1
            c = _Conn(self, reader, writer)
            c.reset(None)
            return
        c = _Conn(self, reader, writer)
        self._conns.add(c)
        await c.run()

    async def _shutdown(self):
        if self._server is not None:
            self._server.close()
        for c in list(self._conns):
            c.close()
        await asyncio.sleep(0)


def _hostport(s, default_host="127.0.0.1"):
    host, _, port = s.rpartition(":")
    return (host or default_host, int(port))


def main(argv=None):
    ap = argparse.ArgumentParser(description="TCP proxy with latency and fault injection")
    ap.add_argument("--target", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on (port 0: free)")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay, each direction")
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--reset-prob", type=float, default=0.0, help="per forwarded chunk")
    ap.add_argument("--reset-after-bytes", type=int, default=0)
    ap.add_argument("--blackhole", action="store_true", help="start partitioned")
    ap.add_argument("--drop", action="store_true", help="black hole discards instead of holding")
    ap.add_argument("--refuse", action="store_true", help="reset new connections")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    lh, lp = _hostport(a.listen)
    p = Proxy(lp, _hostport(a.target), a.delay_ms, a.jitter_ms, a.reset_prob, a.reset_after_bytes,
              a.blackhole, a.drop, a.refuse, lh, a.seed)
    p.start()
    print("proxy listening on %s:%d -> %s:%d" % (lh, p.port, p.target[0], p.target[1]), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: p.set_blackhole(not p.blackhole, p.drop))
    signal.signal(signal.SIGUSR2, lambda *_: p.reset_all())
    while not stop.wait(0.5):
        pass
    p.stop()
    print("proxy stopped: %s" % p.stats, flush=True)


if __name__ == "__main__":
    sys.exit(main())

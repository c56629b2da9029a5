# asyncio streams over the in-memory sockets of socket.py, for the
# WebAssembly port, whose asyncio (run by the JavaScript event loop) has no
# open_connection: a client that reads with `await stream.read(n)` and
# writes with write() and `await drain()` (mqtt_async in the footprint
# bench) connects to the in-memory broker. The broker answers inside
# write(), so a reader with nothing to read waits on an Event that write()
# and close() set: no polling.
import asyncio
import socket


class Stream:
    def __init__(self, sock):
        self.sock = sock
        self.ready = asyncio.Event()

    async def read(self, n):
        while not self.sock.rx and self.sock.up:
            self.ready.clear()
            await self.ready.wait()
        return self.sock.read(n)  # b"" once closed, as a stream at EOF

    def write(self, buf):
        self.sock.write(buf)
        if self.sock.rx:
            self.ready.set()

    async def drain(self):
        pass

    def close(self):
        self.sock.close()
        self.ready.set()

    async def wait_closed(self):
        pass


async def open_connection(host, port):
    sock = socket.socket()
    sock.connect((host, port))
    s = Stream(sock)
    return s, s

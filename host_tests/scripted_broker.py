# A broker whose every move a test writes down: a TCP server on loopback
# that plays one script per accepted connection, in exact bytes. For the
# shell-contract tests, where the timing of a fault matters and mosquitto
# cannot be steered; the client under test runs in its own process, under
# either runtime, over a real socket.
import socket
import threading
import time

import consts as mq
from holdfast import broker
from holdfast.broker import feed
from packets import current, encode

_BUF = bytearray(65536)


class Conn:
    """One accepted connection, seen from the broker's side."""

    def __init__(self, sock):
        self.sock = sock
        self.reader = broker.BrokerReader(65536)
        self.got = []  # every packet received, as tuples (packets.py)
        self.unread = []  # those expect() has not returned yet

    def send(self, *packets):
        data = b""
        for p in packets:
            data += bytes(_BUF[:encode(_BUF, p)])
        self.sock.sendall(data)

    def send_raw(self, data):
        self.sock.sendall(data)

    def expect(self, type, timeout=10.0):
        """Reads until a packet of this type arrives; returns it. AssertionError
        if the connection closes or the time runs out first."""
        deadline = time.monotonic() + timeout
        while True:
            for p in self.unread:
                if p[0] == type:
                    self.unread.remove(p)
                    return p
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError("no packet of type %d; got %r" % (type, self.got))

    def serve(self, timeout=20.0):
        """Answers like a broker (PUBACK, PUBREC, PUBCOMP, PINGRESP, SUBACK
        granted) until DISCONNECT, the link closes, or the time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            while self.unread:
                p = self.unread.pop(0)
                t = p[0]
                if t == mq.DISCONNECT:
                    return
                if t == mq.PUBLISH and p[3]:
                    self.send((mq.PUBACK if p[3] == 1 else mq.PUBREC, p[6]))
                elif t == mq.PUBREL:
                    self.send((mq.PUBCOMP, p[1]))
                elif t == mq.PINGREQ:
                    self.send((mq.PINGRESP,))
                elif t == mq.SUBSCRIBE:
                    self.send((mq.SUBACK, p[1], tuple(q for f, q in p[2])))
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                return

    def idle(self, seconds):
        """Reads (and records) whatever comes for this long, answering nothing."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self._read(deadline - time.monotonic()):
                return

    def _read(self, timeout):
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return True
        except OSError:
            return False
        if not data:
            return False
        feed(self.reader, data)
        t = self.reader.next()
        while t:
            p = current(self.reader)
            self.got.append(p)
            self.unread.append(p)
            t = self.reader.next()
        return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class ScriptedBroker:
    """Plays scripts[i](conn) for the i-th connection accepted; a connection
    beyond the scripts is closed at once. accepts: connections accepted;
    errors: what the scripts raised (a test asserts it is empty)."""

    def __init__(self, *scripts):
        self.scripts = list(scripts)
        self.conns = []
        self.errors = []
        self.accepts = 0
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        # accept() wakes up this often to see done; the socket is closed
        # only once the thread is over (close()).
        self.srv.settimeout(0.1)
        self.port = self.srv.getsockname()[1]
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        threads = []
        while not self.done.is_set():
            try:
                s, _ = self.srv.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            conn = Conn(s)
            self.conns.append(conn)
            i = self.accepts
            self.accepts += 1
            if i >= len(self.scripts):
                conn.close()
                continue
            t = threading.Thread(target=self._play, args=(self.scripts[i], conn), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(10)

    def _play(self, script, conn):
        try:
            script(conn)
        except Exception as e:  # reported to the test, which asserts there is none
            self.errors.append("%s: %s" % (type(e).__name__, e))
        finally:
            conn.close()

    def close(self):
        self.done.set()
        self.thread.join()  # within 0.1 s, plus the scripts' own bounds
        self.srv.close()


def connack(conn, present=False):
    """The usual opening: CONNECT in, CONNACK out; returns the CONNECT."""
    p = conn.expect(mq.CONNECT)
    conn.send((mq.CONNACK, present, 0))
    return p

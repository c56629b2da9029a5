# A model MQTT 3.1.1 broker behind an in-memory network, for the randomised
# engine test (test_engine_random.py). It is the test's oracle, so it shares
# no code with the firmware: its own codec, its own session rules. It keeps
# persistent sessions (subscriptions, the outbound QoS 1/2 queue and what is
# in flight, inbound QoS 2 ids awaiting PUBREL), re-sends with DUP on a
# reconnect as [MQTT-4.4.0-1] requires, publishes its own QoS 0/1/2 messages
# to the client's subscriptions, and records everything the client sent.
#
# Faults are chosen by the caller's seeded random.Random: a link cut at any
# byte of either direction (the bytes not yet delivered are lost), a closed,
# reset, silent (black hole) or stalled (peer stops reading) link, a restart
# that keeps the sessions (persistence on) or loses them (persistence off),
# and a broker that refuses connections for a while.
import errno

_TICKS = (1 << 30) - 1

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14
NAMES = {1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL",
         7: "PUBCOMP", 8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE", 11: "UNSUBACK",
         12: "PINGREQ", 13: "PINGRESP", 14: "DISCONNECT"}


# -- codec (broker side) -------------------------------------------------------

def _rl(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _packet(ptype, flags, body):
    return bytes([ptype << 4 | flags]) + _rl(len(body)) + body


def _u16(n):
    return bytes([n >> 8, n & 0xFF])


def _str(b):
    return _u16(len(b)) + b


def enc_publish(topic, payload, qos, dup, pid, retain=False):
    flags = (8 if dup else 0) | qos << 1 | (1 if retain else 0)
    return _packet(PUBLISH, flags, _str(topic) + (_u16(pid) if qos else b"") + payload)


def enc_ack(ptype, pid):
    return _packet(ptype, 2 if ptype == PUBREL else 0, _u16(pid))


class Hung(BaseException):
    """A call of the client went round its loop this many times without
    returning (a BaseException: the client must not swallow it)."""


class Violation(Exception):
    """The client broke MQTT 3.1.1: a real broker closes the link."""


def split(buf):
    """Complete packets at the front of buf: ([(type, flags, body)], bytes used)."""
    out = []
    i = 0
    while i < len(buf):
        j = i + 1
        n = mult = 0
        while True:
            if j >= len(buf):
                return out, i
            b = buf[j]
            n += (b & 0x7F) << mult
            j += 1
            if not b & 0x80:
                break
            mult += 7
            if mult > 21:
                raise Violation("remaining length longer than 4 bytes")
        if j + n > len(buf):
            return out, i
        out.append((buf[i] >> 4, buf[i] & 15, bytes(buf[j:j + n])))
        i = j + n
    return out, i


def _take_str(body, i, what):
    if i + 2 > len(body):
        raise Violation("%s: length past the end" % what)
    n = body[i] << 8 | body[i + 1]
    if i + 2 + n > len(body):
        raise Violation("%s: string past the end" % what)
    return body[i + 2:i + 2 + n], i + 2 + n


def _pid(body, what):
    if len(body) < 2:
        raise Violation("%s without a packet id" % what)
    pid = body[0] << 8 | body[1]
    if not pid:
        raise Violation("%s with packet id 0" % what)
    return pid


def matches(flt, topic):
    f = flt.split(b"/")
    t = topic.split(b"/")
    for i, part in enumerate(f):
        if part == b"#":
            return True
        if i >= len(t) or (part != b"+" and part != t[i]):
            return False
    return len(f) == len(t)


# -- the network ---------------------------------------------------------------

class Link:
    """One TCP connection: bytes the client wrote that the broker has not read
    (c2b), bytes the broker wrote that the client has not read (b2c). Once
    cut, the client sees end (EOF after what reached it), reset (ECONNRESET),
    silent (writes vanish, nothing ever arrives) or stall (writes block,
    nothing arrives)."""

    def __init__(self, n):
        self.n = n
        self.c2b = bytearray()
        self.b2c = bytearray()
        self.up = True
        self.mode = None  # after the cut: "end", "reset", "silent", "stall"
        self.c2b_left = None  # cut once this many more client bytes went out
        self.b2c_left = None  # cut once this many more broker bytes went out
        self.client_closed = False
        self.b2c_read = 0  # bytes the client has read
        self.new_session = None  # the Session this link's CONNECT created


class Socket:
    """The client's end of a Link, with the methods holdfast's net module uses
    on CPython (recv_into, send) and on MicroPython (readinto, write)."""

    def __init__(self, link, net):
        self.link = link
        self.net = net

    def recv_into(self, buf, n=0):
        link = self.link
        self.net.op()
        if self.link.client_closed:
            raise OSError(errno.EBADF, "socket closed")
        if link.b2c:
            k = min(len(buf), len(link.b2c), self.net.read_chunk())
            buf[:k] = link.b2c[:k]
            del link.b2c[:k]
            if link.b2c_read < 4 <= link.b2c_read + k:
                self.net.log("client has read the CONNACK of link %d" % link.n)
                if link.new_session is not None:
                    link.new_session.announced = True
            link.b2c_read += k
            return k
        if link.up or link.mode in ("silent", "stall"):
            raise OSError(errno.EAGAIN, "no data")
        if link.mode == "reset":
            raise OSError(errno.ECONNRESET, "connection reset by peer")
        return 0

    readinto = recv_into

    def send(self, data):
        link = self.link
        self.net.op()
        if link.client_closed:
            raise OSError(errno.EBADF, "socket closed")
        if not link.up:
            if link.mode == "silent":
                return len(data)
            if link.mode == "stall":
                raise OSError(errno.EAGAIN, "send buffer full")
            raise OSError(errno.EPIPE if link.mode == "end" else errno.ECONNRESET, "link cut")
        n = self.net.write_chunk(len(data))
        if n == 0:
            raise OSError(errno.EAGAIN, "send buffer full")
        if link.c2b_left is not None and n >= link.c2b_left:
            link.c2b += bytes(data[:link.c2b_left])
            link.c2b_left = None
            self.net.broker.cut(link, "cut after client byte")
            return n
        if link.c2b_left is not None:
            link.c2b_left -= n
        link.c2b += bytes(data[:n])
        return n

    def write(self, buf, off=0, n=None):
        if n is None:
            n = len(buf) - off
        return self.send(memoryview(buf)[off:off + n])

    def close(self):
        self.link.client_closed = True

    def readable(self):
        return bool(self.link.b2c) or not self.link.up and self.link.mode in ("end", "reset")

    def writable(self):
        return self.link.up or self.link.mode != "stall"


class Net:
    """The in-memory network and fake clock the client is given: dial and
    connected stand in for holdfast.shell's, wait() for the client's wait
    on its socket (MQTTClient._io_wait); ticks_ms and sleep for
    the clock. Every look at the clock moves it 1 ms, so every wait ends; a
    poll with nothing to read lets the broker run and then lets the time
    pass, as a real wait would."""

    def __init__(self, rng, broker, log, now=1000):
        self.rng = rng
        self.broker = broker
        self.log = log
        self.now = now  # ms, wrapping at 2**30 as MicroPython's ticks_ms does
        self.links = []
        self.fault_rate = 0.0  # chance that a new link carries a scheduled cut
        self.smooth = False  # every read and write takes all it is offered
        self.ops = 0  # looks at the clock, polls and socket calls since the driver's last step
        self.max_ops = 200000
        broker.net = self

    def op(self):
        self.ops += 1
        if self.ops > self.max_ops:
            self.ops = 0
            raise Hung("%d looks at the clock, polls and socket calls without returning" % self.max_ops)

    # the clock
    def ticks_ms(self):
        self.op()
        self.now = (self.now + 1) & _TICKS
        return self.now

    def advance(self, ms):
        self.now = (self.now + ms) & _TICKS
        self.broker.run()

    def since(self, t):
        """ms from tick t to now, across the wrap."""
        return ((self.now - t + (_TICKS + 1) // 2) & _TICKS) - (_TICKS + 1) // 2

    def sleep_ms(self, ms):
        self.advance(ms)

    # the I/O the client does
    def read_chunk(self):
        if self.smooth:
            return 1 << 20
        r = self.rng.random()
        if r < 0.6:
            return 1 << 20
        if r < 0.8:
            return self.rng.randint(1, 8)
        return self.rng.randint(1, 200)

    def write_chunk(self, n):
        if self.smooth:
            return n
        r = self.rng.random()
        if r < 0.75:
            return n
        if r < 0.8:
            return 0
        return self.rng.randint(1, n)

    def open_socket(self, host, port, timeout_ms):
        self.broker.run()
        if self.broker.down():
            raise OSError(errno.ECONNREFUSED, "connection refused (broker restarting)")
        link = Link(len(self.links) + 1)
        self.links.append(link)
        if self.rng.random() < self.fault_rate:
            if self.rng.random() < 0.5:
                link.c2b_left = self.rng.randint(0, 400)
                self.log("link %d will be cut after client byte %d" % (link.n, link.c2b_left))
            else:
                link.b2c_left = self.rng.randint(0, 400)
                self.log("link %d will be cut after broker byte %d" % (link.n, link.b2c_left))
        self.broker.accept(link)
        return Socket(link, self)

    def dial(self, host, port):
        return (Dial(self, host, port),)

    @staticmethod
    def connected(d, host, port, ms):
        return d[0].step(ms)

    def wait(self, sock, ms, out=False):
        """What MQTTClient._io_wait does on sock: the broker runs, then time
        passes if sock is not ready."""
        self.op()
        self.broker.run()
        if sock is None:  # a reconnect's pending connect: Dial.step decides it, at once
            return True
        if sock.readable() or out and sock.writable():
            return True
        self.advance(max(0, ms))
        return sock.readable() or out and sock.writable()


class Dial:
    """A connect sockets.dial() began: a reconnect's takes a few steps, drawn at
    the first; connect() waits for it, which takes none."""

    def __init__(self, net, host, port):
        self.net = net
        self.host, self.port = host, port
        self.steps = None

    def step(self, ms):
        if ms:
            return self.net.open_socket(self.host, self.port, ms)
        if self.steps is None:
            self.steps = self.net.rng.randint(0, 2)
        if self.steps:
            self.steps -= 1
            self.net.broker.run()
            return None
        return self.net.open_socket(self.host, self.port, 0)

    def close(self):
        pass


# -- the broker ----------------------------------------------------------------

class Msg:
    """A message the broker publishes to the client (payload b"i<seq>")."""

    def __init__(self, seq, topic, qos, step, session):
        self.seq = seq
        self.session = session
        self.topic = topic
        self.qos = qos
        self.step = step  # driver step it was published at
        self.lost = False  # in a session the broker lost
        self.acked = False  # the client completed its flow


class Session:
    def __init__(self, next_pid, epoch):
        self.subs = {}  # filter -> granted QoS
        self.queue = []  # Msg not yet sent
        self.inflight = {}  # pid -> [Msg, "pub" | "rel"], in the order sent
        self.held = {}  # inbound QoS 2 pid -> (seq, qos, dup) awaiting PUBREL
        self.next_pid = next_pid
        self.conn = None
        self.epoch = epoch
        # The client read the CONNACK (session present 0) that started this
        # session. Until it has, a later CONNACK saying 1 hides the loss of
        # the session before: MQTT 3.1.1 gives the client no way to tell.
        self.announced = False
        self.hidden = False


class Conn:
    def __init__(self, link):
        self.link = link
        self.session = None
        self.cid = None
        self.keepalive = 0
        self.last_rx = 0


class ModelBroker:
    """max_inflight: QoS 1/2 messages the broker has in flight to the client
    at once. on_pubrel: an inbound QoS 2 message goes onward (is recorded)
    at PUBREL, as mosquitto does, else at its first PUBLISH; both are
    allowed by [MQTT-4.3.3]."""

    def __init__(self, rng, log, max_inflight=20, on_pubrel=True, wrap_pids=False):
        self.rng = rng
        self.log = log
        self.net = None
        self.max_inflight = max_inflight
        self.on_pubrel = on_pubrel
        self.wrap_pids = wrap_pids
        self.sessions = {}
        self.conns = []
        self.epoch = 0  # sessions lost so far (restarts without persistence)
        self.hidden = 0  # sessions whose loss the client could not see (Session.hidden)
        self.down_until = None
        self.restart_after = None  # (packets, persist): a restart once this many more are read
        self.faults = True
        self.silent_ok = False  # silent and stalled links only when the client has a keepalive
        # What the checks look at.
        self.received = {}  # client seq -> [(qos, dup, link n, epoch)] as it went onward
        self.payloads = {}  # client seq -> the payloads it came with (one, unless damaged)
        self.first_seen = {}  # client seq -> (epoch, link n) of its first PUBLISH
        self.sent = {}  # broker seq -> Msg
        self.next_seq = 1
        self.violations = []
        self.stray_acks = 0  # acknowledgements of ids not in flight (ignored, as brokers do)
        self.sub_log = {}  # filter -> SUBSCRIBE packets received with it
        self.packets = 0

    # -- lifecycle -------------------------------------------------------------

    def down(self):
        if self.down_until is None:
            return False
        if self.net.since(self.down_until) >= 0:
            self.down_until = None
            return False
        return True

    def accept(self, link):
        self.conns.append(Conn(link))

    def restart(self, persist, down_ms=0):
        """The broker process restarts: every link is reset; the sessions are
        kept (persistence on) or lost."""
        self.log("broker restart, persistence %s, down %d ms" % ("on" if persist else "off", down_ms))
        for cn in list(self.conns):
            self.cut(cn.link, "broker restart", self.rng.choice(("end", "reset")))
        if not persist:
            for s in self.sessions.values():
                for m in s.queue:
                    m.lost = True
                for m, _ in s.inflight.values():
                    m.lost = True
            self.sessions = {}
            self.epoch += 1
        if down_ms:
            self.down_until = (self.net.now + down_ms) & _TICKS

    def cut(self, link, why, mode=None):
        """The link breaks at a byte: the broker reads a prefix of what the
        client wrote (a partial packet is dropped), the client gets a prefix
        of what the broker wrote, the rest is lost."""
        if not link.up:
            return
        link.up = False  # nothing written from here on gets through
        keep = self.rng.randint(0, len(link.c2b))
        del link.c2b[keep:]
        cn = self._conn(link)
        if cn is not None:
            self._read(cn, at_cut=True)
            self._drop(cn)
        del link.b2c[self.rng.randint(0, len(link.b2c)):]
        link.c2b = bytearray()
        link.mode = mode or self.rng.choice(("end", "end", "reset", "silent", "stall")
                                            if self.silent_ok else ("end", "reset"))
        self.log("link %d cut (%s): client sees %s, %d bytes still to read"
                 % (link.n, why, link.mode, len(link.b2c)))

    def _conn(self, link):
        for cn in self.conns:
            if cn.link is link:
                return cn
        return None

    def _drop(self, cn):
        if cn in self.conns:
            self.conns.remove(cn)
        if cn.session is not None and cn.session.conn is cn:
            cn.session.conn = None

    # -- running -----------------------------------------------------------------

    def run(self):
        """Reads and answers what every open link has delivered."""
        for cn in list(self.conns):
            link = cn.link
            if not link.up:
                self._drop(cn)
                continue
            if (cn.keepalive and cn.session is not None
                    and self.net.since(cn.last_rx) > cn.keepalive * 1500):
                self.log("broker: nothing from the client for 1.5 x keepalive on link %d" % link.n)
                self.cut(link, "keepalive expired", "end")
                continue
            self._read(cn)
            if not link.up:
                continue
            if link.client_closed:
                self.log("link %d closed by the client" % link.n)
                link.up = False
                link.mode = "end"
                self._drop(cn)
                continue
            if cn.session is not None and cn.session.conn is cn:
                self._fill(cn)

    def _read(self, cn, at_cut=False):
        link = cn.link
        try:
            packets, used = split(link.c2b)
        except Violation as e:
            self._violation(cn, str(e))
            return
        del link.c2b[:used]
        for p in packets:
            if not at_cut and not link.up:
                return
            self.packets += 1
            cn.last_rx = self.net.now
            try:
                self._handle(cn, *p)
            except Violation as e:
                self._violation(cn, str(e))
                return
            if not at_cut and self.faults and self.restart_after is not None:
                n, persist = self.restart_after
                if n <= 1:
                    self.restart_after = None
                    self.restart(persist, self.rng.choice((0, 0, 500, 3000)))
                    return
                self.restart_after = (n - 1, persist)

    def _violation(self, cn, why):
        self.violations.append("link %d: %s" % (cn.link.n, why))
        self.log("VIOLATION link %d: %s" % (cn.link.n, why))
        self.cut(cn.link, "protocol violation", "end")

    def _send(self, cn, data):
        link = cn.link
        if not link.up:
            return
        if link.b2c_left is not None and len(data) >= link.b2c_left:
            link.b2c += data[:link.b2c_left]
            link.b2c_left = None
            self.cut(link, "cut after broker byte")
            return
        if link.b2c_left is not None:
            link.b2c_left -= len(data)
        link.b2c += data

    # -- packets from the client -----------------------------------------------------

    def _handle(self, cn, ptype, flags, body):
        name = NAMES.get(ptype, "type %d" % ptype)
        if ptype == CONNECT:
            if cn.cid is not None:
                raise Violation("a second CONNECT")
            return self._connect(cn, flags, body)
        if cn.cid is None:
            raise Violation("%s before CONNECT" % name)
        s = cn.session
        if ptype == PUBLISH:
            return self._publish(cn, s, flags, body)
        if ptype == PUBREL:
            if flags != 2:
                raise Violation("PUBREL with flags %d" % flags)
        elif ptype in (SUBSCRIBE, UNSUBSCRIBE):
            if flags != 2:
                raise Violation("%s with flags %d" % (name, flags))
        elif flags:
            raise Violation("%s with flags %d" % (name, flags))
        if ptype in (PUBACK, PUBREC, PUBREL, PUBCOMP):
            if len(body) != 2:
                raise Violation("%s of %d bytes" % (name, len(body)))
            pid = _pid(body, name)
            if ptype == PUBREL:
                held = s.held.pop(pid, None)
                if held is not None and self.on_pubrel:
                    self._onward(cn, held[0], held[1], held[2])
                self._send(cn, enc_ack(PUBCOMP, pid))
                return
            f = s.inflight.get(pid)
            want = {PUBACK: (1, "pub"), PUBREC: (2, None), PUBCOMP: (2, "rel")}[ptype]
            if f is None:
                self.stray_acks += 1
                return
            if f[0].qos != want[0]:
                raise Violation("%s for a QoS %d message (id %d)" % (name, f[0].qos, pid))
            if ptype == PUBREC:
                f[1] = "rel"
                self._send(cn, enc_ack(PUBREL, pid))
                return
            if f[1] != want[1]:
                self.stray_acks += 1  # PUBCOMP before our PUBREL was read: ignore
                return
            del s.inflight[pid]
            f[0].acked = True
            return
        if ptype == SUBSCRIBE:
            pid = _pid(body, name)
            i = 2
            codes = b""
            if i == len(body):
                raise Violation("SUBSCRIBE without a filter")
            while i < len(body):
                flt, i = _take_str(body, i, "SUBSCRIBE filter")
                if i >= len(body):
                    raise Violation("SUBSCRIBE filter without its QoS")
                q = body[i]
                i += 1
                if q > 2:
                    raise Violation("SUBSCRIBE QoS %d" % q)
                s.subs[flt] = q
                self.sub_log[flt] = self.sub_log.get(flt, 0) + 1
                codes += bytes([q])
            self.log("broker: SUBSCRIBE id %d, %d filters, link %d" % (pid, len(codes), cn.link.n))
            self._send(cn, _packet(SUBACK, 0, _u16(pid) + codes))
            return
        if ptype == UNSUBSCRIBE:
            pid = _pid(body, name)
            i = 2
            while i < len(body):
                flt, i = _take_str(body, i, "UNSUBSCRIBE filter")
                s.subs.pop(flt, None)
            self._send(cn, _packet(UNSUBACK, 0, _u16(pid)))
            return
        if ptype == PINGREQ:
            self._send(cn, _packet(PINGRESP, 0, b""))
            return
        if ptype == DISCONNECT:
            self.log("broker: DISCONNECT on link %d" % cn.link.n)
            cn.link.up = False
            cn.link.mode = "end"
            self._drop(cn)
            return
        raise Violation("%s from a client" % name)

    def _connect(self, cn, flags, body):
        if flags:
            raise Violation("CONNECT with flags %d" % flags)
        proto, i = _take_str(body, 0, "CONNECT protocol name")
        if i + 4 > len(body):
            raise Violation("CONNECT header truncated")
        level, cflags = body[i], body[i + 1]
        if (proto, level) not in ((b"MQTT", 4), (b"MQIsdp", 3)):
            raise Violation("CONNECT protocol %r level %d" % (proto, level))
        keepalive = body[i + 2] << 8 | body[i + 3]
        cid, i = _take_str(body, i + 4, "CONNECT client id")
        clean = bool(cflags & 2)
        cn.cid = cid
        cn.keepalive = keepalive
        # Take-over [MQTT-3.1.4-2]: an older link of this client is closed.
        for other in list(self.conns):
            if other is not cn and other.cid == cid and other.link.up:
                self.cut(other.link, "session taken over", "end")
        s = self.sessions.get(cid)
        present = s is not None and not clean
        if s is None or clean:
            start = self.rng.randint(65500, 65535) if self.wrap_pids else 1
            s = Session(start, self.epoch)
            self.sessions[cid] = s
            cn.link.new_session = s
        elif not s.announced and not s.hidden:
            s.hidden = True
            self.hidden += 1
            self.log("broker: session present, but the client never read the CONNACK that started "
                     "it: the loss of the one before is hidden from the client")
        cn.session = s
        s.conn = cn
        self.log("broker: CONNACK present=%d on link %d (%d subs, %d queued, %d in flight)"
                 % (present, cn.link.n, len(s.subs), len(s.queue), len(s.inflight)))
        self._send(cn, _packet(CONNACK, 0, bytes([1 if present else 0, 0])))
        # [MQTT-4.4.0-1]: re-send what is unacknowledged, in the original order,
        # PUBLISH with DUP set, PUBREL for what passed PUBREC.
        for pid, (m, state) in list(s.inflight.items()):
            if state == "pub":
                self._send(cn, enc_publish(m.topic, b"i%d" % m.seq, m.qos, True, pid))
            else:
                self._send(cn, enc_ack(PUBREL, pid))

    def _publish(self, cn, s, flags, body):
        qos = (flags >> 1) & 3
        dup = bool(flags & 8)
        if qos == 3:
            raise Violation("PUBLISH with QoS 3")
        if dup and not qos:
            raise Violation("QoS 0 PUBLISH with DUP set")
        topic, i = _take_str(body, 0, "PUBLISH topic")
        if not topic or b"#" in topic or b"+" in topic:
            raise Violation("PUBLISH topic %r" % topic)
        pid = 0
        if qos:
            pid = _pid(body[i:], "QoS %d PUBLISH" % qos)
            i += 2
        payload = body[i:]
        if payload[:1] != b"o":
            raise Violation("PUBLISH payload %r is not the test's" % payload[:20])
        bar = payload.find(b"|")  # o<seq>, or o<seq>|<body> (the body: test_engine_random's sizes)
        seq = int(payload[1:bar] if bar > 0 else payload[1:])
        self.payloads.setdefault(seq, set()).add(payload)
        seen = self.first_seen.get(seq)
        if seen is None or seen[0] != s.epoch:
            self.first_seen[seq] = (s.epoch, cn.link.n)
        elif seen[1] != cn.link.n and not dup:
            # [MQTT-3.3.1-1]: a re-delivery carries DUP.
            self.violations.append("link %d: message o%d (id %d) re-sent without DUP (first seen on link %d)"
                                   % (cn.link.n, seq, pid, seen[1]))
        if qos == 0:
            self._onward(cn, seq, 0, dup)
        elif qos == 1:
            self._onward(cn, seq, 1, dup)
            self._send(cn, enc_ack(PUBACK, pid))
        else:
            held = s.held.get(pid)
            if held is None:
                s.held[pid] = (seq, 2, dup)
                if not self.on_pubrel:
                    self._onward(cn, seq, 2, dup)
            elif held[0] != seq:
                # The id's earlier message is not released yet: this one is
                # taken for its duplicate and never goes onward.
                self.violations.append("link %d: id %d reused for o%d while o%d awaits PUBREL"
                                       % (cn.link.n, pid, seq, held[0]))
            self._send(cn, enc_ack(PUBREC, pid))

    def _onward(self, cn, seq, qos, dup):
        self.received.setdefault(seq, []).append((qos, dup, cn.link.n, cn.session.epoch))

    # -- what the broker publishes ---------------------------------------------------

    def publish(self, cid, n, step, qos=None):
        """n messages from the broker's side to the client's subscriptions (a
        topic under a random filter the session has), of QoS qos (None: mixed)
        or what the filter was granted if lower; returns how many."""
        s = self.sessions.get(cid)
        if s is None or not s.subs:
            return 0
        flts = sorted(s.subs)
        for _ in range(n):
            flt = self.rng.choice(flts)
            topic = flt[:-1] + b"x" if flt.endswith(b"#") else flt
            q = min(self.rng.choice((0, 1, 1, 2, 2, 2)) if qos is None else qos, s.subs[flt])
            m = Msg(self.next_seq, topic, q, step, s)
            self.next_seq += 1
            self.sent[m.seq] = m
            if q == 0:
                if s.conn is not None:
                    self._send(s.conn, enc_publish(topic, b"i%d" % m.seq, 0, False, 0))
                else:
                    m.lost = True  # QoS 0 to an offline client is not kept
            else:
                s.queue.append(m)
        if s.conn is not None:
            self._fill(s.conn)
        return n

    def _fill(self, cn):
        s = cn.session
        while s.queue and len(s.inflight) < self.max_inflight and cn.link.up:
            m = s.queue.pop(0)
            pid = s.next_pid
            while pid in s.inflight:
                pid = pid % 65535 + 1
            s.next_pid = pid % 65535 + 1
            s.inflight[pid] = [m, "pub"]
            self._send(cn, enc_publish(m.topic, b"i%d" % m.seq, m.qos, False, pid))

    # -- for the checks ----------------------------------------------------------------

    def session(self, cid):
        return self.sessions.get(cid)

    def idle(self):
        """Nothing queued, in flight or half way in either direction."""
        for s in self.sessions.values():
            if s.queue or s.inflight or s.held:
                return False
        return True

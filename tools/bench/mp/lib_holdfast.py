# holdfast's blocking client (firmware/holdfast), topic and payload as bytes.
# opts: window, size (tx and rx buffer bytes), and obsize/obslots/obheld for a
# small MemoryStore outbox (default: the client's own default outbox).
PIPELINED = True
MQTTClient = MemoryStore = None


def load():
    global MQTTClient, MemoryStore
    from holdfast import MQTTClient
    from holdfast.memstore import MemoryStore


class Client:
    def __init__(self, host, port, cid, opts):
        kw = {}
        if "window" in opts:
            kw["window"] = int(opts["window"])
        if "size" in opts:
            kw["size"] = int(opts["size"])
        if "obsize" in opts:
            kw["outbox"] = MemoryStore(size=int(opts["obsize"]), slots=int(opts.get("obslots", 1)),
                                       held=int(opts.get("obheld", 1)))
        self.c = MQTTClient(cid, host, port, **kw)

    def connect(self):
        self.c.connect()

    def topic(self, b):
        return b

    def prepare(self, t0, t1, p):
        pass

    def pub0(self, t, p):
        self.c.publish(t, p, False, 0)

    def pub1(self, t, p):
        self.c.publish(t, p, False, 1)

    def drain0(self):
        # The public API has no "QoS 0 bytes written" wait (flush() waits for
        # the outbox only), so this looks at the session's send buffer.
        c = self.c
        s = c.session
        while s.tx_end > s.tx_start and c.sock is not None:
            c._io_wait(100)  # writable counts: bytes are queued
            c.check_msg()

    def drain1(self):
        if not self.c.flush():
            raise OSError("flush() timed out with %d pending" % self.c.pending())

    def sync(self):
        # An acknowledged QoS 1 publish. Not ping(): with keepalive=0 the
        # session's ping timeout is 0 ms and the next tick drops the link.
        self.c.publish(b"bench/sync", b"", False, 1)
        self.drain1()

    def close(self):
        self.c.disconnect()


def engine(qos, n, t, p):
    """Microseconds per message for the sans-I/O Session alone: publish, bytes
    taken as sent, and (QoS 1) the PUBACK fed back in and handled. No socket,
    no client shell: what the protocol engine costs per message."""
    from time import ticks_us, ticks_diff
    from holdfast.session import Session
    from holdfast.broker import feed
    s = Session("engine", True, 0, 4, 1024, 8, MemoryStore())
    s.start(0)
    s.sent(s.tx_end - s.tx_start, 0)
    feed(s.rx, b"\x20\x02\x00\x00")
    s.receive(0)
    ack = bytearray(b"\x40\x02\x00\x00")
    us = ticks_us()
    for _ in range(n):
        pid = s.publish(t, p, qos, False, 0)
        s.sent(s.tx_end - s.tx_start, 0)
        if qos:
            ack[2] = pid >> 8
            ack[3] = pid & 0xFF
            feed(s.rx, ack)
            s.receive(0)
    return ticks_diff(ticks_us(), us) / n

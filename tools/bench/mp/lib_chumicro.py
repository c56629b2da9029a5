# chumicro-mqtt from PyPI (with chumicro-sockets, chumicro-timing): a
# non-blocking, tick-driven client. publish() queues (MQTTBackpressureError
# when its tx queue of 20 is full); handle() sends one packet per tick and
# reads; QoS 1 acks come back through on_publish. Pipelined: no window beyond
# the tx queue.
PIPELINED = True
MQTTClient = fixed_connector_factory = ticks_ms = Backpressure = None


def load():
    global MQTTClient, fixed_connector_factory, ticks_ms, Backpressure
    from chumicro_mqtt import MQTTClient, MQTTBackpressureError as Backpressure
    from chumicro_sockets.sockets_factory import fixed_connector_factory
    from chumicro_timing import ticks_ms


class Client:
    def __init__(self, host, port, cid, opts):
        self.c = MQTTClient(transport_factory=fixed_connector_factory(host, port), client_id=cid,
                            keep_alive_seconds=0)
        self.sent = 0
        self.acked = 0
        self.cb = self._acked

    def _acked(self, topic, payload):
        self.acked += 1

    def tick(self):
        c = self.c
        now = ticks_ms()
        if c.check(now):
            c.handle(now)

    def connect(self):
        c = self.c
        c.connect()
        start = ticks_ms()
        while c.state != "connected":
            self.tick()
            if c.state == "failed" or ticks_ms() - start > 10000:
                raise OSError("chumicro connect: %s %r" % (c.state, c.last_error))

    def topic(self, b):
        return b.decode()

    def prepare(self, t0, t1, p):
        pass

    def pub0(self, t, p):
        c = self.c
        while True:
            try:
                c.publish(t, p)
                break
            except Backpressure:
                self.tick()
        self.tick()

    def pub1(self, t, p):
        c = self.c
        if c.on_publish is not self.cb:
            c.on_publish = self.cb
        while True:
            try:
                c.publish(t, p, qos=1)
                break
            except Backpressure:
                self.tick()
        self.sent += 1
        self.tick()

    def drain0(self):
        while self.c._tx_queue:
            self.tick()

    def drain1(self):
        start = ticks_ms()
        while self.acked < self.sent:
            self.tick()
            if self.c.state != "connected":
                raise OSError("chumicro: %s %r" % (self.c.state, self.c.last_error))

    def sync(self):
        self.pub1("bench/sync", b"")
        self.drain1()

    def close(self):
        self.c.disconnect()

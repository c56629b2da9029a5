# The fuzzing of issue 30's review, part of the suite: mutated inbound
# packets against the engine, and power cuts at random bytes with payloads
# that carry outbox records. Fixed seeds by default; longer runs:
#   SEED=random RUNS=50 .venv/bin/python -m pytest host_tests/test_review_fuzz.py -q -s
# A failure names the seed (SEED=<n> reruns exactly that run).
#
# Mutated packets: a sans-I/O Session subscribed at QoS 2, with QoS 1/2 flows
# both ways, is fed what a broker would send (PUBLISH at every QoS, PUBREL of
# held ids, PUBACK/PUBREC/PUBCOMP of its flows, SUBACK, PINGRESP), about half
# of it mutated (bytes flipped, replaced, inserted, dropped; a packet cut
# short or run into the next), in random read sizes. Checked after every
# packet: receive() raises only documented errors (MQTTError's family,
# LinkDown, MQTTTimeout), and after one the session is FAILED and stays so;
# what the client sends parses; the window's count is its slots'; and a new
# link always connects, and delivers and acknowledges a message.
import os
import random

import pytest

import consts as mq
from holdfast import broker
from holdfast.errors import MQTTError
from holdfast.session import Session
from holdfast.memstore import MemoryStore
from holdfast.subscriptions import request
from fakebroker import parse, wire, grant
from drain import drain
import test_outbox_forged as forged
from test_engine_random import _seeds

FIXED_SEEDS = (1, 2, 3, 4)
PACKETS = 1500  # per seed: 6000 in all, about 2 s


class Fuzz:
    def __init__(self, seed):
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.now = 0
        self.errors = {}
        self.out = []  # what the client sent since the test last looked
        self.delivered = 0
        self.size = rng.choice((128, 512, 1024))
        self.s = s = Session(b"fz", clean=False, size=self.size, window=rng.choice((1, 4, 16)),
                             store=MemoryStore(4096, 32))
        s.on_message = self.on_message
        self.link(False)
        request(s, b"f/#", 2)
        grant(s, self.take())

    def on_message(self, topic, msg):
        self.delivered += 1

    def fail(self, why):
        pytest.fail("seed %d (rerun: SEED=%d): %s" % (self.seed, self.seed, why), pytrace=False)

    def take(self):
        # What the client sent must parse as MQTT; it is written at once.
        s = self.s
        data = bytes(s.tx[s.tx_start:s.tx_end])
        try:
            out = parse(data)
        except Exception as e:
            self.fail("the client sent bytes that do not parse (%r): %r" % (e, data[:60]))
        if data:
            s.sent(len(data), self.now)
        self.out += out
        return out

    def link(self, present):
        s = self.s
        s.lost()
        s.start(self.now)
        out = self.take()
        if not out or out[0][0] != mq.CONNECT:
            self.fail("a new link did not send CONNECT first: %r" % out[:2])
        self.feed(wire((mq.CONNACK, present, 0)), strict=True)
        if s.state != mq.CONNECTED:
            self.fail("a new link did not connect (state %d, error %r)" % (s.state, s.error))

    def feed(self, data, strict=False):
        """Feeds data in random read sizes; True if the link failed (a
        documented error), which strict (no mutation) does not allow."""
        s = self.s
        i = 0
        spins = 0
        while i < len(data):
            k = broker.feed(s.rx, data[i:i + self.rng.choice((1, 3, 16, 200, 4096))])
            i += k
            spins = spins + 1 if not k else 0
            try:
                drain(s, self.now)
            except (MQTTError, OSError) as e:
                name = type(e).__name__
                self.errors[name] = self.errors.get(name, 0) + 1
                if strict:
                    self.fail("valid bytes made the link fail: %r" % e)
                if s.state != mq.FAILED or s.error is not e:
                    self.fail("%s raised, the session is not FAILED with it (state %d)" % (name, s.state))
                try:
                    s.receive(self.now)
                except (MQTTError, OSError) as again:
                    if again is not e:
                        self.fail("a FAILED session raised another error: %r" % again)
                else:
                    self.fail("a FAILED session's receive() did not raise again")
                return True
            except Exception as e:
                self.fail("%s escaped from receive(): %s" % (type(e).__name__, e))
            self.take()
            if spins > 50:
                self.fail("the receive buffer takes no more bytes and nothing completes")
        return False

    def packet(self):
        # One packet a broker could send now.
        rng = self.rng
        s = self.s
        c = rng.randrange(10)
        if c < 4:
            qos = rng.choice((0, 1, 2, 2))
            pid = rng.randint(1, 40) if qos else 0
            n = rng.choice((0, 5, 40, self.size - 40, self.size + 20))
            return (mq.PUBLISH, b"f/%d" % rng.randint(0, 9), b"m" * max(0, n), qos, False,
                    bool(qos) and rng.random() < 0.2, pid)
        if c < 5:
            return (mq.PUBREL, rng.randint(1, 40))
        slots = [i for i in range(s.window) if s._state[i]]
        if c < 8 and slots:
            i = rng.choice(slots)
            t = s._state[i]
            return (t if rng.random() < 0.8 else rng.choice((mq.PUBACK, mq.PUBREC, mq.PUBCOMP)), s._pid[i])
        if c < 9 and s.subs and any(s.subs.out):
            pid = rng.choice([p for p in s.subs.out if p])
            return (mq.SUBACK, pid, (rng.choice((0, 1, 2, 0x80)),))
        return (mq.PINGRESP,)

    def mutate(self, data):
        rng = self.rng
        b = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 4))):
            how = rng.randrange(6)
            at = rng.randrange(len(b)) if b else 0
            if how == 0 and b:
                b[at] ^= 1 << rng.randrange(8)
            elif how == 1 and b:
                b[at] = rng.randrange(256)
            elif how == 2:
                b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            elif how == 3 and b:
                del b[at:at + rng.randint(1, 4)]
            elif how == 4:
                b = b[:at]  # cut short: runs into the next packet
            elif b:
                b[min(1, len(b) - 1)] = rng.choice((0, 0x7F, 0x80, 0xFF))  # the length
        return bytes(b)

    def invariants(self):
        s = self.s
        busy = sum(1 for i in range(s.window) if s._state[i])
        if busy != s.inflight or not 0 <= s.inflight <= s.window:
            self.fail("inflight %d, %d slots busy, window %d" % (s.inflight, busy, s.window))
        r = s.rx
        if not 0 <= r.start <= r.end <= len(r.buf):
            self.fail("receive buffer out of step: start %d end %d of %d" % (r.start, r.end, len(r.buf)))

    def run(self, packets):
        rng = self.rng
        s = self.s
        for _ in range(packets):
            self.now += rng.choice((0, 1, 50))
            if s.state == mq.CONNECTED and rng.random() < 0.3:
                try:
                    s.publish(b"out/x", b"o" * rng.choice((1, 30)), rng.choice((1, 2)), False, self.now)
                except MQTTError:
                    pass  # outbox full: the flows are stuck on what the fuzz never acknowledges
            data = wire(self.packet())
            if rng.random() < 0.5:
                data = self.mutate(data)
            if self.feed(data):
                self.link(rng.random() < 0.7)
            self.invariants()
        # No more mutation: a new link delivers and acknowledges a message.
        self.link(True)
        got = self.delivered
        pid = 41
        self.out = []
        self.feed(wire((mq.PUBLISH, b"f/end", b"last", 1, False, False, pid)), strict=True)
        self.take()
        if self.delivered != got + 1 or (mq.PUBACK, pid) not in self.out:
            self.fail("after the fuzz, a QoS 1 message was not delivered and acknowledged")


@pytest.mark.parametrize("seed", _seeds(FIXED_SEEDS))
def test_mutated_inbound_packets_fail_the_link_in_words_and_the_next_link_works(seed):
    f = Fuzz(seed)
    f.run(int(os.environ.get("PACKETS", PACKETS)))
    print("seed %d: %d delivered, link failures %s" % (seed, f.delivered, f.errors))
    assert f.errors, "no mutation made the link fail: the fuzz reached nothing"


@pytest.mark.parametrize("seed", _seeds(forged.SEEDS))
def test_power_cuts_at_random_bytes_with_record_shaped_payloads(seed):
    # The portable test's runs (test_outbox_forged.py, both runtimes), here
    # with SEED=random too, on both stores and both flash page sizes.
    runs = int(os.environ.get("CUT_RUNS", 10))
    struck = forged.file_cuts(seed, runs) + forged.flash_cuts(seed, runs, 1) + forged.flash_cuts(seed, runs, 256)
    assert struck > runs, struck

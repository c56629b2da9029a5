"""An emulated fleet: N unix-port boards, each with its own flash and id,
publishing through a fault-injecting proxy to a broker, with power cuts, on a
seeded (reproducible) schedule.

    PYTHONPATH=tools python -m fleet.fleet --boards 5 --duration 60 --seed 7 --broker-port 1883

    from fleet.fleet import Fleet
    with Fleet(workdir, broker, boards=5, seed=7) as f:
        f.run(60)                 # faults while running, progress every few s
        last = f.drain()          # heal, stop readings, wait for empty outboxes
        print(f.summary())

Faults (each drawn from the seed, so a run can be repeated):
    latency     the proxy's one-way delay set to 0..150 ms for a while
    reset       every board connection reset (RST) at once
    partition   black hole: nothing passes for 2..6 s, then it heals
    broker      the broker restarted (sessions kept on its disk)
    power       one board SIGKILLed and powered on again 0.5..3 s later
Boards publish at QoS 1 and 2 alternately (board i: QoS 1 + i % 2).
"""

import argparse
import json
import os
import random
import re
import shutil
import tempfile
import threading
import time

from board import deploy
from board.emulator import Emulator
from fleet.proxy import Proxy

FAULTS = ("latency", "reset", "partition", "broker", "power")
DRAINED = re.compile(r"holdfast: drained, last s=(-?\d+)")


def provision(flash, config, romfs=False):
    """Writes what `make deploy BOARD=unix` (romfs: with ROMFS=1) would put
    on a board into flash."""
    os.makedirs(flash, exist_ok=True)
    files = deploy.plan("unix")
    with tempfile.TemporaryDirectory() as tmp:
        data = deploy.compile_all(files, tmp)
        if romfs:  # the .mpy files go into the image the board mounts at /rom
            rom = [d for d in data if d.endswith(".mpy")]
            data[deploy.EMULATED_ROMFS] = deploy.build_romfs({d: data.pop(d) for d in rom},
                                                             os.path.join(tmp, "romfs"))
        for dst, blob in data.items():
            path = os.path.join(flash, dst.lstrip("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(blob)
    with open(os.path.join(flash, "config.json"), "w") as f:
        json.dump(config, f)


class Fleet:
    def __init__(self, workdir, broker, boards=5, seed=1, interval_ms=200, faults=FAULTS,
                 prefix="holdfast", heap="256k", log=print):
        self.workdir = os.path.abspath(workdir)
        self.broker = broker
        self.n = boards
        self.rng = random.Random(seed)
        self.seed = seed
        self.interval_ms = interval_ms
        self.faults = tuple(faults)
        self.prefix = prefix
        self.heap = heap
        self.log = log
        self.proxy = Proxy(0, (broker.host, broker.port))
        self.boards = []
        self.injected = {f: 0 for f in FAULTS}
        self.events = []  # (seconds since start, what)
        self._t0 = None
        self._t0_wall = None

    def device(self, i):
        return "fleet-%02d" % i

    def start(self):
        self.proxy.start()
        for i in range(self.n):
            flash = os.path.join(self.workdir, "board-%02d" % i)
            provision(flash, {
                "broker": "127.0.0.1", "port": self.proxy.port, "prefix": self.prefix,
                "interval_ms": self.interval_ms, "qos": 1 + i % 2, "keepalive": 5,
                "clean_session": False, "device": self.device(i), "wdt_ms": 30000,
                "outbox_dir": "/outbox", "outbox_slots": 256,
            })
            emu = Emulator(flash, run=True, heap=self.heap, uid="%016x" % (i + 1))
            emu.start()
            self.boards.append(emu)
        self._t0 = time.monotonic()
        self._t0_wall = time.time()  # to place the events among the readings
        self.log("fleet: %d boards up (QoS 1 and 2), proxy :%d -> broker :%d, seed %d"
                 % (self.n, self.proxy.port, self.broker.port, self.seed))

    def _event(self, what):
        self.events.append((round(time.monotonic() - self._t0, 1), what))
        self.log("fleet: t=%5.1fs %s" % (self.events[-1][0], what))

    def _fault(self):
        kind = self.rng.choice(self.faults)
        self.injected[kind] += 1
        if kind == "latency":
            ms = self.rng.randint(0, 150)
            self.proxy.set_delay(ms)
            self._event("latency %d ms one way" % ms)
        elif kind == "reset":
            self.proxy.reset_all()
            self._event("reset every connection")
        elif kind == "partition":
            secs = self.rng.uniform(2, 6)
            self._event("partition for %.1f s" % secs)
            self.proxy.set_blackhole(True)
            time.sleep(secs)
            self.proxy.set_blackhole(False)
        elif kind == "broker":
            self._event("broker restart")
            self.broker.restart()
        else:
            i = self.rng.randrange(self.n)
            off = self.rng.uniform(0.5, 3)
            self._event("power cut %s for %.1f s" % (self.device(i), off))
            self.boards[i].kill()
            time.sleep(off)
            self.boards[i].start()

    def run(self, duration, every=(3, 8), progress=None):
        """Injects faults for duration seconds; progress() is called about
        every 5 s and its line printed."""
        end = time.monotonic() + duration
        next_fault = time.monotonic() + self.rng.uniform(*every)
        next_report = time.monotonic() + 5
        while time.monotonic() < end:
            now = time.monotonic()
            if self.faults and now >= next_fault:
                self._fault()
                next_fault = time.monotonic() + self.rng.uniform(*every)
            if progress and now >= next_report:
                self.log("fleet: t=%5.1fs %s | faults %s" % (
                    now - self._t0, progress(),
                    " ".join("%s=%d" % (k, v) for k, v in self.injected.items() if v)))
                next_report = now + 5
            time.sleep(0.1)

    def drain(self, timeout=90):
        """Heals every fault, tells each board to stop taking readings, and
        waits until each has delivered its outbox. Returns {device: last s}."""
        self.proxy.set_blackhole(False)
        self.proxy.set_delay(0)
        for emu in self.boards:
            if not emu.running:
                emu.start()
            open(os.path.join(emu.flash, "hf_drain"), "w").close()
        self._event("healed; boards draining their outboxes")
        last = {}
        deadline = time.monotonic() + timeout
        for i, emu in enumerate(self.boards):
            left = max(1, deadline - time.monotonic())
            m = emu.wait_console(DRAINED.pattern, timeout=left)
            last[self.device(i)] = int(DRAINED.search(emu.console_text()).group(1))
        self._event("all outboxes empty")
        return last

    def stop(self):
        for emu in self.boards:
            emu.stop()
        self.proxy.stop()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def summary(self):
        return {"boards": self.n, "seed": self.seed, "faults": dict(self.injected),
                "events": self.events, "t0_wall": self._t0_wall}


def main(argv=None):
    from fleet.mosquitto import Mosquitto

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boards", type=int, default=5)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--interval-ms", type=int, default=200)
    ap.add_argument("--workdir", default="build/fleet")
    ap.add_argument("--broker-port", type=int, default=0, help="0: start a private mosquitto")
    ap.add_argument("--no-faults", action="store_true")
    a = ap.parse_args(argv)
    shutil.rmtree(a.workdir, ignore_errors=True)
    broker = Mosquitto(port=a.broker_port or None, workdir=os.path.join(a.workdir, "broker"))
    broker.start()
    try:
        with Fleet(a.workdir, broker, a.boards, a.seed, a.interval_ms,
                   () if a.no_faults else FAULTS) as fleet:
            fleet.run(a.duration)
            last = fleet.drain()
            print(json.dumps(dict(fleet.summary(), last_seq=last), indent=1))
    finally:
        broker.close()


if __name__ == "__main__":
    main()

"""Synthetic landing files, as the collector writes them, with known truth.

    PYTHONPATH=tools python -m pipeline.gen_landing --out DIR --records 100000 [--devices 50]

Writes `DIR/date=YYYY-MM-DD/hour=HH/part-<n>-<k>.jsonl` (docs/telemetry.md)
for a fleet whose devices publish one reading every `period_ms`, with:

- a QoS per device (cycling through `qos_mix`);
- reboots (b + 1) every `reboot_every` readings, s going on;
- lost readings (bursts of 1-5) on devices whose QoS is in `loss_qos`,
  never the first or last reading of a device;
- duplicates (a second copy, `dup` true, received 1-30 s later);
- late readings (received 1-3 h later, so in a later hour partition) and
  therefore out-of-order sequence numbers;
- w (device wall clock) on a fraction of devices, latency ~ 20-200 ms;
- optional malformed lines (the pipeline must reject them with a reason).

generate() returns the truth the pipeline must find: per device expected,
received, missing, gaps, duplicates, reboots, plus totals.  Deterministic
for a given seed.
"""

import argparse
import heapq
import os
import random
import sys
import time

START_MS = 1767225600000          # 2026-01-01T00:00:00Z
MALFORMED = (
    # (landing line, reason family)
    ('this is not json', "landing"),
    ('{"topic":"holdfast/x/telemetry","qos":1,"retain":false,"dup":false,'
     '"rx_ms":%d,"payload":"not a reading"}', "payload"),
    ('{"topic":"holdfast/x/telemetry","qos":1,"retain":false,"dup":false,'
     '"rx_ms":%d,"payload":"{\\"d\\":\\"x\\",\\"b\\":1}"}', "missing s"),
    ('{"topic":"holdfast/x/telemetry","qos":1,"retain":false,"dup":false,'
     '"rx_ms":%d,"payload":"{\\"d\\":\\"x\\",\\"b\\":1,\\"s\\":\\"7\\",'
     '\\"q\\":1}"}', "s not integer"),
)


def compact_ranges(ranges):
    """[(120, 130), (455, 455)] -> "120-130, 455"."""
    return ", ".join(str(a) if a == b else "%d-%d" % (a, b)
                     for a, b in ranges)


class _Files:
    """Landing files by hour partition, rolled every `per_file` lines."""

    def __init__(self, root, per_file, gen_id):
        self.root = root
        self.per_file = per_file
        self.gen_id = gen_id
        self.key = None
        self.f = None
        self.count = 0
        self.k = 0
        self.files = 0

    def write(self, rx_ms, line):
        key = time.strftime("date=%Y-%m-%d/hour=%H",
                            time.gmtime(rx_ms // 1000))
        if key != self.key or self.count >= self.per_file:
            self.close()
            d = os.path.join(self.root, key)
            os.makedirs(d, exist_ok=True)
            while True:
                path = os.path.join(d, "part-%d-%d.jsonl"
                                    % (self.gen_id, self.k))
                self.k += 1
                if not os.path.exists(path):
                    break
            self.f = open(path, "w", buffering=1 << 20)
            self.key, self.count = key, 0
            self.files += 1
        self.f.write(line)
        self.count += 1

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None


def generate(out, records, devices=50, seed=1, period_ms=10000,
             qos_mix=(0, 1, 2), loss_qos=(0,), loss_rate=0.002,
             dup_rate=0.01, late_rate=0.001, reboot_every=5000,
             w_fraction=0.8, malformed=0, per_file=200000,
             prefix="holdfast", start_ms=START_MS, gen_id=1, progress=None):
    """Write about `records` landing lines under `out`; return the truth.

    `records` counts landing lines (duplicates and malformed lines included).
    """
    rnd = random.Random(seed)
    per_dev = max(2, int((records - malformed) / devices / (1 + dup_rate)))
    devs = []
    for i in range(devices):
        devs.append({
            "d": "dev-%04d" % i,
            "q": qos_mix[i % len(qos_mix)],
            "b": 1 + rnd.randrange(5),
            "s": rnd.randrange(1000) * 1000,
            "w": rnd.random() < w_fraction,
            "phase": rnd.randrange(period_ms),
            "uptime": rnd.randrange(10 ** 6),
            "left_in_burst": 0,
        })
    truth = {d["d"]: {"device": d["d"], "qos": d["q"], "first_seq": d["s"],
                      "last_seq": d["s"] + per_dev - 1,
                      "expected": per_dev, "received": 0, "duplicates": 0,
                      "gaps": [], "boots": 1, "latency_samples": 0}
             for d in devs}
    files = _Files(out, per_file, gen_id)
    pending = []          # heap of (rx_ms, tiebreak, line) for later copies
    lines = 0
    tie = 0
    # Malformed lines go after these (device step) positions.
    mal_at = set(random.Random(seed + 1).sample(
        range(per_dev * devices), min(malformed, per_dev * devices)))
    mal_done = 0
    readings = 0
    next_report = time.monotonic() + 5
    for k in range(per_dev):
        t_step = start_ms + k * period_ms
        while pending and pending[0][0] <= t_step:
            rx, _, line = heapq.heappop(pending)
            files.write(rx, line)
            lines += 1
        for i, dev in enumerate(devs):
            if k * devices + i in mal_at:
                text, _ = MALFORMED[mal_done % len(MALFORMED)]
                rx_bad = t_step + dev["phase"]
                files.write(rx_bad, (text % rx_bad if "%d" in text else text)
                            + "\n")
                lines += 1
                mal_done += 1
            tr = truth[dev["d"]]
            s = dev["s"] + k
            if k and k % reboot_every == 0:
                dev["b"] += 1
                dev["uptime"] = rnd.randrange(5000)
                tr["boots"] += 1
            w = t_step + dev["phase"]
            uptime = dev["uptime"] + k * period_ms
            lost = False
            if 0 < k < per_dev - 1 and dev["q"] in loss_qos:
                if dev["left_in_burst"]:
                    lost = True
                elif rnd.random() < loss_rate:
                    dev["left_in_burst"] = rnd.randint(1, 5)
                    lost = True
                if lost:
                    dev["left_in_burst"] -= 1
                    g = tr["gaps"]
                    if g and g[-1][1] == s - 1:
                        g[-1] = (g[-1][0], s)
                    else:
                        g.append((s, s))
                    if k + 1 == per_dev - 1:
                        dev["left_in_burst"] = 0
                    continue
            latency = 20 + int(rnd.expovariate(1 / 40.0))
            rx = w + latency
            late = rnd.random() < late_rate
            if late:
                rx += rnd.randint(3600, 3 * 3600) * 1000
            payload = ('{\\"d\\":\\"%s\\",\\"b\\":%d,\\"s\\":%d,\\"q\\":%d,'
                       '\\"t\\":%.2f,\\"u\\":%d'
                       % (dev["d"], dev["b"], s, dev["q"],
                          20 + 5 * rnd.random(), uptime))
            if dev["w"]:
                payload += ',\\"w\\":%d' % w
                tr["latency_samples"] += 1
            payload += "}"
            head = ('{"topic":"%s/%s/telemetry","qos":%d,"retain":false,'
                    % (prefix, dev["d"], dev["q"]))
            line = '%s"dup":false,"rx_ms":%d,"payload":"%s"}\n' % (
                head, rx, payload)
            if late:
                tie += 1
                heapq.heappush(pending, (rx, tie, line))
            else:
                files.write(rx, line)
                lines += 1
            tr["received"] += 1
            readings += 1
            if rnd.random() < dup_rate:
                rx2 = rx + rnd.randint(1000, 30000)
                line2 = '%s"dup":true,"rx_ms":%d,"payload":"%s"}\n' % (
                    head, rx2, payload)
                tie += 1
                heapq.heappush(pending, (rx2, tie, line2))
                tr["duplicates"] += 1
        if progress and time.monotonic() > next_report:
            progress("gen_landing: %d lines written" % lines)
            next_report = time.monotonic() + 5
    while pending:
        rx, _, line = heapq.heappop(pending)
        files.write(rx, line)
        lines += 1
    files.close()
    devices_truth = sorted(truth.values(), key=lambda t: t["device"])
    for t in devices_truth:
        t["missing"] = t["expected"] - t["received"]
        t["reboots"] = t["boots"] - 1
        t["gaps_text"] = compact_ranges(t["gaps"])
    return {
        "lines": lines,
        "readings": readings,
        "duplicates": sum(t["duplicates"] for t in devices_truth),
        "missing": sum(t["missing"] for t in devices_truth),
        "malformed": mal_done,
        "files": files.files,
        "devices": devices_truth,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="landing directory")
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--devices", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--malformed", type=int, default=0)
    ap.add_argument("--dup-rate", type=float, default=0.01)
    ap.add_argument("--loss-rate", type=float, default=0.002)
    ap.add_argument("--late-rate", type=float, default=0.001)
    a = ap.parse_args(argv)
    t = time.monotonic()
    truth = generate(a.out, a.records, devices=a.devices, seed=a.seed,
                     malformed=a.malformed, dup_rate=a.dup_rate,
                     loss_rate=a.loss_rate, late_rate=a.late_rate,
                     progress=lambda m: print(m, file=sys.stderr, flush=True))
    print("%d lines (%d readings, %d duplicates, %d malformed, %d missing) "
          "in %d files, %.1fs" % (truth["lines"], truth["readings"],
                                  truth["duplicates"], truth["malformed"],
                                  truth["missing"], truth["files"],
                                  time.monotonic() - t))
    return 0


if __name__ == "__main__":
    sys.exit(main())

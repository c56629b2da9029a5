"""holdfast against its targets in the client section, and what limits it
there, computed from the run's figures."""

from bench.client_rows import DEFAULT_BUFFERS, DEFAULT_WINDOW, PIPELINE_NOTE, med, val
from bench.fmt import fmt_bytes, fmt_rate


def make_targets(by, main_rows):
    t = []
    hf = by.get("holdfast")
    if not hf:
        return t

    def add(name, value, goal, ok):
        # ok None: not measured in this run (a row failed or was left out)
        t.append({"name": name, "value": value, "goal": goal,
                  "pass": None if value == "n/a" or "n/a" in value else bool(ok)})

    for key, title in (("alloc0", "heap per QoS 0 publish"), ("alloc1", "heap per acked QoS 1 publish")):
        v = val(hf, key, "per_msg")
        # A small negative delta means the heap shrank over the run (something
        # allocated before it was freed): no growth per publish, which is the goal.
        add(title, "n/a" if v is None else "%.1f B" % v, "0 B", v is not None and v < 0.05)

    floor = by.get("floor")
    a, b = med(hf, "tput1"), med(floor, "tput1") if floor else None
    add("QoS 1 msg/s, loopback", _vs(a, b, "floor"), ">= 2x the floor's stop-and-wait",
        a is not None and b is not None and a >= 2 * b)

    saw = [r for r in main_rows if r["kind"] == "peer" and PIPELINE_NOTE.get(r["id"], "").startswith("stop")]
    best = None
    for r in saw:
        m = med(r, "ptput1")
        if m is not None and (best is None or m > best[1]):
            best = (r, m)
    a = med(hf, "ptput1")
    add("QoS 1 msg/s, 20 ms RTT", _vs(a, best[1] if best else None, best[0]["label"] if best else "-"),
        ">= 10x the best stop-and-wait peer",
        a is not None and best is not None and a >= 10 * best[1])

    a, b = med(hf, "tput0"), med(floor, "tput0") if floor else None
    add("QoS 0 msg/s, loopback", _vs(a, b, "floor"), ">= 0.5x the floor's",
        a is not None and b is not None and a >= 0.5 * b)

    us = by.get("umqtt_simple")
    h, u = val(hf, "heap", "total"), val(us, "heap", "total")
    allowance = DEFAULT_BUFFERS
    if h is not None and u is not None:
        add("heap after connect (code + state)", "%s B vs umqtt.simple %s B + %s B buffers = %s B"
            % (fmt_bytes(h), fmt_bytes(u), fmt_bytes(allowance), fmt_bytes(u + allowance)),
            "<= umqtt.simple's + rx + tx + outbox ring", h <= u + allowance)
        hs, usd = val(hf, "heap", "state"), val(us, "heap", "state")
        add("heap after connect (state only, code excluded)",
            "%s B vs umqtt.simple %s B + %s B = %s B" % (fmt_bytes(hs), fmt_bytes(usd),
                                                          fmt_bytes(allowance), fmt_bytes(usd + allowance)),
            "<= umqtt.simple's + rx + tx + outbox ring", hs <= usd + allowance)
    else:
        add("heap after connect", "n/a", "<= umqtt.simple's + buffers", False)

    lean = by.get("holdfast_lean")
    for r, title in ((lean, "smallest heap, outbox off (lean)"), (hf, "smallest heap, defaults")):
        if r is None:
            continue
        a, b = val(r, "minheap", "kb"), val(us, "minheap", "kb")
        add(title, "%s vs umqtt.simple %s" % ("%s KB" % a if a else "n/a", "%s KB" % b if b else "n/a"),
            "<= umqtt.simple's", a is not None and b is not None and a <= b)
    return t


def _vs(a, b, who):
    if a is None or b is None:
        return "n/a"
    return "%s vs %s %s (%.2fx)" % (fmt_rate(a), who, fmt_rate(b), a / b if b else float("inf"))


def limits(by, main_rows, rtt_ms):
    """What bounds holdfast against each target, computed from this run."""
    hf, floor, us = by.get("holdfast"), by.get("floor"), by.get("umqtt_simple")
    if not hf:
        return []
    out = ["What limits holdfast here (from this run's figures):", ""]
    e0, e1 = val(hf, "engine0", "us_per_msg"), val(hf, "engine1", "us_per_msg")
    f1, h1 = med(floor, "tput1") if floor else None, med(hf, "tput1")
    if f1 and h1 and e1:
        out.append("- QoS 1 on loopback: the floor's whole stop-and-wait round trip (write, mosquitto, "
                   "PUBACK, read) takes %.1f µs; holdfast spends %.1f µs per message, of which its "
                   "sans-I/O Session alone (encode into tx, outbox put, window slot, PUBACK parse, "
                   "done) takes %.1f µs with no socket at all. Twice the floor means %.1f µs per "
                   "message in all: on loopback the round trip is shorter than the interpreter's "
                   "work per message, so pipelining has nothing to hide."
                   % (1e6 / f1, 1e6 / h1, e1, 1e6 / f1 / 2))
    f0, h0 = med(floor, "tput0") if floor else None, med(hf, "tput0")
    if f0 and h0 and e0:
        out.append("- QoS 0 on loopback: the floor takes %.1f µs per message (one write of "
                   "pre-encoded bytes); holdfast %.1f µs, of which %.1f µs in the Session (encode) "
                   "and the rest in the blocking client's shell around it (publish(), _pump(): "
                   "ticks, the write syscall and its checks, tick()). Half the floor's rate "
                   "means %.1f µs per message." % (1e6 / f0, 1e6 / h0, e0, 2e6 / f0))
    p1 = med(hf, "ptput1")
    w32 = by.get("holdfast_w32")
    p32 = med(w32, "ptput1") if w32 else None
    nag = by.get("holdfast_nagle")
    pn = med(nag, "ptput1") if nag else None
    if p1 and rtt_ms:
        bound = DEFAULT_WINDOW / (rtt_ms / 1000)
        txt = ("- QoS 1 at 20 ms RTT: a window of %d allows at most %d / %.1f ms = %.0f msg/s; "
               "holdfast reaches %.0f (%.0f%%)." % (DEFAULT_WINDOW, DEFAULT_WINDOW, rtt_ms, bound, p1,
                                                    100 * p1 / bound))
        saw = [med(r, "ptput1") for r in main_rows
               if r["kind"] == "peer" and PIPELINE_NOTE.get(r["id"], "").startswith("stop")]
        saw = [x for x in saw if x]
        if saw:
            best = max(saw)
            eff = p1 / bound
            need = 10 * best * (rtt_ms / 1000) / max(eff, 0.01)
            txt += (" 10x the best stop-and-wait peer (%.1f msg/s) needs %.0f msg/s, so a window "
                    "of at least %d at this efficiency." % (best, 10 * best, int(need) + 1))
        if p32:
            txt += " With window=32: %.0f msg/s." % p32
        if pn:
            txt += (" Against mosquitto's default (set_tcp_nodelay false) the default window gives "
                    "%.0f msg/s: Nagle on the broker's socket holds each PUBACK after the first "
                    "until the previous one is acknowledged." % pn)
        out.append(txt)
    h = hf["res"].get("heap")
    u = us["res"].get("heap") if us else None
    if isinstance(h, dict) and "code" in h and isinstance(u, dict) and "code" in u:
        bufs = DEFAULT_BUFFERS
        out.append("- Heap after connect: holdfast's modules loaded from .mpy take %s B of RAM "
                   "(umqtt.simple's: %s B); its connected state %s B, of which %s B are the "
                   "preallocated tx, rx (64 bytes until something is subscribed) and outbox ring and "
                   "%s B the bookkeeping around them (the Session and MemoryStore objects and their "
                   "slot arrays, the Reader, the client, the socket and its poll object) against "
                   "umqtt.simple's %s B of state."
                   % (fmt_bytes(h["code"]), fmt_bytes(u["code"]), fmt_bytes(h["state"]),
                      fmt_bytes(bufs), fmt_bytes(h["state"] - bufs), fmt_bytes(u["state"])))
    lean = by.get("holdfast_lean")
    lh = val(lean, "heap", "total") if lean else None
    mh, um = val(lean, "minheap", "kb") if lean else None, val(us, "minheap", "kb") if us else None
    if lh and mh and um:
        out.append("- Smallest heap: holdfast lean holds %s B after connect, nearly all of it code "
                   "(%s B); it needs %d KB where umqtt.simple needs %d KB. Turning the outbox "
                   "off would save at most what MemoryStore(128, slots=1) holds (under 1 KB); the "
                   "gap is the code in RAM, which frozen modules (code in flash) would remove."
                   % (fmt_bytes(lh), fmt_bytes(val(lean, "heap", "code")), mh, um))
    out.append("")
    return out

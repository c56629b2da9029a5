"""Collector: MQTT telemetry -> landing files (JSON lines), losing nothing.

    PYTHONPATH=tools python -m pipeline.collector --host H --port P --landing DIR \\
        [--prefix holdfast] [--client-id ID] [--sub-qos 2] [--duration S]

Subscribes `<prefix>/+/telemetry` with a persistent session (clean_session
False, fixed client id) and manual acknowledgement.  Each message becomes one
JSON line (docs/telemetry.md) in
`<landing>/date=YYYY-MM-DD/hour=HH/part-<pid>-<n>.jsonl`; a payload that is
not a valid reading goes to `<landing>/quarantine/part-<pid>-<n>.jsonl` with
a "reason".  Messages are acknowledged to the broker only after the batch
that holds them has been written, flushed and fsync'ed, so a crash at any
point loses nothing: the broker redelivers what was not acknowledged (the
landing may then hold duplicates; the pipeline removes them).

A file being written is hidden (`.part-<pid>-<n>.jsonl.inprogress`, which
Spark and the pipeline skip) and renamed to its final name when it is rolled
(hour change, age, size) or at shutdown.  After a crash, the next start
renames the files left behind by dead collectors, dropping a torn last line
(never acknowledged, so redelivered).

QoS 2: paho-mqtt 2.2 with manual_ack sends PUBREC as soon as a QoS 2 PUBLISH
arrives and only calls on_message at PUBREL, and it never answers a PUBREL
it does not know (one left over from a crashed run), so the broker's inflight
slot stays taken forever.  A crash between PUBREC and the write would lose the
message (the broker only keeps the packet id after PUBREC).  `_Client` below
defers PUBREC to ack() and answers every PUBREL with PUBCOMP, which is the
MQTT receiver flow for "store, then acknowledge".  See docs/pipeline.md.

Importable: `Collector(host, port, landing).start()` ... `.stop()`.
"""

import argparse
import json
import os
import re
import signal
import sys
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt import _packet as _paho_packet
from paho.mqtt.enums import MQTTErrorCode

DEFAULT_PREFIX = "holdfast"
DEFAULT_CLIENT_ID = "holdfast-collector"
QUARANTINE = "quarantine"
INPROGRESS_RE = re.compile(r"^\.part-(\d+)-(\d+)\.jsonl\.inprogress$")

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def validate_payload(text):
    """None if `text` is a valid reading, else the reason in words."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        return "payload is not JSON (%s)" % e
    if not isinstance(obj, dict):
        return "payload is not a JSON object (got %s)" % type(obj).__name__
    problems = []
    d = obj.get("d")
    if "d" not in obj:
        problems.append("missing key d")
    elif not isinstance(d, str):
        problems.append("d is not a string")
    elif not d:
        problems.append("d is empty")
    for key in ("b", "s"):
        if key not in obj:
            problems.append("missing key %s" % key)
        elif not _is_int(obj[key]):
            problems.append("%s is not an integer" % key)
        elif obj[key] < 0:
            problems.append("%s is negative" % key)
    if "q" not in obj:
        problems.append("missing key q")
    elif not _is_int(obj["q"]) or obj["q"] not in (0, 1, 2):
        problems.append("q is not 0, 1 or 2")
    return "; ".join(problems) or None


class CollectorError(RuntimeError):
    pass


class _Client(mqtt.Client):
    """paho Client whose manual-ack QoS 2 receive path is crash safe.

    on_message is called when the PUBLISH arrives (not at PUBREL); ack(mid, 2)
    sends PUBREC; a PUBREL (known or left over from an earlier connection) is
    answered with PUBCOMP at once.  QoS 0/1 are paho's own code.
    """

    def _handle_publish(self):
        header = self._in_packet["command"]
        if not self._manual_ack or (header & 0x06) >> 1 != 2:
            return super()._handle_publish()
        res = _paho_packet.decode_publish(header, self._in_packet["packet"],
                                          self._protocol)
        msg = mqtt.MQTTMessage(mid=res.mid, topic=res.topic)
        msg.dup = res.dup
        msg.qos = res.qos
        msg.retain = res.retain
        msg.properties = res.properties
        msg.payload = res.payload
        msg.timestamp = time.monotonic()
        self._handle_on_message(msg)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    on_pubrel = None

    def _handle_pubrel(self):
        if not self._manual_ack:
            return super()._handle_pubrel()
        res = _paho_packet.decode_pubrel(self._in_packet["command"],
                                         self._in_packet["packet"],
                                         self._protocol)
        if self.on_pubrel is not None:
            self.on_pubrel(res.mid)
        return self._send_pubcomp(res.mid)

    def ack(self, mid, qos):
        if self._manual_ack and qos == 2:
            return self._send_pubrec(mid)
        return super().ack(mid, qos)


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _final_name(dirpath, pid, n):
    return os.path.join(dirpath, "part-%d-%d.jsonl" % (pid, n))


def _tmp_name(dirpath, pid, n):
    return os.path.join(dirpath, ".part-%d-%d.jsonl.inprogress" % (pid, n))


def recover_inprogress(landing, log=None):
    """Publish the in-progress files that dead collectors left in `landing`.

    Each is cut after its last complete line (a torn tail was never
    acknowledged, so the broker redelivers it), then renamed to its final
    name; an empty one is removed.  Files of live processes other than this
    one are left alone.  Returns (files renamed, bytes of torn tail dropped).
    """
    renamed = dropped = 0
    me = os.getpid()
    if not os.path.isdir(landing):
        return 0, 0
    for root, _dirs, files in os.walk(landing):
        for name in files:
            m = INPROGRESS_RE.match(name)
            if not m:
                continue
            pid, n = int(m.group(1)), int(m.group(2))
            if pid != me and _pid_alive(pid):
                continue
            path = os.path.join(root, name)
            with open(path, "r+b") as f:
                data = f.read()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    f.truncate(keep)
                    f.flush()
                    os.fsync(f.fileno())
                    dropped += len(data) - keep
            if keep == 0:
                os.remove(path)
                continue
            final = _final_name(root, pid, n)
            k = 0
            while os.path.exists(final):
                k += 1
                final = os.path.join(
                    root, "part-%d-%d-recovered-%d.jsonl" % (pid, n, k))
            os.rename(path, final)
            _fsync_dir(root)
            renamed += 1
    if log and (renamed or dropped):
        log("recovered %d in-progress file(s) of an earlier run "
            "(%d byte(s) of torn last line dropped)" % (renamed, dropped))
    return renamed, dropped


class _Writer:
    """One open landing file, hidden until rolled."""

    def __init__(self, dirpath):
        os.makedirs(dirpath, exist_ok=True)
        pid = os.getpid()
        n = 0
        while (os.path.exists(_final_name(dirpath, pid, n))
               or os.path.exists(_tmp_name(dirpath, pid, n))):
            n += 1
        self.dir = dirpath
        self.tmp = _tmp_name(dirpath, pid, n)
        self.final = _final_name(dirpath, pid, n)
        self.f = open(self.tmp, "xb")
        _fsync_dir(dirpath)
        self.opened = time.monotonic()
        self.size = 0
        self.dirty = False

    def write(self, data):
        self.f.write(data)
        self.size += len(data)
        self.dirty = True

    def sync(self):
        if self.dirty:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.dirty = False

    def close(self):
        """fsync, close and rename to the final name."""
        self.sync()
        self.f.close()
        os.rename(self.tmp, self.final)
        _fsync_dir(self.dir)


# Never subscribed: unsubscribing from it is a round trip (see _acks_read).
_FENCE = "$holdfast-collector/fence"


class Collector:
    """Subscriber that lands telemetry, acknowledging only what is on disk.

    start() runs it in a background thread (returns once subscribed);
    run() runs it in the calling thread until stop() or `duration` seconds.
    stats() gives the counters.  One collector per landing directory and
    process.
    """

    def __init__(self, host="127.0.0.1", port=1883, landing="landing",
                 prefix=DEFAULT_PREFIX, client_id=DEFAULT_CLIENT_ID,
                 sub_qos=2, batch_max=100, batch_ms=200, batch_idle_ms=5,
                 roll_s=60.0, roll_bytes=64 << 20, keepalive=30,
                 progress_s=10.0, log=None, group=None):
        if sub_qos not in (1, 2):
            raise ValueError("sub_qos must be 1 or 2")
        self.host, self.port = host, int(port)
        self.landing = os.path.abspath(landing)
        self.prefix = prefix.rstrip("/")
        self.topic = "%s/+/telemetry" % self.prefix
        if group:
            # A shared subscription: the broker hands each message to one
            # member of the group (mosquitto 2 does it for MQTT 3.1.1
            # clients too). Each member needs its own client id (its own
            # persistent session: what it had in flight waits for it).
            if "/" in group or "+" in group or "#" in group:
                raise ValueError("group %r: a share name has no '/', '+' or '#'" % group)
            self.topic = "$share/%s/%s" % (group, self.topic)
        self.client_id = client_id
        self.sub_qos = sub_qos
        self.batch_max = max(1, int(batch_max))
        self.batch_s = batch_ms / 1000.0
        self.idle_s = batch_idle_ms / 1000.0
        self.roll_s = roll_s
        self.roll_bytes = roll_bytes
        self.keepalive = keepalive
        self.progress_s = progress_s
        self._log_fn = log or (lambda line: print(line, file=sys.stderr,
                                                   flush=True))
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._thread = None
        self._error = None
        self._connected = False
        self._writers = {}        # key -> _Writer; key ("date", "hour") or QUARANTINE
        self._batch = []          # (key, line bytes)
        self._acks = []           # (mid, qos) to send once the batch is on disk
        # QoS 2 packet ids landed and not yet released (PUBREL): a PUBLISH
        # the broker sends again (DUP, after a reconnect, because our PUBREC
        # did not reach it) is answered with PUBREC, not landed twice. This
        # is the receiver's side of exactly once (MQTT 3.1.1, 4.3.3); it
        # lasts as long as the process (a crashed collector lands such a
        # message again: docs/telemetry.md).
        self._landed_q2 = set()
        self._batch_start = 0.0
        self._t0 = time.monotonic()
        self._n = dict(received=0, written=0, quarantined=0, acked=0,
                       batches=0, files=0, reconnects=0, q2_redelivered=0)
        c = _Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                    clean_session=False, protocol=mqtt.MQTTv311,
                    manual_ack=True)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_subscribe = self._on_subscribe
        c.on_message = self._on_message
        c.on_pubrel = self._landed_q2.discard
        self._client = c

    # -- public -------------------------------------------------------------

    def log(self, msg):
        self._log_fn("collector: " + msg)

    def stats(self):
        s = dict(self._n)
        s["pending"] = len(self._batch)
        return s

    def start(self, timeout=10.0):
        """Run in a background thread; return once subscribed."""
        if self._thread is not None:
            raise CollectorError("collector already started")
        self._thread = threading.Thread(target=self._run_safe,
                                        name="collector", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._subscribed.wait(0.05):
            if self._error is not None or not self._thread.is_alive():
                self._thread.join()
                raise CollectorError("collector did not start: %s"
                                     % (self._error or "stopped"))
            if time.monotonic() > deadline:
                self.stop()
                raise CollectorError(
                    "collector not subscribed to %s on %s:%s within %.0fs"
                    % (self.topic, self.host, self.port, timeout))
        return self

    def stop(self, timeout=30.0):
        """Flush, fsync, acknowledge, roll files, disconnect."""
        self._stop.set()
        if self._thread is not None and \
                self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._error is not None:
            raise CollectorError(str(self._error))

    def run(self, duration=None):
        """Run in this thread until stop() (or a signal handler calling it)."""
        if duration is not None:
            timer = threading.Timer(duration, self._stop.set)
            timer.daemon = True
            timer.start()
        self._run_safe()
        if self._error is not None:
            raise CollectorError(str(self._error))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- main loop ----------------------------------------------------------

    def _run_safe(self):
        try:
            self._run()
        except Exception as e:  # reported by start()/stop()/run()
            self._error = e
            self.log("stopped on error: %s" % e)
            try:
                self._client.disconnect()
            except Exception:
                pass

    def _run(self):
        recover_inprogress(self.landing, self.log)
        os.makedirs(self.landing, exist_ok=True)
        backoff = 0.5
        next_progress = time.monotonic() + self.progress_s
        # Checked often enough that a file is rolled within a quarter of
        # roll_s of its age (streaming reads only rolled files).
        roll_check = min(1.0, self.roll_s / 4.0)
        next_roll = time.monotonic() + roll_check
        first = True
        while not self._stop.is_set():
            if not self._connected:
                if not self._connect(first):
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 10.0)
                    continue
                first = False
                backoff = 0.5
            if self._batch:
                timeout = min(self.idle_s, max(0.0, self._batch_start
                                               + self.batch_s
                                               - time.monotonic()))
            else:
                timeout = 0.1
            before = self._n["received"]
            t = time.monotonic()
            rc = self._client.loop(timeout)
            now = time.monotonic()
            if self._batch:
                idle = (self._n["received"] == before
                        and now - t >= timeout * 0.9)
                if (idle or len(self._batch) >= self.batch_max
                        or now - self._batch_start >= self.batch_s):
                    self._flush(ack=self._connected)
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS and self._connected:
                # on_disconnect normally ran already; make sure.
                self._lost("loop: %s" % mqtt.error_string(rc))
            if now >= next_roll:
                self._roll(now)
                next_roll = now + roll_check
            if self.progress_s and now >= next_progress:
                self._progress()
                next_progress = now + self.progress_s
        self._shutdown()

    def _connect(self, first):
        c = self._client
        try:
            if first:
                c.connect(self.host, self.port, keepalive=self.keepalive)
            else:
                c.reconnect()
        except OSError as e:
            self.log("cannot connect to %s:%s: %s; retrying"
                     % (self.host, self.port, e))
            return False
        self._connected = True   # TCP up, CONNECT sent; CONNACK in loop
        return True

    def _shutdown(self):
        self._flush(ack=self._connected)
        for key in list(self._writers):
            self._close_writer(key)
        if self._connected:
            self._acks_read()
            # DISCONNECT: the session stays on the broker (clean_session is
            # False).
            self._client.disconnect()
            self._connected = False
        self._progress(final=True)

    def _acks_read(self, timeout=10.0):
        """Waits until the broker has read every ack sent so far: an
        UNSUBSCRIBE (of a filter never subscribed) answered by UNSUBACK. A
        broker handles one connection's packets in order, so the answer
        comes after the acks. Without it a restart with the same client id
        can take over the session before the broker read the last acks, and
        gets those messages again (landed twice; the pipeline deduplicates,
        but a clean stop should not cause it). Bounded: on timeout, stop
        anyway (at-least-once)."""
        done = threading.Event()
        self._client.on_unsubscribe = lambda c, u, mid, rc, p: \
            done.set() if mid == sent[1] else None
        sent = self._client.unsubscribe(_FENCE)
        deadline = time.monotonic() + timeout
        while (sent[0] == MQTTErrorCode.MQTT_ERR_SUCCESS and not done.is_set()
               and time.monotonic() < deadline):
            if self._client.loop(0.05) != MQTTErrorCode.MQTT_ERR_SUCCESS:
                break

    # -- paho callbacks (run in the loop thread) -----------------------------

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        if reason_code.is_failure:
            self._connected = False
            raise CollectorError("broker refused the connection: %s"
                                 % reason_code)
        self.log("connected to %s:%s as %s (%s)"
                 % (self.host, self.port, self.client_id,
                    "resumed persistent session" if flags.session_present
                    else "new session"))
        if not flags.session_present:
            self._landed_q2.clear()   # the broker kept no packet id of ours
        client.subscribe(self.topic, qos=self.sub_qos)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):
        rc = reason_codes[0]
        if rc.is_failure:
            raise CollectorError("broker refused the subscription to %s: %s"
                                 % (self.topic, rc))
        granted = rc.value
        if granted < self.sub_qos:
            self.log("warning: broker granted QoS %d for %s (asked %d)"
                     % (granted, self.topic, self.sub_qos))
        self.log("subscribed to %s at QoS %d" % (self.topic, granted))
        self._subscribed.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        if self._connected and not self._stop.is_set():
            self._lost(str(reason_code))

    def _lost(self, why):
        self._connected = False
        self._n["reconnects"] += 1
        # Keep what was received (duplicates are fine) but do not acknowledge
        # on the next connection: the broker redelivers the unacknowledged.
        self._flush(ack=False)
        self.log("connection lost (%s); reconnecting" % why)

    def _on_message(self, client, userdata, msg):
        rx_ms = int(time.time() * 1000)
        self._n["received"] += 1
        if msg.qos == 2 and msg.dup and msg.mid in self._landed_q2:
            self._n["q2_redelivered"] += 1
            self._acks.append((msg.mid, 2))   # with the next batch: in order
            if not self._batch:
                self._flush_acks()
            return
        text = msg.payload.decode("utf-8", errors="replace")
        rec = {"topic": msg.topic, "qos": msg.qos, "retain": bool(msg.retain),
               "dup": bool(msg.dup), "rx_ms": rx_ms, "payload": text}
        reason = validate_payload(text)
        if reason is None:
            key = time.strftime("%Y-%m-%d %H", time.gmtime(rx_ms / 1000.0))
        else:
            key = QUARANTINE
            rec["reason"] = reason
        line = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
        if not self._batch:
            self._batch_start = time.monotonic()
        self._batch.append((key, line))
        if msg.qos > 0:
            self._acks.append((msg.mid, msg.qos))

    # -- files --------------------------------------------------------------

    def _writer(self, key):
        w = self._writers.get(key)
        if w is None:
            if key == QUARANTINE:
                d = os.path.join(self.landing, QUARANTINE)
            else:
                date, hour = key.split(" ")
                d = os.path.join(self.landing, "date=" + date,
                                 "hour=" + hour)
            w = self._writers[key] = _Writer(d)
        return w

    def _flush(self, ack):
        """Write the batch, fsync it, then (if ack) acknowledge it."""
        if not self._batch:
            return
        touched = set()
        good = bad = 0
        for key, line in self._batch:
            w = self._writer(key)
            w.write(line)
            touched.add(key)
            if key == QUARANTINE:
                bad += 1
            else:
                good += 1
        for key in touched:
            self._writers[key].sync()
        self._n["written"] += good
        self._n["quarantined"] += bad
        self._n["batches"] += 1
        self._batch = []
        self._landed_q2.update(mid for mid, qos in self._acks if qos == 2)
        if ack:
            self._flush_acks()
        else:
            self._acks = []

    def _flush_acks(self):
        acks, self._acks = self._acks, []
        if self._connected:
            for mid, qos in acks:
                self._client.ack(mid, qos)
            self._n["acked"] += len(acks)

    def _roll(self, now):
        current = time.strftime("%Y-%m-%d %H", time.gmtime())
        for key, w in list(self._writers.items()):
            if (now - w.opened >= self.roll_s or w.size >= self.roll_bytes
                    or (key != QUARANTINE and key != current)):
                self._close_writer(key)

    def _close_writer(self, key):
        w = self._writers.pop(key)
        w.close()
        self._n["files"] += 1

    def _progress(self, final=False):
        s = self.stats()
        self.log("%s%.1fs received %d written %d quarantined %d acked %d "
                 "pending %d files %d reconnects %d"
                 % ("done: " if final else "", time.monotonic() - self._t0,
                    s["received"], s["written"], s["quarantined"], s["acked"],
                    s["pending"], s["files"], s["reconnects"]))


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Land holdfast telemetry from MQTT into JSON-lines "
                    "files, acknowledging only what is fsync'ed.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=1883)
    ap.add_argument("--landing", required=True,
                    help="landing directory (local file system)")
    ap.add_argument("--prefix", default=DEFAULT_PREFIX)
    ap.add_argument("--client-id", default=DEFAULT_CLIENT_ID,
                    help="fixed MQTT client id: the persistent session on "
                         "the broker is keyed by it")
    ap.add_argument("--sub-qos", type=int, choices=(1, 2), default=2,
                    help="subscription QoS (default 2)")
    ap.add_argument("--duration", type=float, default=None,
                    help="stop after S seconds (default: run until "
                         "SIGTERM/SIGINT)")
    ap.add_argument("--batch-max", type=int, default=100,
                    help="fsync+ack after this many messages (default 100)")
    ap.add_argument("--batch-ms", type=float, default=200,
                    help="... or this long after the batch's first message")
    ap.add_argument("--batch-idle-ms", type=float, default=5,
                    help="... or when nothing arrived for this long")
    ap.add_argument("--roll-s", type=float, default=60,
                    help="publish (rename) a landing file after S seconds")
    ap.add_argument("--roll-mb", type=float, default=64,
                    help="... or once it holds this many MB")
    ap.add_argument("--keepalive", type=int, default=30)
    ap.add_argument("--group", default=None,
                    help="share the load with other collectors: subscribe "
                         "$share/GROUP/<prefix>/+/telemetry (each collector "
                         "its own --client-id; same landing directory allowed)")
    ap.add_argument("--progress-s", type=float, default=10,
                    help="progress line to stderr every S seconds (0: off)")
    a = ap.parse_args(argv)
    col = Collector(a.host, a.port, a.landing, prefix=a.prefix,
                    client_id=a.client_id, sub_qos=a.sub_qos,
                    batch_max=a.batch_max, batch_ms=a.batch_ms,
                    batch_idle_ms=a.batch_idle_ms, roll_s=a.roll_s,
                    roll_bytes=int(a.roll_mb * (1 << 20)),
                    keepalive=a.keepalive, progress_s=a.progress_s,
                    group=a.group)

    def on_signal(signum, frame):
        col.log("%s: stopping" % signal.Signals(signum).name)
        col._stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        col.run(a.duration)
    except CollectorError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

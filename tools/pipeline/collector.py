"""Collector: MQTT telemetry -> landing files (JSON lines), losing nothing.

    PYTHONPATH=tools python -m pipeline.collector --host H --port P --landing DIR \\
        [--prefix holdfast] [--client-id ID] [--sub-qos 2] [--duration S]

Subscribes `<prefix>/+/telemetry` with a persistent session (clean_session
False, fixed client id).  Each message becomes one JSON line
(docs/telemetry.md) in `<landing>/date=YYYY-MM-DD/hour=HH/part-<pid>-<n>.jsonl`;
a payload that is not a valid reading (pipeline/contract.py, the one
contract the pipeline checks too) goes to
`<landing>/quarantine/part-<pid>-<n>.jsonl` with a "reason", and is
acknowledged like a reading: it cannot come back.  No message, however
made, stops the collector.  Messages are
acknowledged to the broker only after the batch that holds them has been
written, flushed and fsync'ed, so a crash at any point loses nothing: the
broker redelivers what was not acknowledged (the landing may then hold
duplicates; the pipeline removes them).

The MQTT side is holdfast's own codec (firmware/holdfast/codec.py) on a
plain socket, not paho: a batch is whatever the socket has when the reader
catches up (group commit), and its acknowledgements (PUBACK, PUBREC, in the
order the messages came) go out in one write after its fsync.  A QoS 2
message is acknowledged with PUBREC only once landed, a PUBREL of any packet
id is answered with PUBCOMP, and a resent copy of a landed QoS 2 message
(DUP, after a reconnect or a collector restart) is answered without landing
it again.  Measured against paho's path: docs/bench.md, "Ingest".

A file being written is hidden (`.part-<pid>-<n>.jsonl.inprogress`, which
Spark and the pipeline skip) and renamed to its final name when it is rolled
(hour change, age, size) or at shutdown.  After a crash, the next start
renames the files left behind by dead collectors, dropping a torn last line
(never acknowledged, so redelivered).

Importable: `Collector(host, port, landing).start()` ... `.stop()`.
"""

import argparse
import collections
import fcntl
import json
import os
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
from json.encoder import encode_basestring_ascii as _json_str

try:
    from holdfast import codec
except ImportError:   # run from a checkout: the firmware is beside tools/
    sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "firmware"))
    from holdfast import codec
from holdfast import inbound, topics
from holdfast.errors import MQTTProtocolError
from holdfast.reasons import refused

from pipeline import contract

# MQTT's packet types (the codec keeps them as private consts, to spare a
# board's heap).
CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 2, 3, 4, 5, 6, 7
SKIPPED = 16  # codec.Reader.next(): a PUBLISH larger than its buffer, passed over
SUBACK, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 9, 11, 12, 13, 14
SUBACK_FAILURE = 0x80

DEFAULT_PREFIX = "holdfast"
DEFAULT_CLIENT_ID = "holdfast-collector"
QUARANTINE = "quarantine"
# Also a file claimed by a collector that died recovering it.
INPROGRESS_RE = re.compile(r"^\.part-(\d+)-(\d+)\.jsonl\.inprogress(?:\.claimed-\d+)?$")

class CollectorError(RuntimeError):
    pass


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


def _final_name(dirpath, pid, n):
    return os.path.join(dirpath, "part-%d-%d.jsonl" % (pid, n))


def _tmp_name(dirpath, pid, n):
    return os.path.join(dirpath, ".part-%d-%d.jsonl.inprogress" % (pid, n))


def _private_dirs(root, *parts):
    """root/part/... made owner-only (0700) where this creates them: the
    landing holds what every device sent."""
    path = root
    for part in ("",) + parts:
        path = os.path.join(path, part) if part else path
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    return path


def _locked(f):
    """Takes the lock a live writer holds on its file (flock: the kernel
    drops it when the process dies, whatever its pid becomes); False when
    someone holds it."""
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def recover_inprogress(landing, log=None, q2=None):
    """Publish the in-progress files that dead collectors left in `landing`.

    A file is dead when no process holds its lock (a live collector
    holds one on each file it writes; a pid alone can be reused). It is
    claimed atomically first (renamed to a name of this process: of two
    collectors starting together, one takes it, the other leaves it), cut
    after its last complete line (a torn tail was never acknowledged, so
    the broker redelivers it), fsync'ed whole (its writer may have died
    before its fsync, and a resent QoS 2 message is answered from it),
    given the time of now (a stream skips files older than the newest it
    saw by its maxFileAge), and renamed to its final name; an empty one is
    removed.  With q2 (a set), the (topic, payload) of every QoS 2 line of
    those files, up to the last Q2_RECOVERED of each, is added to it.
    Returns (files renamed, bytes of torn tail dropped).
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
            path = os.path.join(root, name)
            try:
                f = open(path, "r+b")
            except FileNotFoundError:
                continue              # claimed by another collector
            with f:
                if not _locked(f):
                    continue          # its writer is alive
                claimed = os.path.join(root, ".part-%d-%d.jsonl.inprogress.claimed-%d"
                                       % (pid, n, me))
                try:
                    os.rename(path, claimed)
                except FileNotFoundError:
                    continue          # another collector claimed and published it
                data = f.read()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    f.truncate(keep)
                    dropped += len(data) - keep
                f.flush()
                os.fsync(f.fileno())
                if q2 is not None:
                    q2.update(_q2_lines(data[:keep]))
                if keep == 0:
                    os.remove(claimed)
                    _fsync_dir(root)
                    continue
                os.utime(f.fileno())
                final = _final_name(root, pid, n)
                k = 0
                while os.path.exists(final):
                    k += 1
                    final = os.path.join(
                        root, "part-%d-%d-recovered-%d.jsonl" % (pid, n, k))
                os.rename(claimed, final)
                _fsync_dir(root)
                renamed += 1
    if log and (renamed or dropped):
        log("recovered %d in-progress file(s) of an earlier run "
            "(%d byte(s) of torn last line dropped)" % (renamed, dropped))
    return renamed, dropped


class _Writer:
    """One open landing file (0600, locked while this process lives),
    hidden until rolled."""

    def __init__(self, root, *parts):
        dirpath = _private_dirs(root, *parts)
        pid = os.getpid()
        n = 0
        while (os.path.exists(_final_name(dirpath, pid, n))
               or os.path.exists(_tmp_name(dirpath, pid, n))):
            n += 1
        self.dir = dirpath
        self.tmp = _tmp_name(dirpath, pid, n)
        self.final = _final_name(dirpath, pid, n)
        self.f = open(os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
                      "wb", buffering=0)
        fcntl.flock(self.f.fileno(), fcntl.LOCK_EX)
        _fsync_dir(dirpath)
        self.opened = time.monotonic()
        self.size = 0
        self.dirty = False

    def write(self, data):
        view = memoryview(data)
        try:
            while view:
                view = view[self.f.write(view):]
        except OSError:
            # Cut short (a disk full for a moment): the batch is written
            # again whole, so no torn line may stay in the middle of the file.
            self.f.truncate(self.size)
            self.f.seek(self.size)
            raise
        self.size += len(data)
        self.dirty = True

    def sync(self):
        if self.dirty:
            os.fsync(self.f.fileno())
            self.dirty = False

    def close(self):
        """fsync, rename to the final name, close; a failed rename leaves
        the file open, to be published at the next roll."""
        self.sync()
        os.rename(self.tmp, self.final)
        _fsync_dir(self.dir)
        self.f.close()


# Never subscribed: unsubscribing from it is a round trip (see _acks_read).
_FENCE = "$holdfast-collector/fence"
# The receive buffer: a PUBLISH larger than this is quarantined unread.
RX_SIZE = 1 << 18
# A restarted collector remembers at most this many QoS 2 lines of each file
# its dead predecessor left open: a broker has at most 65535 packet ids in
# flight to one client, and the ones whose PUBREC it never got were landed last.
Q2_RECOVERED = 65535
_Q2_MARK = b'"qos":2,'


def _q2_lines(data):
    """(topic, payload) of the last Q2_RECOVERED QoS 2 lines in landing bytes."""
    tail = collections.deque(maxlen=Q2_RECOVERED)
    for line in data.splitlines():
        if _Q2_MARK in line:
            rec = json.loads(line)
            if rec.get("qos") == 2:
                tail.append((rec["topic"], rec["payload"]))
    return tail


def _next_publish(r):
    """Takes the next packet out of Reader r, as r.next() would (r.type,
    flags, pid, topic and payload set), when it is a complete, well-formed
    MQTT 3.1.1 PUBLISH that fits r's buffer; else leaves r as it was and
    returns False, and r.next() decides (and says what is wrong).

    The codec's checks, made with CPython's builtins (bytearray.find, the
    strict UTF-8 decoder) instead of its byte loops, which are written for
    MicroPython: those loops were half the collector's CPU a reading
    (docs/pipeline.md, "Ingest ceiling"). test_collector holds the two to
    the same verdict and the same fields.
    """
    b = r.buf
    s = r.start
    end = r.end
    if end - s < 2 or r.skip:
        return False
    first = b[s]
    flags = first & 15
    qos = flags >> 1 & 3
    if first >> 4 != PUBLISH or qos == 3 or (flags & 8 and not qos):
        return False
    i = s + 1
    rl = shift = 0
    while True:
        if i >= end:
            return False
        d = b[i]
        i += 1
        rl |= (d & 127) << shift
        if d < 128:
            break
        shift += 7
        if shift == 28:
            return False
    stop = i + rl
    t = i + 2
    if stop > end or t > stop:
        return False
    j = t + (b[i] << 8 | b[i + 1])
    if j == t or j > stop or b.find(43, t, j) >= 0 or b.find(35, t, j) >= 0 \
            or b.find(0, t, j) >= 0:
        return False
    topic = r.mv[t:j]
    try:
        str(topic, "utf-8")
    except UnicodeDecodeError:
        return False
    pid = 0
    if qos:
        if j + 2 > stop:
            return False
        pid = b[j] << 8 | b[j + 1]
        if not pid:
            return False
        j += 2
    r.start = stop
    r.type = PUBLISH
    r.flags = flags
    r.pid = pid
    r.topic = topic
    r.payload = r.mv[j:stop]
    return True


class _Link:
    """One MQTT 3.1.1 connection to the broker, on holdfast's codec."""

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rx = codec.Reader(RX_SIZE)
        inbound.ready(self.rx)  # it decodes the PUBLISH packets the broker forwards
        self.buf = bytearray(512)
        self.heard = self.said = time.monotonic()

    def send(self, data):
        self.sock.sendall(data)
        self.said = time.monotonic()

    def pump(self, wait):
        """Reads once what arrives within wait seconds; returns the byte count
        (0: nothing came)."""
        if not select.select((self.sock,), (), (), wait)[0]:
            return 0
        n = self.sock.recv_into(self.rx.tail())
        if not n:
            raise ConnectionError("the broker closed the connection")
        self.rx.end += n
        self.heard = time.monotonic()
        return n

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Collector:
    """Subscriber that lands telemetry, acknowledging only what is on disk.

    start() runs it in a background thread (returns once subscribed);
    run() runs it in the calling thread until stop() or `duration` seconds.
    stats() gives the counters.  One collector per landing directory and
    process.

    A batch is written and fsync'ed when the socket has had nothing more for
    batch_idle_ms, or holds batch_max messages, or is batch_ms old; the
    broker's window (mosquitto's max_inflight_messages, 20 by default) bounds
    how many messages one fsync can cover.
    """

    def __init__(self, host="127.0.0.1", port=1883, landing="landing",
                 prefix=DEFAULT_PREFIX, client_id=DEFAULT_CLIENT_ID,
                 sub_qos=2, batch_max=1000, batch_ms=200, batch_idle_ms=0,
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
        self._link = None
        self._writers = {}        # key -> _Writer; key "YYYY-MM-DD HH" or QUARANTINE
        self._batch = {}          # key -> [line bytes], not yet written
        self._pending = 0         # messages in _batch
        self._batch_start = 0.0
        # (packet type, id) to send in the order the packets came, after
        # the fsync of the batch: PUBACK, PUBREC, and PUBCOMP for PUBREL.
        self._acks = []
        # QoS 2 packet ids landed and not yet released (PUBREL): a PUBLISH
        # the broker sends again (DUP, after a reconnect, because our PUBREC
        # did not reach it) is answered with PUBREC, not landed twice. This
        # is the receiver's side of exactly once (MQTT 3.1.1, 4.3.3).
        self._landed_q2 = set()
        # The same across a restart: (topic, payload) of the QoS 2 lines a
        # dead collector left in its open files (recover_inprogress). A
        # resent copy that matches one is that reading, already on disk.
        self._recovered_q2 = set()
        self._fence_pid = 0
        self._more = False        # a full batch left packets in the buffer
        # The partition of the second _key_s: strftime once a second, not
        # once a message.
        self._key_s = -1
        self._key = None
        self._t0 = time.monotonic()
        self._n = dict(received=0, written=0, quarantined=0, acked=0,
                       batches=0, files=0, reconnects=0, q2_redelivered=0)

    # -- public -------------------------------------------------------------

    def log(self, msg):
        self._log_fn("collector: " + msg)

    def stats(self):
        s = dict(self._n)
        s["pending"] = self._pending
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
            if self._link is not None:
                self._link.close()

    def _run(self):
        recover_inprogress(self.landing, self.log, self._recovered_q2)
        os.makedirs(os.path.dirname(self.landing), exist_ok=True)
        _private_dirs(self.landing)
        backoff = 0.5
        next_progress = time.monotonic() + self.progress_s
        # Checked often enough that a file is rolled within a quarter of
        # roll_s of its age (streaming reads only rolled files).
        roll_check = min(1.0, self.roll_s / 4.0)
        next_roll = time.monotonic() + roll_check
        while not self._stop.is_set():
            if self._link is None:
                if not self._connect():
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 10.0)
                    continue
                backoff = 0.5
            try:
                self._step()
            except (OSError, MQTTProtocolError) as e:
                self._lost(str(e) or type(e).__name__)
            now = time.monotonic()
            if now >= next_roll:
                self._roll(now)
                next_roll = now + roll_check
            if self.progress_s and now >= next_progress:
                self._progress()
                next_progress = now + self.progress_s
        self._shutdown()

    def _step(self):
        """Reads what the broker sent; lands the batch once the socket has
        nothing more (or the batch is full or old), then acknowledges it."""
        link = self._link
        if self._more:
            got = True      # packets left in the buffer by a full batch
        else:
            if self._pending:
                wait = min(self.idle_s, max(0.0, self._batch_start + self.batch_s
                                            - time.monotonic()))
            else:
                wait = 0.1
            got = link.pump(wait)
        if got:
            self._more = self._packets()
        if self._pending:
            if (not got or self._more
                    or time.monotonic() - self._batch_start >= self.batch_s):
                self._flush(ack=True)
        elif self._acks:
            self._send_acks()
        now = time.monotonic()
        if self.keepalive:
            if now - link.heard > 1.5 * self.keepalive:
                raise ConnectionError("nothing from the broker for %.0f s"
                                      % (now - link.heard))
            if now - link.said >= self.keepalive:
                link.send(bytes(link.buf[:codec.ack(link.buf, PINGREQ, 0)]))

    def _connect(self):
        link = None
        try:
            link = _Link(self.host, self.port, max(10, self.keepalive))
            b = link.buf
            link.send(bytes(b[:codec.connect(b, self.client_id, clean=False,
                                             keepalive=self.keepalive)]))
            deadline = time.monotonic() + max(10, self.keepalive)
            r = link.rx
            while not r.next():
                if time.monotonic() > deadline:
                    raise ConnectionError("no CONNACK")
                link.pump(0.1)
            if r.type != CONNACK:
                raise MQTTProtocolError("packet type %d before CONNACK" % r.type)
        except (OSError, MQTTProtocolError) as e:
            if link is not None:
                link.close()
            self.log("cannot connect to %s:%s: %s; retrying"
                     % (self.host, self.port, e))
            return False
        if r.code:
            link.close()
            raise CollectorError("broker %s:%s: %s" % (self.host, self.port, refused(r.code)))
        self.log("connected to %s:%s as %s (%s)"
                 % (self.host, self.port, self.client_id,
                    "resumed persistent session" if r.session_present
                    else "new session"))
        if not r.session_present:
            # The broker kept no packet id of ours: nothing is resent.
            self._landed_q2.clear()
            self._recovered_q2.clear()
        self._link = link
        n = topics.subscribe(b, 1, [(self.topic, self.sub_qos)])
        link.send(bytes(b[:n]))
        return True

    def _shutdown(self):
        self._flush(ack=self._link is not None)
        for key in list(self._writers):
            self._close_writer(key)
        if self._link is not None:
            try:
                self._acks_read()
                # DISCONNECT: the session stays on the broker (clean_session
                # is False).
                b = self._link.buf
                self._link.send(bytes(b[:codec.ack(b, DISCONNECT, 0)]))
            except (OSError, MQTTProtocolError) as e:
                self.log("at stop: %s" % e)
            self._link.close()
            self._link = None
        self._progress(final=True)

    def _acks_read(self, timeout=10.0):
        """Waits until the broker has read every ack sent so far: an
        UNSUBSCRIBE (of a filter never subscribed) answered by UNSUBACK. A
        broker handles one connection's packets in order, so the answer
        comes after the acks. Without it a restart with the same client id
        can take over the session before the broker read the last acks, and
        gets those messages again (landed twice; the pipeline deduplicates,
        but a clean stop should not cause it). Messages that come meanwhile
        are neither landed nor acknowledged: the broker keeps them for the
        session. Bounded: on timeout, stop anyway (at-least-once)."""
        link = self._link
        self._fence_pid = 2
        n = topics.unsubscribe(link.buf, self._fence_pid, [_FENCE])
        link.send(bytes(link.buf[:n]))
        deadline = time.monotonic() + timeout
        while self._fence_pid and time.monotonic() < deadline:
            if link.pump(0.05):
                self._packets()

    # -- packets --------------------------------------------------------------

    def _packets(self):
        """Takes the complete packets out of the receive buffer; True when it
        stopped at a full batch (packets may be left)."""
        r = self._link.rx
        while self._pending < self.batch_max:
            if _next_publish(r):
                self._publish(r)
                continue
            t = r.next()
            if t == SKIPPED:
                self._too_large(r)
            elif t == PUBLISH:
                self._publish(r)
            elif t == PUBREL:
                self._landed_q2.discard(r.pid)
                if not self._fence_pid:
                    self._acks.append((PUBCOMP, r.pid))
            elif t == SUBACK:
                self._suback(r)
            elif t == UNSUBACK:
                if r.pid == self._fence_pid:
                    self._fence_pid = 0
            elif t == 0:
                return False
            elif t != PINGRESP:
                raise MQTTProtocolError("unexpected packet type %d from the broker" % t)
        return True

    def _suback(self, r):
        granted = r.payload[0]
        if granted == SUBACK_FAILURE:
            raise CollectorError("broker refused the subscription to %s"
                                 % self.topic)
        if granted < self.sub_qos:
            self.log("warning: broker granted QoS %d for %s (asked %d)"
                     % (granted, self.topic, self.sub_qos))
        self.log("subscribed to %s at QoS %d" % (self.topic, granted))
        self._subscribed.set()

    def _publish(self, r):
        if self._fence_pid:
            return     # stopping: the broker keeps it for the session
        self._n["received"] += 1
        flags = r.flags
        qos = (flags >> 1) & 3
        try:
            self._take(r, flags, qos)
        except Exception as e:    # no message may stop the collector
            self._land(QUARANTINE, str(r.topic, "utf-8", "replace"), qos, flags & 1,
                       bool(flags & 8), int(time.time() * 1000),
                       str(r.payload, "utf-8", "replace"),
                       "the collector could not handle this message (%s: %s)"
                       % (type(e).__name__, e))
            if qos:
                self._acks.append((PUBACK if qos == 1 else PUBREC, r.pid))

    def _take(self, r, flags, qos):
        dup = bool(flags & 8)
        topic = str(r.topic, "utf-8", "replace")
        try:
            text = str(r.payload, "utf-8")
        except UnicodeDecodeError:
            text = None
        if qos == 2 and dup:
            if r.pid in self._landed_q2:
                self._resent(r.pid)
                return
            if self._recovered_q2 and (topic, text) in self._recovered_q2:
                self._recovered_q2.discard((topic, text))
                self._landed_q2.add(r.pid)
                self._resent(r.pid)
                return
        rx = time.time()
        if text is None:
            text, reason = str(r.payload, "utf-8", "replace"), contract.R_NOT_UTF8
        else:
            reason = "; ".join(contract.problems(text, topic)) or None
        if reason is None:
            s = int(rx)
            if s != self._key_s:
                self._key_s = s
                self._key = time.strftime("%Y-%m-%d %H", time.gmtime(s))
            key = self._key
        else:
            key = QUARANTINE
        self._land(key, topic, qos, flags & 1, dup, int(rx * 1000), text, reason)
        if qos:
            self._acks.append((PUBACK if qos == 1 else PUBREC, r.pid))

    def _land(self, key, topic, qos, retain, dup, rx_ms, text, reason):
        # The bytes json.dumps(record, separators=(",", ":")) gives, built
        # without the dict: this is the per-message cost of the collector.
        line = '{"topic":%s,"qos":%d,"retain":%s,"dup":%s,"rx_ms":%d,"payload":%s%s}\n' % (
            _json_str(topic), qos, "true" if retain else "false",
            "true" if dup else "false", rx_ms, _json_str(text),
            "" if reason is None else ',"reason":' + _json_str(reason))
        if not self._pending:
            self._batch_start = time.monotonic()
        lines = self._batch.get(key)
        if lines is None:
            lines = self._batch[key] = []
        lines.append(line.encode())
        self._pending += 1

    def _resent(self, pid):
        """A copy of a QoS 2 message already landed: PUBREC (after the batch
        before it, in order), not landed again."""
        self._n["q2_redelivered"] += 1
        self._acks.append((PUBREC, pid))

    def _too_large(self, r):
        # Reader r passed over a PUBLISH larger than its buffer (SKIPPED).
        if self._fence_pid:
            return
        self._n["received"] += 1
        qos = (r.flags >> 1) & 3
        self._land(QUARANTINE, "", qos, 0, False, int(time.time() * 1000), "",
                   "a PUBLISH of %d bytes, more than the collector's receive "
                   "buffer (%d bytes): skipped unread" % (r.length, RX_SIZE))
        if r.pid:
            self._acks.append((PUBACK if qos == 1 else PUBREC, r.pid))

    def _lost(self, why):
        self._link.close()
        self._link = None
        self._more = False
        self._n["reconnects"] += 1
        # Keep what was received (duplicates are fine) but do not acknowledge
        # on the next connection: the broker redelivers the unacknowledged.
        self._flush(ack=False)
        self.log("connection lost (%s); reconnecting" % why)

    # -- files --------------------------------------------------------------

    def _writer(self, key):
        w = self._writers.get(key)
        if w is None:
            if key == QUARANTINE:
                parts = (QUARANTINE,)
            else:
                date, hour = key.split(" ")
                parts = ("date=" + date, "hour=" + hour)
            w = self._writers[key] = _Writer(self.landing, *parts)
        return w

    def _flush(self, ack):
        """Write the batch, fsync it, then (if ack) acknowledge it."""
        if not self._pending:
            return
        for key, lines in self._batch.items():
            self._writer(key).write(b"".join(lines))
            self._n["quarantined" if key == QUARANTINE else "written"] += len(lines)
        for key in self._batch:
            self._writers[key].sync()
        self._n["batches"] += 1
        self._batch = {}
        self._pending = 0
        self._landed_q2.update(pid for t, pid in self._acks if t == PUBREC)
        if ack:
            self._send_acks()
        else:
            self._acks = []

    def _send_acks(self):
        """Every ack due, in one write."""
        acks, self._acks = self._acks, []
        if self._link is None:
            return
        # PUBACK, PUBREC and PUBCOMP are 4 bytes each, type << 4 then 2 then
        # the id (codec.ack's, which costs five calls of Python an ack).
        self._link.send(struct.pack(">" + "BBH" * len(acks),
                                    *(v for t, pid in acks for v in (t << 4, 2, pid))))
        self._n["acked"] += sum(1 for t, _ in acks if t != PUBCOMP)

    def _roll(self, now):
        current = time.strftime("%Y-%m-%d %H", time.gmtime())
        for key, w in list(self._writers.items()):
            if (now - w.opened >= self.roll_s or w.size >= self.roll_bytes
                    or (key != QUARANTINE and key != current)):
                self._close_writer(key)

    def _close_writer(self, key):
        w = self._writers[key]
        try:
            w.close()
        except OSError as e:
            # The file stays open and hidden: the next roll tries again
            # (a dead collector's file is published by the next start).
            self.log("could not publish %s (%s); trying again at the next roll"
                     % (w.tmp, e))
            return
        del self._writers[key]
        self._n["files"] += 1

    def _progress(self, final=False):
        s = self.stats()
        self.log("%s%.1fs received %d written %d quarantined %d acked %d "
                 "pending %d files %d reconnects %d q2_redelivered %d"
                 % ("done: " if final else "", time.monotonic() - self._t0,
                    s["received"], s["written"], s["quarantined"], s["acked"],
                    s["pending"], s["files"], s["reconnects"], s["q2_redelivered"]))


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
    ap.add_argument("--batch-max", type=int, default=1000,
                    help="fsync+ack after this many messages (default 1000)")
    ap.add_argument("--batch-ms", type=float, default=200,
                    help="... or this long after the batch's first message")
    ap.add_argument("--batch-idle-ms", type=float, default=0,
                    help="... or when nothing more arrived for this long "
                         "(default 0: as soon as the socket has nothing more)")
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

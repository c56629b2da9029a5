"""tools/pipeline/collector.py against a real mosquitto (the `mosquitto` fixture).

- every published message lands (QoS 0, 1, 2), malformed payloads go to
  quarantine with a reason, and everything is acknowledged (a second
  collector with the same client id gets nothing redelivered);
- crash: the collector is SIGKILLed mid-stream while a publisher keeps
  publishing; a restarted collector (same client id, persistent session)
  lands every sequence number at least once, with both subscription QoS;
- the group fsync rule: an acknowledgement never precedes the fsync of its
  message (os.fsync and ack recorded in order), and a crash after a batch's
  fsync but before its acks loses nothing (the broker redelivers).
"""

import errno
import fcntl
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import paho.mqtt.client as mqtt
import pytest

from pipeline.cluster import terminate
import door_cases
from pipeline import contract
from pipeline.collector import QUARANTINE, Collector, CollectorError, recover_inprogress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
LANDING_KEYS = {"topic", "qos", "retain", "dup", "rx_ms", "payload"}


def reading(d, s, q, b=1):
    return json.dumps({"d": d, "b": b, "s": s, "q": q, "t": 21.5, "u": s},
                      separators=(",", ":"))


def publisher(broker, client_id, clean=True):
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                    clean_session=clean)
    c.max_queued_messages_set(0)
    c.connect(broker.host, broker.port)
    c.loop_start()
    return c


def landed(landing, hidden=True):
    """All landing records (data partitions, not quarantine)."""
    pats = ["date=*/hour=*/part-*.jsonl"]
    if hidden:
        pats.append("date=*/hour=*/.part-*.inprogress")
    out = []
    for pat in pats:
        for path in glob.glob(os.path.join(landing, pat)):
            with open(path) as f:
                for line in f:
                    if line.endswith("\n"):
                        out.append(json.loads(line))
    return out


def assert_each_lands_and_qos2_once(landing, n):
    """Every s in range(n) landed (published files); the odd ones, QoS 2, once."""
    copies = {}
    for r in landed(landing, hidden=False):
        s = json.loads(r["payload"])["s"]
        copies[s] = copies.get(s, 0) + 1
    assert set(copies) == set(range(n))
    twice_q2 = [s for s, c in copies.items() if s % 2 == 1 and c > 1]
    assert twice_q2 == [], twice_q2


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting for " + what)
        time.sleep(0.05)


def test_the_contract_cases_on_the_collectors_side():
    # The same cases test_pipeline.py checks on Spark's side (door_cases):
    # with the shortcut for the board's own form and without it.
    for payload, topic, want in door_cases.CASES:
        for fast in (True, False):
            assert contract.problems(payload, topic, fast) == want, (payload[:80], topic, fast)
    assert contract.problems(reading("dev-1", 3, 1), "holdfast/dev-1/telemetry") == []


DEAD = 2 ** 22 + 12345          # above pid_max: never alive


def _publish_cases():
    """PUBLISH packets the codec encodes, each also mutated byte by byte and
    cut short, and the packets a broker must not send: QoS 3, DUP at QoS 0,
    an empty topic, wildcards, a NUL, bad UTF-8, packet id 0, a length past
    the packet, a packet larger than the reader's buffer, other types."""
    import random
    from holdfast import codec, inbound
    rnd = random.Random(11)
    buf = bytearray(4096)
    valid = []
    for qos in (0, 1, 2):
        for topic in ("holdfast/dev-1/telemetry", "h/\u00e9\u4e2d/t", "a"):
            for payload in (b"", b'{"d":"x","b":1}', bytes(300), b"x" * 1500):
                dup = bool(qos) and rnd.random() < 0.5
                n = codec.publish(buf, topic, payload, qos=qos, dup=dup, retain=rnd.random() < 0.3,
                                  pid=rnd.randint(1, 65535) if qos else 0)
                valid.append(bytes(buf[:n]))
    cases = list(valid)
    for p in valid:
        for _ in range(40):
            q = bytearray(p[:64])
            q[rnd.randrange(len(q))] = rnd.choice([0, 35, 43, 0xFF, 0xC0, 0xED, 0xA0, 0x80, 0x32,
                                                   0x36, 0x38, rnd.randrange(256)])
            cases.append(bytes(q) + p[64:])
        cases.append(p[:rnd.randrange(1, len(p))])
    cases += [b"\x36\x05\x00\x01a\x00\x01",       # QoS 3
              b"\x38\x03\x00\x01a",               # DUP at QoS 0
              b"\x30\x02\x00\x00",                # empty topic
              b"\x32\x05\x00\x01a\x00\x00",       # packet id 0
              b"\x32\x04\x00\x01a\x00",           # no room for the packet id
              b"\x30\x03\x00\x05a",               # topic past the packet
              b"\x30\x04\x00\x02\xed\xa0",         # a surrogate in the topic
              b"\x30\xff\xff\xff\xff\x7f",         # a fifth length byte
              b"\x40\x02\x00\x01", b"\x90\x03\x00\x01\x01", b"\xd0\x00"]
    return valid, cases


def test_the_publish_fast_path_takes_what_the_codec_takes_and_nothing_else():
    # The collector decodes a PUBLISH with CPython's builtins
    # (collector._next_publish) and leaves everything else to the codec:
    # for every packet, either both take it, with the same fields, or the
    # fast path leaves the reader as it was and the codec does not return
    # a whole PUBLISH (it waits, skips it, or refuses it).
    from holdfast import codec, inbound
    from holdfast.errors import MQTTProtocolError
    from pipeline import collector
    valid, cases = _publish_cases()

    def readers(data):
        rs = [codec.Reader(1024), codec.Reader(1024)]
        for r in rs:
            inbound.ready(r)  # the collector's Reader decodes PUBLISH packets
        for r in rs:
            n = min(len(data), len(r.buf))
            r.buf[:n] = data[:n]
            r.end = n
        return rs

    def fields(r):
        return (r.start, r.type, r.flags, r.pid, bytes(r.topic), bytes(r.payload))

    took = 0
    for data in cases:
        fast, ref = readers(data)
        try:
            t = ref.next()
        except MQTTProtocolError:
            t = None
        if collector._next_publish(fast):
            took += 1
            assert t == collector.PUBLISH and fields(fast) == fields(ref), data
        else:
            assert (fast.start, fast.end) == (0, min(len(data), 1024)), data
            assert t != collector.PUBLISH, data
    assert took > len(valid) / 2
    # A stream of them, back to back: the same packets, in step.
    stream = b"".join(p for p in valid if len(p) < 1000)
    fast, ref = codec.Reader(1 << 16), codec.Reader(1 << 16)
    inbound.ready(fast)
    inbound.ready(ref)
    for r in (fast, ref):
        r.buf[:len(stream)] = stream
        r.end = len(stream)
    n = 0
    while collector._next_publish(fast):
        assert ref.next() == collector.PUBLISH and fields(fast) == fields(ref)
        n += 1
    assert n == len([p for p in valid if len(p) < 1000]) and ref.next() == 0


def _dead_file(tmp_path, data, n=0, pid=DEAD):
    d = tmp_path / "date=2026-01-01" / "hour=00"
    d.mkdir(parents=True, exist_ok=True)
    path = d / (".part-%d-%d.jsonl.inprogress" % (pid, n))
    path.write_bytes(data)
    return d, path


def test_recover_inprogress_cuts_torn_line(tmp_path):
    good = b'{"a":1}\n{"a":2}\n'
    d, _ = _dead_file(tmp_path, good + b'{"a":3,"tor')
    _dead_file(tmp_path, b'{"tor', n=1)
    # A live collector's file: it holds the lock (whatever its name says).
    mine = d / (".part-%d-7.jsonl.inprogress" % os.getpid())
    mine.write_bytes(good)
    with open(mine, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        renamed, dropped = recover_inprogress(str(tmp_path))
    assert (renamed, dropped) == (1, len(b'{"a":3,"tor') + len(b'{"tor'))
    assert (d / ("part-%d-0.jsonl" % DEAD)).read_bytes() == good
    assert not (d / (".part-%d-1.jsonl.inprogress" % DEAD)).exists()
    assert mine.exists()          # a live process's file is left alone


def test_a_dead_collectors_pid_reused_by_a_live_process_is_recovered(tmp_path):
    # The pid in the name is alive (this test's parent), but nobody holds
    # the file's lock: its writer is dead, the file is published.
    d, path = _dead_file(tmp_path, b'{"a":1}\n', pid=os.getppid())
    assert recover_inprogress(str(tmp_path)) == (1, 0)
    assert not path.exists()
    assert (d / ("part-%d-0.jsonl" % os.getppid())).read_bytes() == b'{"a":1}\n'


def test_recovery_fsyncs_what_it_publishes_before_anything_is_answered(tmp_path, monkeypatch):
    # A dead collector's file without a torn line (killed after its write,
    # before its fsync): recovery still fsyncs it before it is published
    # (and before a resent QoS 2 message is answered from it).
    d, path = _dead_file(tmp_path, b'{"qos":2,"topic":"t","payload":"p"}\n')
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink("/proc/self/fd/%d" % fd))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    q2 = set()
    assert recover_inprogress(str(tmp_path), q2=q2) == (1, 0)
    assert q2 == {("t", "p")}
    assert any(".part-%d-0.jsonl.inprogress" % DEAD in p for p in synced), synced


def test_two_collectors_recovering_one_file_take_it_once(tmp_path, monkeypatch):
    # The second collector lists the dead file, and the first claims and
    # publishes it before the second opens it: the second leaves it (it
    # used to stop on FileNotFoundError before it connected).
    d, path = _dead_file(tmp_path, b'{"a":1}\n')
    real_walk = os.walk

    def walk(top):
        listed = list(real_walk(top))
        monkeypatch.setattr(os, "walk", real_walk)
        assert recover_inprogress(str(tmp_path)) == (1, 0)   # the first collector
        return iter(listed)

    monkeypatch.setattr(os, "walk", walk)
    assert recover_inprogress(str(tmp_path)) == (0, 0)
    assert (d / ("part-%d-0.jsonl" % DEAD)).read_bytes() == b'{"a":1}\n'
    assert sorted(os.listdir(d)) == ["part-%d-0.jsonl" % DEAD]


def test_a_recovered_file_carries_the_time_of_its_recovery(tmp_path):
    # A stream skips a file older than the newest it saw by maxFileAge (7
    # days): a dead collector's file recovered a month later is new.
    d, path = _dead_file(tmp_path, b'{"a":1}\n')
    month_ago = time.time() - 30 * 86400
    os.utime(path, (month_ago, month_ago))
    before = time.time() - 1
    recover_inprogress(str(tmp_path))
    assert os.stat(d / ("part-%d-0.jsonl" % DEAD)).st_mtime >= before


def test_a_write_cut_short_leaves_no_torn_line_in_the_file(tmp_path):
    # A disk full for a moment: the write is cut short, the collector writes
    # the batch again; the file holds whole lines only.
    col = Collector(landing=str(tmp_path), log=lambda line: None)
    w = col._writer(QUARANTINE)
    w.write(b'{"a":1}\n')
    real = w.f

    class Full:
        def __getattr__(self, name):
            return getattr(real, name)

        def write(self, data):
            real.write(bytes(data[:5]))
            raise OSError(errno.ENOSPC, "No space left on device")

    w.f = Full()
    with pytest.raises(OSError):
        w.write(b'{"a":2}\n{"a":3}\n')
    w.f = real
    w.write(b'{"a":2}\n{"a":3}\n')
    w.close()
    assert open(w.final, "rb").read() == b'{"a":1}\n{"a":2}\n{"a":3}\n'


def test_a_failed_rename_at_roll_keeps_the_collector_and_the_file(tmp_path, monkeypatch):
    logged = []
    col = Collector(landing=str(tmp_path), log=logged.append)
    w = col._writer(QUARANTINE)
    w.write(b'{"a":1}\n')
    real = os.rename

    def rename(a, b):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "rename", rename)
    col._roll(time.monotonic() + 3600)           # raised out of the loop before
    assert QUARANTINE in col._writers and os.path.exists(w.tmp)
    assert any("could not publish" in line for line in logged), logged
    monkeypatch.setattr(os, "rename", real)
    col._roll(time.monotonic() + 3600)
    assert QUARANTINE not in col._writers
    assert open(w.final, "rb").read() == b'{"a":1}\n'


def test_collector_lands_everything_and_quarantines(mosquitto, tmp_path):
    landing = str(tmp_path / "landing")
    cid = "test-collector-lands"
    col = Collector(mosquitto.host, mosquitto.port, landing, client_id=cid,
                    progress_s=0, log=lambda line: None).start()
    t0 = int(time.time() * 1000)
    pub = publisher(mosquitto, "test-pub-lands")
    infos = []
    sent = {}
    for s in range(90):
        q = s % 3
        d = "dev-q%d" % q
        sent[(d, s)] = q
        infos.append(pub.publish("holdfast/%s/telemetry" % d,
                                 reading(d, s, q), qos=q))
    bad = [("not json at all", 1, "payload is not a flat JSON object"),
           ('{"d":"dev-bad","b":1,"q":2}', 2, "missing key s"),
           ('{"d":"dev-bad","b":1,"s":"7","q":1}', 1, "s is not an integer")]
    for payload, q, _ in bad:
        infos.append(pub.publish("holdfast/dev-bad/telemetry", payload, qos=q))
    # Larger than the collector's receive buffer: skipped unread (the
    # Reader's SKIPPED), quarantined with the reason, acknowledged.
    infos.append(pub.publish("holdfast/dev-big/telemetry", "x" * (300 * 1024), qos=1))
    # Not ours: another prefix and another sub-topic are not subscribed.
    infos.append(pub.publish("other/dev-x/telemetry", reading("x", 1, 1), 1))
    infos.append(pub.publish("holdfast/dev-x/status", "up", qos=1))
    for i in infos:
        i.wait_for_publish(5)
    wait_for(lambda: col.stats()["written"] + col.stats()["quarantined"]
             >= 94, 20, "94 messages landed")
    col.stop()
    pub.loop_stop()
    pub.disconnect()
    t1 = int(time.time() * 1000)
    st = col.stats()
    assert (st["received"], st["written"], st["quarantined"]) == (94, 90, 4)
    assert st["acked"] == 60 + 4          # QoS 0 needs no ack

    # Files: published (renamed) at stop, named as the contract says, and
    # the owner's only (what every device sent).
    assert not glob.glob(landing + "/**/.part-*", recursive=True)
    for path in glob.glob(landing + "/**", recursive=True):
        mode = os.stat(path).st_mode & 0o777
        assert mode == (0o700 if os.path.isdir(path) else 0o600), (path, oct(mode))
    files = glob.glob(landing + "/date=*/hour=*/*")
    assert files
    for path in files:
        assert re.search(r"/date=\d{4}-\d\d-\d\d/hour=\d\d/part-%d-\d+\.jsonl$"
                         % os.getpid(), path), path
    recs = landed(landing, hidden=False)
    got = {}
    for r in recs:
        assert set(r) == LANDING_KEYS, r
        assert t0 <= r["rx_ms"] <= t1
        hour = time.strftime("date=%Y-%m-%d/hour=%H",
                             time.gmtime(r["rx_ms"] / 1000))
        p = json.loads(r["payload"])
        assert r["topic"] == "holdfast/%s/telemetry" % p["d"]
        assert r["qos"] == p["q"]        # min(published QoS, subscription 2)
        got[(p["d"], p["s"])] = got.get((p["d"], p["s"]), 0) + 1
        assert any(hour in f for f in files)
    assert set(got) == set(sent)
    assert sum(got.values()) == 90       # no redelivery on a clean run

    qfiles = glob.glob(os.path.join(landing, "quarantine", "part-*.jsonl"))
    assert len(qfiles) == 1
    with open(qfiles[0]) as f:
        qrecs = [json.loads(line) for line in f]
    assert len(qrecs) == 4
    big = [r for r in qrecs if r["reason"].startswith("a PUBLISH of 30")]
    assert len(big) == 1 and "more than the collector's receive buffer" in big[0]["reason"], qrecs
    assert big[0]["qos"] == 1 and big[0]["payload"] == "", big
    by_payload = {r["payload"]: r for r in qrecs}
    for payload, q, reason in bad:
        r = by_payload[payload]
        assert r["reason"].startswith(reason), r
        assert r["qos"] == q
        assert set(r) == LANDING_KEYS | {"reason"}

    # Everything was acknowledged: the persistent session has nothing left
    # to redeliver to the same client id. A reading published once it is
    # back comes after anything redelivered: when it has landed, only it.
    again = Collector(mosquitto.host, mosquitto.port,
                      str(tmp_path / "landing2"), client_id=cid,
                      progress_s=0, log=lambda line: None).start()
    pub = publisher(mosquitto, "test-pub-marker")
    pub.publish("holdfast/dev-marker/telemetry", reading("dev-marker", 0, 1),
                qos=1).wait_for_publish(5)
    pub.loop_stop()
    pub.disconnect()
    landing2 = str(tmp_path / "landing2")

    def devices():
        return [json.loads(r["payload"])["d"] for r in landed(landing2)]

    wait_for(lambda: "dev-marker" in devices(), 20, "the marker landed")
    again.stop()
    assert again.stats()["received"] == 1 and devices() == ["dev-marker"], devices()


def _start_collector(mosquitto, landing, cid, sub_qos, log_path):
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.collector", "--host", mosquitto.host,
         "--port", str(mosquitto.port), "--landing", landing,
         "--client-id", cid, "--sub-qos", str(sub_qos),
         "--batch-max", "50", "--batch-ms", "300", "--batch-idle-ms", "100",
         "--progress-s", "0.5"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=TOOLS))
    log.close()
    return proc


def _log_has(path, text, after=0):
    with open(path, errors="replace") as f:
        return f.read()[after:].count(text)


@pytest.mark.parametrize("sub_qos", [2, 1])
def test_collector_crash_loses_nothing(mosquitto, tmp_path, sub_qos):
    landing = str(tmp_path / "landing")
    log_path = str(tmp_path / "collector.log")
    open(log_path, "w").close()
    cid = "test-crash-sub%d" % sub_qos
    n = 400
    p1 = _start_collector(mosquitto, landing, cid, sub_qos, log_path)
    try:
        wait_for(lambda: _log_has(log_path, "subscribed to"), 15,
                 "collector subscribed")
        pub = publisher(mosquitto, "test-crash-pub%d" % sub_qos, clean=False)
        infos = []

        def publish_all():
            for s in range(n):
                q = 1 if s % 2 == 0 else 2
                infos.append(pub.publish("holdfast/crash-dev/telemetry",
                                         reading("crash-dev", s, q), qos=q))
                time.sleep(0.005)

        th = threading.Thread(target=publish_all)
        th.start()
        wait_for(lambda: len(landed(landing)) >= 80, 15, "80 lines landed")
        p1.send_signal(signal.SIGKILL)
        p1.wait(10)
        before = len(landed(landing))
        time.sleep(0.3)                 # publisher goes on; broker queues
        mark = os.path.getsize(log_path)
        p2 = _start_collector(mosquitto, landing, cid, sub_qos, log_path)
        try:
            th.join(30)
            for i in infos:
                i.wait_for_publish(10)
            assert before < n, "the kill came after the stream ended"

            def all_there():
                return {json.loads(r["payload"])["s"]
                        for r in landed(landing)} >= set(range(n))

            wait_for(all_there, 30, "every sequence number landed")
        finally:
            p2.send_signal(signal.SIGTERM)
            rc = p2.wait(15)
        pub.loop_stop()
        pub.disconnect()
    finally:
        if p1.poll() is None:
            p1.kill()
            p1.wait()
    with open(log_path, errors="replace") as f:
        log = f.read()
    assert rc == 0, log
    tail = log[mark:]
    assert "resumed persistent session" in tail, tail
    assert "recovered 1 in-progress file" in tail, tail
    assert "received" in tail and "SIGTERM: stopping" in tail, tail
    # p2 published the files p1 left behind, and its own at shutdown.
    assert not glob.glob(landing + "/**/.part-*", recursive=True)
    seqs = [json.loads(r["payload"])["s"] for r in landed(landing, False)]
    assert set(seqs) == set(range(n))
    assert len(seqs) >= n              # duplicates allowed, loss not


@pytest.mark.parametrize("sub_qos", [2, 1])
def test_an_ack_never_precedes_the_fsync_of_its_message(mosquitto, tmp_path, monkeypatch, sub_qos):
    # Recorded in order: each PUBLISH taken off the wire, each fsync, each
    # write to the socket (its acks decoded from the bytes).
    from pipeline import collector
    events = []
    real_fsync, real_send = collector.os.fsync, collector._Link.send
    real_publish = collector.Collector._publish

    def fsync(fd):
        real_fsync(fd)
        events.append(("fsync",))

    def send(self, data):
        data = bytes(data)
        if data[0] >> 4 in (4, 5, 7):          # PUBACK, PUBREC, PUBCOMP
            assert len(data) % 4 == 0, data
            acks = [(data[i] >> 4, data[i + 2] << 8 | data[i + 3]) for i in range(0, len(data), 4)]
            assert all(a[0] in (4, 5, 7) for a in acks), data    # acks only
            events.append(("write", [pid for t, pid in acks if t != 7]))
        return real_send(self, data)

    def publish(self, r):
        events.append(("rx", r.pid))
        return real_publish(self, r)

    monkeypatch.setattr(collector.os, "fsync", fsync)
    monkeypatch.setattr(collector._Link, "send", send)
    monkeypatch.setattr(collector.Collector, "_publish", publish)
    landing = str(tmp_path / "landing")
    col = Collector(mosquitto.host, mosquitto.port, landing, client_id="test-order-%d" % sub_qos,
                    sub_qos=sub_qos, batch_max=20, batch_ms=50, progress_s=0,
                    log=lambda line: None).start()
    pub = publisher(mosquitto, "test-order-pub-%d" % sub_qos)
    infos = [pub.publish("holdfast/order-dev/telemetry", reading("order-dev", s, 1 + s % 2),
                         qos=1 + s % 2) for s in range(300)]
    for i in infos:
        i.wait_for_publish(10)
    wait_for(lambda: len(landed(landing)) >= 300, 30, "300 readings landed")
    wait_for(lambda: col.stats()["acked"] >= 300, 30, "300 acknowledgements")
    col.stop()
    pub.loop_stop()
    pub.disconnect()
    writes = [e[1] for e in events if e[0] == "write" and e[1]]
    assert sum(len(w) for w in writes) >= 300
    # One write of acknowledgements a batch: a batch holds at most 20.
    assert len(writes) == col.stats()["batches"] >= 15, (len(writes), col.stats())
    last_rx = {}
    last_fsync = -1
    for i, e in enumerate(events):
        if e[0] == "rx":
            last_rx[e[1]] = i
        elif e[0] == "fsync":
            last_fsync = i
        else:  # each ack: its message was received, then an fsync, then the write
            for pid in e[1]:
                assert pid in last_rx and last_rx[pid] < last_fsync, (i, e, events[max(0, i - 5):i + 1])


def test_a_crash_between_fsync_and_ack_loses_nothing_and_lands_qos2_once(mosquitto, tmp_path):
    # The collector dies at the acknowledgement write of its third batch with
    # QoS 2 messages in it: that batch is on disk, none of it acknowledged.
    # The broker sends it again (DUP) to the next collector: every reading
    # lands; the QoS 1 ones of that batch may land twice (the pipeline
    # removes the duplicates), the QoS 2 ones once: the restarted collector
    # knows them from the file its predecessor left open.
    landing = str(tmp_path / "landing")
    log_path = str(tmp_path / "collector.log")
    open(log_path, "w").close()
    cid = "test-crash-between"
    driver = (
        "import os, sys; sys.path.insert(0, %r); from pipeline import collector\n"
        "batches = []\n"
        "real_send_acks = collector.Collector._send_acks\n"
        "def send_acks(self):\n"
        "    if any(t == collector.PUBREC for t, pid in self._acks):\n"
        "        batches.append(1)\n"
        "        if len(batches) == 3:\n"
        "            print('collector: dying before the acks of', len(self._acks), 'messages', flush=True)\n"
        "            os._exit(99)\n"
        "    return real_send_acks(self)\n"
        "collector.Collector._send_acks = send_acks\n"
        "collector.main(sys.argv[1:])\n" % TOOLS)
    pub = publisher(mosquitto, "test-crash-between-pub", clean=False)
    log = open(log_path, "ab")
    p1 = subprocess.Popen([sys.executable, "-c", driver, "--host", mosquitto.host,
                           "--port", str(mosquitto.port), "--landing", landing,
                           "--client-id", cid, "--sub-qos", "2", "--batch-max", "25",
                           "--batch-ms", "300", "--batch-idle-ms", "100", "--progress-s", "0"],
                          stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    n = 200
    try:
        wait_for(lambda: _log_has(log_path, "subscribed to"), 15, "collector subscribed")
        infos = [pub.publish("holdfast/between-dev/telemetry", reading("between-dev", s, 1 + s % 2),
                             qos=1 + s % 2) for s in range(n)]
        assert p1.wait(30) == 99, open(log_path).read()[-2000:]
        on_disk = {json.loads(r["payload"])["s"] for r in landed(landing)}
        assert len(on_disk) >= 50, len(on_disk)  # the third batch was fsync'ed before the crash
        mark = os.path.getsize(log_path)
        p2 = _start_collector(mosquitto, landing, cid, 2, log_path)
        try:
            for i in infos:
                i.wait_for_publish(10)
            wait_for(lambda: {json.loads(r["payload"])["s"] for r in landed(landing)} >= set(range(n)),
                     30, "every sequence number landed")
        finally:
            p2.send_signal(signal.SIGTERM)
            p2.wait(15)
    finally:
        if p1.poll() is None:
            p1.kill()
        pub.loop_stop()
        pub.disconnect()
    with open(log_path, errors="replace") as f:
        log = f.read()
    assert "dying before the acks" in log
    tail = log[mark:]
    assert "resumed persistent session" in tail and "recovered 1 in-progress file" in tail, tail
    # The broker did send the unacknowledged QoS 2 messages again, and p2
    # answered them without landing them.
    resent = [int(m) for m in re.findall(r"done: .* q2_redelivered (\d+)", tail)]
    assert resent and resent[-1] >= 1, tail
    assert_each_lands_and_qos2_once(landing, n)


def test_a_qos2_redelivery_after_a_reconnect_lands_once(mosquitto, tmp_path):
    # The connection drops after a batch is on disk and before its PUBRECs
    # reach the broker (what a broker restart or a network reset does). The
    # broker sends those messages again with DUP set when the collector is
    # back: the QoS 2 ones must not land twice (exactly once), the QoS 1
    # ones may (at least once).
    landing = str(tmp_path / "landing")
    col = Collector(mosquitto.host, mosquitto.port, landing,
                    client_id="test-q2-redelivery", batch_max=20, batch_ms=300,
                    batch_idle_ms=100, progress_s=0, log=lambda line: None)
    real_flush = col._flush
    cut = []

    def flush(ack):
        if col._pending and ack and not cut:
            cut.append(col._pending)
            real_flush(ack=False)          # on disk, nothing acknowledged
            col._link.sock.shutdown(2)     # and the link goes down
            return
        real_flush(ack)

    col._flush = flush
    col.start()
    pub = publisher(mosquitto, "test-q2-redelivery-pub")
    n = 120
    try:
        infos = [pub.publish("holdfast/redeliv-dev/telemetry",
                             reading("redeliv-dev", s, 1 + s % 2), qos=1 + s % 2)
                 for s in range(n)]
        for i in infos:
            i.wait_for_publish(10)
        wait_for(lambda: {json.loads(r["payload"])["s"] for r in landed(landing)}
                 >= set(range(n)), 30, "every sequence number landed")
        # The cut batch comes again, all of it (nothing of it was acked).
        wait_for(lambda: col.stats()["received"] >= n + cut[0], 15,
                 "the broker sent the unacknowledged batch again")
    finally:
        col.stop()
        pub.loop_stop()
        pub.disconnect()
    st = col.stats()
    assert cut and st["reconnects"] >= 1
    assert_each_lands_and_qos2_once(landing, n)
    assert st["q2_redelivered"] >= 1


def test_collectors_share_the_load_and_a_killed_one_loses_nothing(mosquitto, tmp_path):
    # Two collector processes in one shared subscription ($share/GROUP/...),
    # one landing directory. Each message goes to one of them; one is
    # SIGKILLed under load and comes back with its client id: every reading
    # lands, each QoS 2 reading once, and both collectors landed some.
    landing = str(tmp_path / "landing")
    log_a, log_b = str(tmp_path / "a.log"), str(tmp_path / "b.log")

    def start(cid, log_path):
        log = open(log_path, "ab")
        p = subprocess.Popen(
            [sys.executable, "-m", "pipeline.collector", "--host", mosquitto.host,
             "--port", str(mosquitto.port), "--landing", landing, "--client-id", cid,
             "--group", "landers", "--batch-max", "50", "--batch-ms", "300",
             "--batch-idle-ms", "100", "--progress-s", "0.5"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONPATH=TOOLS))
        log.close()
        return p

    open(log_a, "w").close()
    open(log_b, "w").close()
    a = start("test-share-a", log_a)
    b = start("test-share-b", log_b)
    n = 600
    b2 = None
    try:
        wait_for(lambda: _log_has(log_a, "subscribed to $share/landers/")
                 and _log_has(log_b, "subscribed to $share/landers/"), 20, "both subscribed")
        pub = publisher(mosquitto, "test-share-pub", clean=False)
        infos = []

        def publish_all():
            for s in range(n):
                q = 1 + s % 2
                infos.append(pub.publish("holdfast/share-dev/telemetry",
                                         reading("share-dev", s, q), qos=q))
                time.sleep(0.003)

        th = threading.Thread(target=publish_all)
        th.start()
        wait_for(lambda: len(landed(landing)) >= 150, 20, "150 lines landed")
        b.send_signal(signal.SIGKILL)
        b.wait(10)
        th.join(60)
        for i in infos:
            i.wait_for_publish(10)
        b2 = start("test-share-b", log_b)

        def all_there():
            return {json.loads(r["payload"])["s"] for r in landed(landing)} >= set(range(n))

        wait_for(all_there, 30, "every sequence number landed")
        pub.loop_stop()
        pub.disconnect()
    finally:
        for p in (a, b, b2):
            if p is not None:
                terminate(p, 15)
    by_pid = {}
    copies = {}
    for path in glob.glob(os.path.join(landing, "date=*/hour=*/part-*.jsonl")):
        pid = int(os.path.basename(path).split("-")[1])
        with open(path) as f:
            for line in f:
                s = json.loads(json.loads(line)["payload"])["s"]
                by_pid[pid] = by_pid.get(pid, 0) + 1
                copies[s] = copies.get(s, 0) + 1
    assert set(copies) == set(range(n))
    assert {a.pid, b.pid} <= set(by_pid), by_pid      # both took a share
    # Landed twice: at most the batch the kill cut between its fsync and its
    # acks (--batch-max 50), which the broker keeps for the killed member's
    # session and sends again to it; no message went to both members.
    twice = [s for s, c in copies.items() if c > 1]
    assert len(twice) <= 50, twice


def test_keepalive_pings_and_a_silent_broker_is_left(tmp_path):
    # A scripted broker grants the subscription, then hears the collector out
    # and answers nothing: the collector pings the idle link, and once nothing
    # has come for 1.5 keepalives it drops the link and connects again.
    import consts as mq
    from scripted_broker import ScriptedBroker, connack

    def silent(conn):
        connack(conn)
        p = conn.expect(mq.SUBSCRIBE)
        conn.send((mq.SUBACK, p[1], (2,)))
        conn.idle(30)    # until the collector leaves: it closes the link

    def answers(conn):
        # ... and a clean stop: the fence (an UNSUBSCRIBE answered), then
        # DISCONNECT.
        connack(conn, present=True)
        p = conn.expect(mq.SUBSCRIBE)
        conn.send((mq.SUBACK, p[1], (2,)))
        p = conn.expect(mq.UNSUBSCRIBE, 20)
        conn.send((mq.UNSUBACK, p[1]))
        conn.expect(mq.DISCONNECT)

    broker = ScriptedBroker(silent, answers)
    col = Collector("127.0.0.1", broker.port, str(tmp_path / "landing"), client_id="test-keepalive",
                    keepalive=1, progress_s=0, log=lambda line: None).start()
    try:
        wait_for(lambda: col.stats()["reconnects"] >= 1 and broker.accepts >= 2, 10,
                 "the silent link dropped and made again")
    finally:
        col.stop()
        broker.close()
    assert broker.errors == []
    first = [p[0] for p in broker.conns[0].got]
    assert first[:2] == [mq.CONNECT, mq.SUBSCRIBE] and mq.PINGREQ in first, first


@pytest.mark.parametrize("refusal", ["connack", "suback"])
def test_a_refusal_stops_the_collector_with_its_cause(tmp_path, refusal):
    import consts as mq
    from scripted_broker import ScriptedBroker

    def script(conn):
        conn.expect(mq.CONNECT)
        if refusal == "connack":
            conn.send((mq.CONNACK, False, 5))
            return
        conn.send((mq.CONNACK, False, 0))
        p = conn.expect(mq.SUBSCRIBE)
        conn.send((mq.SUBACK, p[1], (0x80,)))
        conn.idle(5)

    broker = ScriptedBroker(script)
    col = Collector("127.0.0.1", broker.port, str(tmp_path / "landing"), client_id="test-refused",
                    progress_s=0, log=lambda line: None)
    try:
        with pytest.raises(CollectorError) as e:
            col.start()
    finally:
        broker.close()
    assert broker.errors == []
    want = ("connection refused: not authorized (code 5)" if refusal == "connack"
            else "broker refused the subscription to holdfast/+/telemetry")
    assert want in str(e.value), str(e.value)

# The Session engine (holdfast.session) on the persistent outboxes: what it
# publishes survives a reboot, a QoS 2 flow resumes where it stopped, and an
# inbound QoS 2 id stays held, so a re-sent copy is not delivered twice.
# Apart from test_outbox_file/flash: the engine and the codec do not fit a
# 32 KB heap together with the store tests.
from holdfast.session import Session
from holdfast.broker import feed
from consts import CONNECTED, FAILED
from drain import drain
from holdfast.durable import FileStore
from holdfast.durable import FlashStore
from flashsim import Flash
from support import tmpdir, rmtree


def test_session_publishes_from_filestore():
    top = tmpdir()
    d = top + "/ob"
    st = FileStore(d)
    s = Session(b"dev", store=st)
    s.start(0)
    feed(s.rx, b"\x20\x02\x00\x00")
    drain(s)
    assert s.state == CONNECTED
    s.tx_start = s.tx_end = 0
    pid = s.publish(b"a/b", b"hello", 1, False, 0)
    assert s.tx[0] == 0x32 and len(st) == 1, (s.tx[0], len(st))
    q2 = s.publish(b"a/b", b"twice", 2, False, 0)
    feed(s.rx, bytes((0x40, 2, pid >> 8, pid & 255, 0x50, 2, q2 >> 8, q2 & 255)))
    drain(s)
    assert len(st) == 1 and st.qos(st.next(-1)) == 3, len(st)
    # Reboot: the broker kept the session (session present), so the QoS 2
    # message resumes with PUBREL, nothing else is sent.
    st.close()
    st = FileStore(d)
    s = Session(b"dev", store=st, clean=False)
    s.start(0)
    s.tx_start = s.tx_end = 0
    feed(s.rx, b"\x20\x02\x01\x00")
    drain(s)
    assert bytes(s.tx[s.tx_start:s.tx_end]) == bytes((0x62, 2, q2 >> 8, q2 & 255)), bytes(s.tx[s.tx_start:s.tx_end])
    feed(s.rx, bytes((0x70, 2, q2 >> 8, q2 & 255)))
    drain(s)
    assert len(st) == 0
    # Inbound QoS 2: the id is held across a reboot, so a re-sent copy is not
    # delivered twice, when the broker kept the session (session present).
    got = []
    s.on_message = lambda t, m: got.append(m)
    feed(s.rx, b"\x34\x08\x00\x02in\x00\x07hi")
    drain(s)
    st.close()
    st = FileStore(d)
    s = Session(b"dev", store=st, clean=False)
    s.on_message = lambda t, m: got.append(m)
    s.start(0)
    feed(s.rx, b"\x20\x02\x01\x00\x3c\x08\x00\x02in\x00\x07hi")
    drain(s)
    assert got == [b"hi"], got
    feed(s.rx, b"\x62\x02\x00\x07")
    drain(s)
    assert st.held_ids is not None and not st.held_ids.held(7)
    st.close()
    rmtree(top)


def test_session_publishes_from_flashstore():
    dev = Flash(4, 512)
    st = FlashStore(dev)
    s = Session(b"dev", store=st)
    pid = s.publish(b"a/b", b"offline", 1, False, 0)  # not connected: kept
    st = FlashStore(dev)  # reboot
    s = Session(b"dev", store=st)
    s.start(0)
    s.tx_start = s.tx_end = 0
    feed(s.rx, b"\x20\x02\x00\x00")
    drain(s)
    assert s.tx[0] == 0x3A, s.tx[0]  # re-sent with DUP
    feed(s.rx, bytes((0x40, 2, pid >> 8, pid & 255)))
    drain(s)
    assert len(st) == 0 and len(FlashStore(dev)) == 0


def test_deadlines_are_kept_in_whole_seconds_of_the_wall_clock():
    # publish(expiry=) sets wall() + expiry and policy.expire() drops what is
    # past wall(): both sides read this one clock, so a clock that stood still
    # (or ran in ticks) would keep every message forever without a word.
    import time
    from holdfast.session import wall
    before = int(time.time())
    w = wall()
    after = int(time.time())
    assert type(w) is int and before <= w <= after, (before, w, after)


def test_a_pubrec_a_full_filesystem_cannot_record_fails_the_link_and_the_next_finishes_the_flow():
    # Issue 30, C8: release() failed on the full filesystem (reserve spent),
    # the PUBREC was dropped and nothing retried it: brokers repeat PUBREC
    # only for the DUP PUBLISH of a new link.
    from cutfs import CutFS
    from holdfast.errors import OutboxFull
    from support import raises
    top = tmpdir()
    fs = CutFS()
    st = FileStore(top + "/ob", fs=fs, reserve=0)
    s = Session(b"dev", store=st, clean=False, window=1)
    s.start(0)
    feed(s.rx, b"\x20\x02\x00\x00")
    drain(s)
    s.tx_start = s.tx_end = 0
    pid = s.publish(b"a/b", b"twice", 2, False, 0)
    s.tx_start = s.tx_end = 0
    fs.quota = fs.used  # the filesystem is full
    feed(s.rx, bytes((0x50, 2, pid >> 8, pid & 255)))
    raises(OutboxFull, drain, s)
    assert s.state == FAILED and s.tx_end == s.tx_start  # no PUBREL
    fs.quota = 0  # room came
    s.lost()
    s.start(0)
    s.tx_start = s.tx_end = 0
    feed(s.rx, b"\x20\x02\x01\x00")  # session present
    drain(s)
    assert s.tx[s.tx_start] == 0x3C, s.tx[s.tx_start]  # the PUBLISH again, QoS 2 with DUP
    s.tx_start = s.tx_end = 0
    feed(s.rx, bytes((0x50, 2, pid >> 8, pid & 255)))
    drain(s)
    assert bytes(s.tx[s.tx_start:s.tx_end]) == bytes((0x62, 2, pid >> 8, pid & 255))  # PUBREL
    assert st.qos(st.next(-1)) == 3
    st.close()
    rmtree(top)

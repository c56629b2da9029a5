# Sizes, checked where bytes meet a limit (docs/engine.md, "Limits"): a str
# payload sized as its UTF-8 bytes, the store's record limit before
# drop_oldest drops anything, the send room and MQTT 5's Maximum Packet
# Size for messages stored before the link's limits were known, the receive
# buffer at MQTT 5, and the oversize inbound PUBLISH that must need no heap.
# Runs on CPython and MicroPython.
import sys

import consts as mq
from holdfast import codec, v5more as v5
from holdfast.store import MemoryStore
from holdfast.session import wall
from holdfast.v5 import Reader5
from holdfast.fileoutbox import FileStore
from holdfast.flashoutbox import FlashStore
from holdfast.errors import OutboxFull
from fakebroker import session, sent, wire, reads
from flashsim import Flash
from packets import decode_all
from support import raises, tmpdir, rmtree

TEXT = "h\u00e9t\u00e9 \u2603 " * 10  # 70 characters, 110 UTF-8 bytes


def test_a_str_payload_is_stored_as_its_utf8_bytes():
    # Sized in characters, the record was 40 bytes short: put where only
    # that many bytes were free (before the oldest record, the ring
    # wrapped), it went over the oldest record's header.
    st = MemoryStore(256, 8)
    x = st.put(b"t", b"x" * 95, 1, False, 1)  # 102 bytes at 0
    y = st.put(b"t", b"y" * 95, 1, False, 2)  # 102 bytes at 102
    st.done(x)  # free: 52 at the end, 102 before y
    raises(OutboxFull, st.put, b"t", TEXT, 1, False, 3)  # 118 bytes: room for neither
    buf = bytearray(256)
    n = st.get(y, buf, 0)
    assert decode_all(bytes(buf[:n])) == [(mq.PUBLISH, b"t", b"y" * 95, 1, False, False, 2)], bytes(buf[:n])
    st.done(y)
    k = st.put(b"t", TEXT, 1, False, 3)
    n = st.get(k, buf, 0)
    assert n == st.size(k) and decode_all(bytes(buf[:n])) == [
        (mq.PUBLISH, b"t", TEXT.encode(), 1, False, False, 3)], bytes(buf[:n])


def test_a_str_payload_too_large_in_bytes_is_refused_before_it_is_stored():
    # 70 characters fit a 112-byte send room, their 110 bytes (+ header)
    # do not: refused with the words, nothing stored, nothing sent.
    s = session(size=128)
    e = raises(ValueError, s.publish, b"t/x", TEXT, 1, False, 0)
    assert "does not fit the 128-byte send buffer" in str(e), str(e)
    assert len(s.store) == 0 and sent(s) == []
    # What fits in bytes goes out as those bytes, at QoS 0 and 1.
    short = TEXT[:30]
    s.publish(b"t/x", short, 0, False, 0)
    s.publish(b"t/x", short, 1, False, 0)
    assert sent(s) == [(mq.PUBLISH, b"t/x", short.encode(), 0, False, False, 0),
                       (mq.PUBLISH, b"t/x", short.encode(), 1, False, False, 1)]


def _stores():
    # Stores whose record limit is below what the send buffer (size=1024)
    # takes: a small RAM ring, a FileStore limit=, a FlashStore block.
    d = tmpdir()
    return d, ((MemoryStore(256, 8), "MemoryStore"), (FileStore(d, limit=256), "FileStore"),
               (FlashStore(Flash(4, 256, 1)), "FlashStore"))


def test_drop_oldest_refuses_what_can_never_fit_the_store_before_dropping():
    d, stores = _stores()
    try:
        for st, name in stores:
            s = session(store=st, drop_oldest=True)
            s.lost()  # offline: the messages stay queued
            for i in range(3):
                s.publish(b"q", b"m%d" % i, 1, False, 0)
            e = raises(OutboxFull, s.publish, b"big", b"x" * 300, 1, False, 0)
            assert "can never fit this outbox" in str(e) and str(st.most) in str(e), (name, str(e))
            assert len(st) == 3 and s.overflowed == 0, (name, len(st), s.overflowed)
            # Right at the limit it is stored, dropping the oldest for room
            # where it must; one byte over, refused as above.
            top = st.most - codec.publish_size(b"big", 0, 1)
            while codec.publish_size(b"big", top, 1) > st.most:  # a longer length field
                top -= 1
            s.publish(b"big", b"y" * top, 1, False, 0)
            assert st.size(st.tail - 1) == st.most, (name, st.size(st.tail - 1), st.most)
            raises(OutboxFull, s.publish, b"big", b"y" * (top + 1), 1, False, 0)
            if hasattr(st, "close"):
                st.close()
    finally:
        rmtree(d)


def _connack5(props):
    # A CONNACK at level 5 with these properties ((identifier, value) pairs).
    buf = bytearray(400)
    n = v5.props(buf, props, mq.CONNACK)
    return wire5(b"\x00\x00" + bytes(buf[:n]), 0x20)


def wire5(body, first):
    out = bytearray(4)
    return bytes((first,)) + bytes(out[1:codec.put_length(out, 1, len(body))]) + body


def _session5(size=256, clean=True):
    s = v5.Session5(b"dev", clean, 0, 5, size, 4)
    s.start(0)
    s.sent(s.tx_end, 0)
    return s


def test_v5_stored_messages_over_the_brokers_maximum_packet_size_are_dropped_unsent():
    # Stored offline, before the broker said its limit: at send time the
    # 200-byte one is refused (counted), the outbox moves on, the rest go.
    s = _session5(size=512)
    s.lost()
    for payload in (b"a", b"z" * 200, b"b"):
        s.publish(b"t", payload, 1, False, 0)
    s.start(0)
    s.sent(s.tx_end, 0)
    assert reads(s, _connack5(((v5.MAXIMUM_PACKET_SIZE, 100),))) == [] and s.state == 3
    out = [bytes(r.payload) for r in _read5(bytes(s.tx[s.tx_start:s.tx_end]))]
    assert out == [b"a", b"b"] and s.unsendable == 1 and len(s.store) == 2, (out, s.unsendable)
    # publish() itself refuses one over the limit, with the words.
    e = raises(ValueError, s.publish, b"t", b"z" * 200, 1, False, 0)
    assert "Maximum Packet Size" in str(e) or "maximum" in str(e), str(e)


def test_v5_a_maximum_packet_size_of_9_or_less_refuses_every_message():
    for most in (1, 9):
        s = _session5()
        assert reads(s, _connack5(((v5.MAXIMUM_PACKET_SIZE, most),))) == [] and s.state == 3
        for qos in (0, 1):
            raises(ValueError, s.publish, b"t", b"", qos, False, 0)
        assert len(s.store) == 0 and s.tx_end == s.tx_start, most


def test_v5_connack_and_puback_with_long_properties_fit_the_receive_buffer():
    # clean_session and no subscription: the receive buffer still holds what
    # the broker may send at level 5, up to the size CONNECT offered.
    s = _session5()
    long_id = b"assigned-" + b"i" * 80
    got = reads(s, _connack5(((v5.ASSIGNED_CLIENT_ID, long_id), (v5.USER_PROPERTY, (b"k", b"v" * 60)))))
    assert got == [] and s.state == 3 and s.client_id == long_id, (s.state, s.client_id)
    pid = s.publish(b"t", b"m", 1, False, 0)
    s.sent(s.tx_end - s.tx_start, 0)
    why = b"quota: " + b"q" * 90
    buf = bytearray(200)
    n = v5.ack(buf, mq.PUBACK, pid, 0x97, ((v5.REASON_STRING, why),))
    # A refusal keeps its words: REJECTED, the code, the reason string.
    assert reads(s, bytes(buf[:n])) == [4] and s.rx.code == 0x97 and s.done_pid == pid
    assert v5.get(s.rx.buf, v5.REASON_STRING, None, s.rx.p0, s.rx.p1) == why
    assert s.state == 3 and len(s.store) == 0


def _read5(data):
    # The MQTT 5 PUBLISH packets in data, one Reader5 each (its fields).
    out = []
    while data:
        r = Reader5(len(data), 5)
        r.tail()[:len(data)] = data
        r.end = len(data)
        assert r.next() == mq.PUBLISH, data
        out.append(r)
        data = data[r.start:]
    return out


def _expiry(data):
    # The Message Expiry Interval of the one MQTT 5 PUBLISH in data (None: none).
    r, = _read5(data)
    return v5.get(r.buf, v5.MESSAGE_EXPIRY, None, r.p0, r.p1)


def test_v5_expiry_goes_with_the_message_at_every_qos():
    # At level 5 expiry= is the message's expiry whatever its QoS (QoS 0
    # went without it).
    s = _session5()
    reads(s, _connack5(()))
    for qos in (0, 1, 2):
        s.publish(b"t", b"m", qos, False, 0, wall() + 60)
        got = _expiry(bytes(s.tx[s.tx_start:s.tx_end]))
        s.sent(s.tx_end - s.tx_start, 0)
        assert got is not None and 58 <= got <= 60, (qos, got)
    s.publish(b"t", b"m", 0, False, 0)
    assert _expiry(bytes(s.tx[s.tx_start:s.tx_end])) is None


def _chunk(s, data, i, got):
    # As a socket read would: what of data from i fits s.rx (rx.tail()
    # without the view it makes of a part-filled buffer), then receive(); its
    # event + 1 into got[got[0]]. Returns where the next read starts. A
    # function, not a closure: calling one that holds five cells allocates.
    rx = s.rx
    if rx.start == rx.end:
        rx.start = rx.end = 0
    elif rx.start:
        rx.end = codec.shift(rx.buf, rx.start, rx.end)
        rx.start = 0
    n = min(len(rx.buf) - rx.end, len(data) - i)
    for k in range(n):
        rx.buf[rx.end + k] = data[k + i]
    rx.end += n
    got[0] += 1
    got[got[0]] = s.receive(0) + 1
    return i + n


def test_an_oversize_inbound_publish_needs_no_heap():
    # What runs when a message is too large for the receive buffer (skip,
    # count, acknowledge) is resident and allocates nothing: on MicroPython
    # under heap_lock from the first such message, so an import or an
    # exception with words fails the test; elsewhere the same steps,
    # unlocked. Then a small message arrives as usual.
    s = session(size=128, clean=False, views=True)
    small = wire((mq.PUBLISH, b"s", b"ok", 1, False, False, 9))
    assert reads(s, small) == [1]
    import holdfast.inbound as inbound
    inbound.handled(s)
    sent(s)
    big = wire((mq.PUBLISH, b"big/topic", b"z" * 300, 1, False, False, 77),
               (mq.PUBLISH, b"big/topic", b"z" * 200, 0, False, False, 0))
    got = bytearray(32)  # got[0] events, then each + 1: a list would grow under the lock
    locked = sys.implementation.name == "micropython"
    if locked:
        import micropython
        micropython.heap_lock()
    try:
        i = 0
        while i < len(big):
            i = _chunk(s, big, i, got)
    finally:
        if locked:
            micropython.heap_unlock()
    n = got[0]
    assert s.dropped == 2 and n > 2 and bytes(got[1:n + 1]) == b"\x01" * n, (s.dropped, got)
    assert sent(s) == [(mq.PUBACK, 77)] and s.state == 3
    assert reads(s, small) == [1] and bytes(s.msg) == b"ok"

# Sizes, checked where bytes meet a limit (docs/engine.md, "Limits"): a str
# payload sized as its UTF-8 bytes, and the oversize inbound PUBLISH that
# must need no heap (the store's record limit: test_sizes_store.py; MQTT 5:
# test_v5sizes.py). Runs on CPython and MicroPython.
import sys

import consts as mq
from holdfast import codec
from holdfast.memstore import MemoryStore
from holdfast.errors import OutboxFull
from fakebroker import session, sent, wire, reads, grant
from packets import decode_all
from support import allocated, raises

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


def test_the_first_message_allocates_only_its_views():
    # The first message's fields (topic, msg, qos, retained, dup, msg_link)
    # went on the session with that message, growing its attribute table
    # there (a 944-byte block on a 64-bit port), which a fragmented small
    # heap did not have: wait_msg() raised MemoryError (test_small_heap.py,
    # 64k). They go on when messages can first arrive (a kept session, a
    # subscription), so with views=True the first message and its
    # acknowledgement allocate its two views, topic and payload, and nothing
    # more. Heap figures are MicroPython's (CPython allocates ints).
    mp = sys.implementation.name == "micropython"
    for clean in (False, True):
        s = session(size=128, clean=clean, views=True)
        if clean:  # messages can arrive once subscribed
            from holdfast.subscriptions import request
            request(s, b"s", 1, None)
            grant(s)
        import holdfast.inbound as inbound
        msg = wire((mq.PUBLISH, b"s", b"ok", 1, False, False, 9))
        got = bytearray(8)
        keep = [None]

        def first():
            i = 0
            while i < len(msg):
                i = _chunk(s, msg, i, got)
            inbound.handled(s)

        def view():
            keep[0] = s.rx.mv[0:1]

        if mp:
            one = allocated(view)
            n = allocated(first)
            assert one > 0 and n == 2 * one, (clean, n, one)
        else:
            first()
        assert got[1] == 2 and bytes(s.msg) == b"ok" and s.qos == 1, (clean, bytes(got))
        assert sent(s) == [(mq.PUBACK, 9)], clean


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

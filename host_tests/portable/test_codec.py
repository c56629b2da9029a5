# Wire codec: every byte example of the spec pages, every packet type both
# ways, every malformed case a broker could send. Runs on CPython and MicroPython.
import sys
from holdfast import codec as c
from holdfast import inbound
from holdfast.broker import feed
import consts as mq
from holdfast.errors import MQTTProtocolError
from packets import encode, one, decode_all
from support import allocated, raises

BUF = bytearray(512)


def enc(p):
    n = encode(BUF, p)
    return bytes(BUF[:n])


def test_remaining_length_edges_encode():
    cases = ((0, b"\x00"), (64, b"\x40"), (127, b"\x7f"), (128, b"\x80\x01"), (321, b"\xc1\x02"),
             (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"), (2097151, b"\xff\xff\x7f"),
             (2097152, b"\x80\x80\x80\x01"), (268435455, b"\xff\xff\xff\x7f"))
    buf = bytearray(6)
    for n, want in cases:
        end = c.put_length(buf, 1, n)
        assert bytes(buf[1:end]) == want, (n, bytes(buf[1:end]))
    # The fixed header uses the same routine, and refuses what does not fit.
    buf = bytearray(130)
    assert c._header(buf, 0x30, 127) == 2 and buf[1] == 0x7F
    e = raises(ValueError, c._header, bytearray(8), 0x30, 16384)
    assert "buffer" in str(e), e


def test_remaining_length_above_maximum_refused():
    e = raises(ValueError, c._header, bytearray(8), 0x30, 268435456)
    assert "268435456" in str(e)
    # The public encoder too, and it writes nothing: not 5 bytes of a length
    # no decoder accepts.
    buf = bytearray(8)
    for n in (268435456, -1):
        e = raises(ValueError, c.put_length, buf, 1, n)
        assert str(n) in str(e) and buf == bytearray(8), (n, buf)


def test_remaining_length_edges_decode():
    assert one(b"\xc0\x00") == (mq.PINGREQ,)
    for n, lb in ((127, b"\x7f"), (128, b"\x80\x01")):
        p = one(b"\x30" + lb + b"\x00\x01t" + b"p" * (n - 3), size=256)
        assert len(p[2]) == n - 3
    # Longer packets: the Reader reads the announced length and the topic
    # length before the rest arrives and refuses it with the decoded total,
    # so the length field is proven right without a megabyte buffer.
    for n, lb in ((16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"), (2097151, b"\xff\xff\x7f"),
                  (2097152, b"\x80\x80\x80\x01"), (268435455, b"\xff\xff\xff\x7f")):
        r = c.Reader(64)
        inbound.ready(r)  # it decodes PUBLISH and SUBACK
        feed(r, b"\x30" + lb)
        assert r.next() == 0  # no topic length yet
        feed(r, b"\x00\x01")
        assert r.next() == mq.SKIPPED and r.length == n + 1 + len(lb), (n, r.length)


def test_fifth_length_byte_refused():
    r = c.Reader(64)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    feed(r, b"\x30\xff\xff\xff\xff\x01")
    e = raises(MQTTProtocolError, r.next)
    assert "fifth" in str(e)


def test_fifth_length_byte_refused_before_it_arrives():
    r = c.Reader(64)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    feed(r, b"\x30\x80\x80\x80\x80")
    raises(MQTTProtocolError, r.next)


def test_spec_publish_variable_header():
    b = enc((mq.PUBLISH, b"a/b", b"", 1, False, False, 10))
    assert b[0] == 0x32
    assert b[2:] == b"\x00\x03\x61\x2f\x62\x00\x0a"


def test_spec_subscribe_payload():
    b = enc((mq.SUBSCRIBE, 10, ((b"a/b", 1), (b"c/d", 2))))
    assert b[0] == 0x82
    assert b[2:4] == b"\x00\x0a"
    assert b[4:] == b"\x00\x03\x61\x2f\x62\x01\x00\x03\x63\x2f\x64\x02"


def test_connect_bytes_311():
    b = enc((mq.CONNECT, 4, b"dev1", True, 60, None, None, 0, False, None, None))
    assert b == b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04dev1"


def test_connect_bytes_31():
    b = enc((mq.CONNECT, 3, b"dev1", True, 60, None, None, 0, False, None, None))
    assert b == b"\x10\x12\x00\x06MQIsdp\x03\x02\x00\x3c\x00\x04dev1"


def test_connect_will_user_password_flags():
    b = enc((mq.CONNECT, 4, b"x", False, 10, b"w/t", b"bye", 1, True, b"u", b"p"))
    assert b[9] == 0x80 | 0x40 | 0x20 | 0x08 | 0x04  # user, password, will retain, will QoS 1, will
    assert b.endswith(b"\x00\x03w/t\x00\x03bye\x00\x01u\x00\x01p")


def test_fixed_packets_bytes():
    assert enc((mq.PUBACK, 10)) == b"\x40\x02\x00\x0a"
    assert enc((mq.PUBREC, 10)) == b"\x50\x02\x00\x0a"
    assert enc((mq.PUBREL, 10)) == b"\x62\x02\x00\x0a"
    assert enc((mq.PUBCOMP, 10)) == b"\x70\x02\x00\x0a"
    assert enc((mq.UNSUBACK, 10)) == b"\xb0\x02\x00\x0a"
    assert enc((mq.PINGREQ,)) == b"\xc0\x00"
    assert enc((mq.PINGRESP,)) == b"\xd0\x00"
    assert enc((mq.DISCONNECT,)) == b"\xe0\x00"
    assert enc((mq.CONNACK, True, 0)) == b"\x20\x02\x01\x00"
    assert enc((mq.SUBACK, 10, (0, 1, 2, 0x80))) == b"\x90\x06\x00\x0a\x00\x01\x02\x80"
    assert enc((mq.UNSUBSCRIBE, 10, (b"a/b",))) == b"\xa2\x07\x00\x0a\x00\x03a/b"


SAMPLES = (
    (mq.CONNECT, 4, b"dev1", True, 60, None, None, 0, False, None, None),
    (mq.CONNECT, 4, b"", True, 0, b"w/t", b"", 2, False, b"user", None),
    (mq.CONNECT, 3, b"sensor-7", False, 65535, b"w", b"gone", 1, True, b"u", b"secret"),
    (mq.CONNECT, 3, b"p", True, 1, None, None, 0, False, None, b"pw-only-in-3.1"),
    (mq.CONNACK, False, 0),
    (mq.CONNACK, True, 5),
    (mq.PUBLISH, b"a/b", b"hello", 0, False, False, 0),
    (mq.PUBLISH, b"a/b", b"", 1, True, True, 10),
    (mq.PUBLISH, "t\u00e9/\u6e29".encode(), b"\x00" * 300, 2, False, False, 65535),
    (mq.PUBACK, 1),
    (mq.PUBREC, 2),
    (mq.PUBREL, 3),
    (mq.PUBCOMP, 65535),
    (mq.SUBSCRIBE, 7, ((b"a/+/c", 0), (b"#", 1), (b"x/#", 2))),
    (mq.SUBACK, 7, (0, 1, 2, 0x80)),
    (mq.UNSUBSCRIBE, 9, (b"a/+/c", b"#")),
    (mq.UNSUBACK, 9),
    (mq.PINGREQ,),
    (mq.PINGRESP,),
    (mq.DISCONNECT,),
)


def test_every_packet_type_round_trips():
    seen = set()
    for p in SAMPLES:
        got = one(enc(p), level=p[1] if p[0] == mq.CONNECT else 4)
        assert got == p, (p, got)
        seen.add(p[0])
    assert len(seen) == 14


def test_stream_several_packets_in_one_read_and_one_byte_at_a_time():
    stream = b"".join(enc(p) for p in SAMPLES[4:])
    want = list(SAMPLES[4:])
    assert decode_all(stream) == want
    assert decode_all(stream, step=1) == want
    assert decode_all(stream, step=3, size=400) == want


def test_partial_packet_waits():
    b = enc((mq.PUBLISH, b"a/b", b"payload", 1, False, False, 5))
    r = c.Reader(64)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    for k in range(len(b) - 1):
        feed(r, b[k:k + 1])
        assert r.next() == 0
    feed(r, b[-1:])
    assert r.next() == mq.PUBLISH
    assert bytes(r.payload) == b"payload" and r.pid == 5
    assert r.next() == 0



def test_inbound_publish_and_suback_decoding_allocate_only_their_views():
    # A subscriber's hot path: Reader.next() hands a PUBLISH (and a SUBACK)
    # to inbound.py, whose import inside next() allocates nothing once it is
    # loaded, and the decode allocates only the views it hands out: topic and
    # payload (a SUBACK: its codes), each as much as one slice of r.mv.
    # Heap figures are MicroPython's (CPython allocates ints).
    if sys.implementation.name != "micropython":
        return
    r = c.Reader(64)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    pub = b"\x32\x0e\x00\x03a/b\x00\x05payload"
    sub = b"\x90\x04\x00\x07\x01\x80"
    keep = [None, None]

    def view():
        keep[0] = r.mv[2:5]

    def next_is(t):
        assert r.next() == t

    for data in (pub, sub):  # warm: inbound.py loaded
        feed(r, data)
        r.next()
    one = allocated(view)
    assert one > 0, one
    for data, t, views in ((pub, mq.PUBLISH, 2), (sub, mq.SUBACK, 1)):
        feed(r, data)
        got = allocated(lambda: next_is(t))
        assert got == views * one, (t, got, one)
    assert bytes(r.payload) == b"\x01\x80" and r.pid == 7


def test_publish_encoding_and_puback_decoding_allocate_nothing():
    # What every publish runs through in the codec, on MicroPython under
    # heap_lock (any allocation raises MemoryError): a QoS 1 and a QoS 0
    # PUBLISH encoded into the send buffer, the PUBACK decoded from the
    # receive buffer. CPython allocates ints and has no lock: there the same
    # steps run unlocked. (The session's whole path: test_outbox_capacity.)
    r = c.Reader(64)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    tx = bytearray(128)

    def one(pid):
        n = c.publish(tx, b"sensors/t", b"21.5", 1, False, False, pid, 0)
        n = c.publish(tx, b"sensors/t", b"21.5", 0, False, False, 0, n)
        room = r.tail()
        room[0] = 0x40
        room[1] = 2
        room[2] = 0
        room[3] = pid
        r.end += 4
        assert r.next() == mq.PUBACK and r.pid == pid
        return n

    one(1)  # warm
    locked = sys.implementation.name == "micropython"
    if locked:
        import micropython
        micropython.heap_lock()
    try:
        for pid in range(2, 40):
            n = one(pid)
    finally:
        if locked:
            micropython.heap_unlock()
    assert n == 2 * (2 + 2 + 9 + 4) + 2, n

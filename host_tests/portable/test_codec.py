# Wire codec: every byte example of the spec pages, every packet type both
# ways, every malformed case a broker could send. Runs on CPython and MicroPython.
from holdfast import codec as c
from holdfast import broker
from holdfast.errors import MQTTProtocolError, PacketTooLarge
from packets import encode, one, decode_all
from support import raises

BUF = bytearray(512)


def enc(p):
    n = encode(BUF, p)
    return bytes(BUF[:n])


def test_remaining_length_edges_encode():
    cases = ((0, b"\x00"), (64, b"\x40"), (127, b"\x7f"), (128, b"\x80\x01"), (321, b"\xc1\x02"),
             (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"), (2097151, b"\xff\xff\x7f"),
             (2097152, b"\x80\x80\x80\x01"), (268435455, b"\xff\xff\xff\x7f"))
    for n, want in cases:
        buf = bytearray(1 + len(want) + n) if n < 20000 else None
        if buf is not None:
            i = c._header(buf, 0x30, n)
            assert bytes(buf[1:i]) == want, (n, bytes(buf[1:i]))
        # Large lengths: a too-small buffer must be refused, after the length
        # itself was accepted, so check the error names the buffer.
        else:
            e = raises(ValueError, c._header, bytearray(8), 0x30, n)
            assert "buffer" in str(e), e


def test_remaining_length_above_maximum_refused():
    e = raises(ValueError, c._header, bytearray(8), 0x30, 268435456)
    assert "268435456" in str(e)


def test_remaining_length_edges_decode():
    assert one(b"\xc0\x00") == (c.PINGREQ,)
    for n, lb in ((127, b"\x7f"), (128, b"\x80\x01")):
        p = one(b"\x30" + lb + b"\x00\x01t" + b"p" * (n - 3), size=256)
        assert len(p[2]) == n - 3
    # Longer packets: the Reader reads the announced length before any body
    # arrives and refuses it with the decoded total, so the length field is
    # proven right without a megabyte buffer.
    for n, lb in ((16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"), (2097151, b"\xff\xff\x7f"),
                  (2097152, b"\x80\x80\x80\x01"), (268435455, b"\xff\xff\xff\x7f")):
        r = c.Reader(64)
        r.feed(b"\x30" + lb)
        e = raises(PacketTooLarge, r.next)
        assert e.length == n + 1 + len(lb), (n, e.length)


def test_fifth_length_byte_refused():
    r = c.Reader(64)
    r.feed(b"\x30\xff\xff\xff\xff\x01")
    e = raises(MQTTProtocolError, r.next)
    assert "fifth" in str(e)


def test_fifth_length_byte_refused_before_it_arrives():
    r = c.Reader(64)
    r.feed(b"\x30\x80\x80\x80\x80")
    raises(MQTTProtocolError, r.next)


def test_spec_publish_variable_header():
    b = enc((c.PUBLISH, b"a/b", b"", 1, False, False, 10))
    assert b[0] == 0x32
    assert b[2:] == b"\x00\x03\x61\x2f\x62\x00\x0a"


def test_spec_subscribe_payload():
    b = enc((c.SUBSCRIBE, 10, ((b"a/b", 1), (b"c/d", 2))))
    assert b[0] == 0x82
    assert b[2:4] == b"\x00\x0a"
    assert b[4:] == b"\x00\x03\x61\x2f\x62\x01\x00\x03\x63\x2f\x64\x02"


def test_connect_bytes_311():
    b = enc((c.CONNECT, 4, b"dev1", True, 60, None, None, 0, False, None, None))
    assert b == b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04dev1"


def test_connect_bytes_31():
    b = enc((c.CONNECT, 3, b"dev1", True, 60, None, None, 0, False, None, None))
    assert b == b"\x10\x12\x00\x06MQIsdp\x03\x02\x00\x3c\x00\x04dev1"


def test_connect_will_user_password_flags():
    b = enc((c.CONNECT, 4, b"x", False, 10, b"w/t", b"bye", 1, True, b"u", b"p"))
    assert b[9] == 0x80 | 0x40 | 0x20 | 0x08 | 0x04  # user, password, will retain, will QoS 1, will
    assert b.endswith(b"\x00\x03w/t\x00\x03bye\x00\x01u\x00\x01p")


def test_fixed_packets_bytes():
    assert enc((c.PUBACK, 10)) == b"\x40\x02\x00\x0a"
    assert enc((c.PUBREC, 10)) == b"\x50\x02\x00\x0a"
    assert enc((c.PUBREL, 10)) == b"\x62\x02\x00\x0a"
    assert enc((c.PUBCOMP, 10)) == b"\x70\x02\x00\x0a"
    assert enc((c.UNSUBACK, 10)) == b"\xb0\x02\x00\x0a"
    assert enc((c.PINGREQ,)) == b"\xc0\x00"
    assert enc((c.PINGRESP,)) == b"\xd0\x00"
    assert enc((c.DISCONNECT,)) == b"\xe0\x00"
    assert enc((c.CONNACK, True, 0)) == b"\x20\x02\x01\x00"
    assert enc((c.SUBACK, 10, (0, 1, 2, 0x80))) == b"\x90\x06\x00\x0a\x00\x01\x02\x80"
    assert enc((c.UNSUBSCRIBE, 10, (b"a/b",))) == b"\xa2\x07\x00\x0a\x00\x03a/b"


SAMPLES = (
    (c.CONNECT, 4, b"dev1", True, 60, None, None, 0, False, None, None),
    (c.CONNECT, 4, b"", True, 0, b"w/t", b"", 2, False, b"user", None),
    (c.CONNECT, 3, b"sensor-7", False, 65535, b"w", b"gone", 1, True, b"u", b"secret"),
    (c.CONNECT, 3, b"p", True, 1, None, None, 0, False, None, b"pw-only-in-3.1"),
    (c.CONNACK, False, 0),
    (c.CONNACK, True, 5),
    (c.PUBLISH, b"a/b", b"hello", 0, False, False, 0),
    (c.PUBLISH, b"a/b", b"", 1, True, True, 10),
    (c.PUBLISH, "t\u00e9/\u6e29".encode(), b"\x00" * 300, 2, False, False, 65535),
    (c.PUBACK, 1),
    (c.PUBREC, 2),
    (c.PUBREL, 3),
    (c.PUBCOMP, 65535),
    (c.SUBSCRIBE, 7, ((b"a/+/c", 0), (b"#", 1), (b"x/#", 2))),
    (c.SUBACK, 7, (0, 1, 2, 0x80)),
    (c.UNSUBSCRIBE, 9, (b"a/+/c", b"#")),
    (c.UNSUBACK, 9),
    (c.PINGREQ,),
    (c.PINGRESP,),
    (c.DISCONNECT,),
)


def test_every_packet_type_round_trips():
    seen = set()
    for p in SAMPLES:
        got = one(enc(p), level=p[1] if p[0] == c.CONNECT else 4)
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
    b = enc((c.PUBLISH, b"a/b", b"payload", 1, False, False, 5))
    r = c.Reader(64)
    for k in range(len(b) - 1):
        r.feed(b[k:k + 1])
        assert r.next() == 0
    r.feed(b[-1:])
    assert r.next() == c.PUBLISH
    assert bytes(r.payload) == b"payload" and r.pid == 5
    assert r.next() == 0


def test_too_large_packet_skipped_and_stream_stays_in_step():
    big = enc((c.PUBLISH, b"big", b"z" * 200, 1, False, False, 42))
    small = enc((c.PUBACK, 3))
    r = c.Reader(64)
    data = big + small
    i = 0
    errors = []
    got = []
    while i < len(data) or r.start < r.end:
        i += r.feed(data[i:i + 50])
        try:
            t = r.next()
        except PacketTooLarge as e:
            errors.append((e.type, e.length, e.pid))
            continue
        if t:
            got.append((t, r.pid))
        elif i >= len(data):
            break
    assert errors == [(c.PUBLISH, len(big), 42)], errors
    assert got == [(c.PUBACK, 3)], got


def bad(data, why, level=4):
    r = broker.BrokerReader(256, level)
    r.feed(data)
    e = raises(MQTTProtocolError, r.next)
    assert why in str(e), (data, str(e))


def test_malformed_input_is_a_named_error():
    bad(b"\x00\x00", "reserved packet type 0")
    bad(b"\xf0\x00", "reserved packet type 15")
    bad(b"\x60\x02\x00\x01", "PUBREL fixed-header flags are 0, must be 2")
    bad(b"\x80\x06\x00\x01\x00\x01a\x00", "SUBSCRIBE fixed-header flags")
    bad(b"\xa0\x05\x00\x01\x00\x01a", "UNSUBSCRIBE fixed-header flags")
    bad(b"\x42\x02\x00\x01", "PUBACK fixed-header flags are 2, must be 0")
    bad(b"\x36\x05\x00\x01a\x00\x01", "QoS 3")
    bad(b"\x40\x02\x00\x00", "message id 0")
    bad(b"\x32\x05\x00\x01a\x00\x00", "message id 0")
    bad(b"\x90\x03\x00\x00\x01", "message id 0")
    bad(b"\x30\x04\x00\x09ab", "runs past the packet")
    bad(b"\x30\x05\x00\x02\xc3\x28x", "not valid UTF-8")
    bad(b"\x30\x05\x00\x02\xed\xa0x", "not valid UTF-8")  # surrogate half
    bad(b"\x30\x04\x00\x01\x00x", "not valid UTF-8")  # U+0000
    bad(b"\x30\x05\x00\x03a/+", "wildcard")
    bad(b"\x30\x05\x00\x03a/#", "wildcard")
    bad(b"\x30\x03\x00\x00x", "empty topic")
    bad(b"\x38\x04\x00\x01ax", "DUP set on a QoS 0")
    bad(b"\x20\x03\x00\x00\x00", "CONNACK remaining length")
    bad(b"\x20\x02\x00\x06", "return code 6")
    bad(b"\x90\x03\x00\x01\x03", "SUBACK return code 0x03")
    bad(b"\x82\x02\x00\x01", "without a topic filter")
    bad(b"\x82\x06\x00\x01\x00\x01a\x03", "requested QoS")
    bad(b"\x82\x07\x00\x01\x00\x02a#\x00", "misplaced wildcard")
    bad(b"\xc0\x01\x00", "PINGREQ remaining length")
    bad(b"\x10\x0c\x00\x04MQTT\x05\x02\x00\x3c\x00\x00", "is not MQTT 3.1.1 or 3.1")
    bad(b"\x10\x0c\x00\x04MQTT\x04\x03\x00\x3c\x00\x00", "reserved flag")


def test_31_allows_dup_on_pubrel_311_does_not():
    assert one(b"\x6a\x02\x00\x01", level=3) == (c.PUBREL, 1)
    bad(b"\x6a\x02\x00\x01", "PUBREL fixed-header flags are 10")


def test_encoder_refuses_bad_arguments():
    raises(ValueError, c.publish, BUF, b"a/+", b"", 0)
    raises(ValueError, c.publish, BUF, b"", b"", 0)
    raises(ValueError, c.publish, BUF, b"a", b"", 1, False, False, 0)
    raises(ValueError, c.publish, BUF, b"a", b"", 3, False, False, 1)
    raises(ValueError, c.publish, BUF, b"a", b"x" * 600, 0)
    raises(ValueError, c.subscribe, BUF, 1, ((b"a#", 0),))
    raises(ValueError, c.connect, BUF, b"", False)
    raises(ValueError, c.connect, BUF, b"", True, 0, None, b"", 0, False, None, None, 3)


def test_publish_header_then_payload_matches_publish():
    n = c.publish(BUF, b"s/t", b"abc", 1, False, False, 9)
    whole = bytes(BUF[:n])
    i = c.publish_header(BUF, b"s/t", 3, 1, False, False, 9)
    BUF[i:i + 3] = b"abc"
    assert bytes(BUF[:i + 3]) == whole

# Wire codec, what must be refused: malformed bytes from a broker and bad
# arguments from the application. Runs on CPython and MicroPython.
from holdfast import codec as c
from holdfast import broker, filters
from holdfast.errors import MQTTProtocolError, PacketTooLarge
from packets import encode, one
from support import raises

BUF = bytearray(512)


def enc(p):
    n = encode(BUF, p)
    return bytes(BUF[:n])


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
    raises(ValueError, filters.subscribe, BUF, 1, ((b"a#", 0),))
    raises(ValueError, c.connect, BUF, b"", False)
    raises(ValueError, c.connect, BUF, b"", True, 0, None, b"", 0, False, None, None, 3)


def test_publish_header_then_payload_matches_publish():
    n = c.publish(BUF, b"s/t", b"abc", 1, False, False, 9)
    whole = bytes(BUF[:n])
    i = c.publish_header(BUF, b"s/t", 3, 1, False, False, 9)
    BUF[i:i + 3] = b"abc"
    assert bytes(BUF[:i + 3]) == whole

# Wire codec, what must be refused: malformed bytes from a broker and bad
# arguments from the application. Runs on CPython and MicroPython.
from holdfast import codec as c
from holdfast import inbound
from holdfast.broker import feed
import consts as mq
from holdfast import broker, topics
from holdfast.errors import MQTTProtocolError
from packets import encode, one
from support import raises

BUF = bytearray(512)


def enc(p):
    n = encode(BUF, p)
    return bytes(BUF[:n])


def test_too_large_packet_skipped_and_stream_stays_in_step():
    big = enc((mq.PUBLISH, b"big", b"z" * 200, 1, False, False, 42))
    small = enc((mq.PUBACK, 3))
    r = c.Reader(64)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    data = big + small
    i = 0
    errors = []
    got = []
    while i < len(data) or r.start < r.end:
        i += feed(r, data[i:i + 50])
        t = r.next()
        if t == mq.SKIPPED:
            errors.append((r.type, r.length, r.pid))
        elif t:
            got.append((t, r.pid))
        elif i >= len(data):
            break
    assert errors == [(mq.PUBLISH, len(big), 42)], errors
    assert got == [(mq.PUBACK, 3)], got


def bad(data, why, level=4):
    r = broker.BrokerReader(256, level)
    feed(r, data)
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


def test_a_client_reader_refuses_what_only_clients_send():
    # CONNECT, SUBSCRIBE and UNSUBSCRIBE travel to a broker only: the
    # client's Reader refuses them by name, where BrokerReader decodes them.
    for p, name in (((mq.CONNECT, 4, b"id", True, 0, None, None, 0, False, None, None), "CONNECT"),
                    ((mq.SUBSCRIBE, 1, ((b"a", 0),)), "SUBSCRIBE"),
                    ((mq.UNSUBSCRIBE, 1, (b"a",)), "UNSUBSCRIBE")):
        data = enc(p)
        assert one(data)[0] == p[0]
        r = c.Reader(64)
        inbound.ready(r)  # it decodes PUBLISH and SUBACK
        feed(r, data)
        e = raises(MQTTProtocolError, r.next)
        assert str(e) == name + " is sent by clients, not by a broker", str(e)


def test_31_allows_dup_on_pubrel_311_does_not():
    assert one(b"\x6a\x02\x00\x01", level=3) == (mq.PUBREL, 1)
    bad(b"\x6a\x02\x00\x01", "PUBREL fixed-header flags are 10")
    # Otherwise the flags 3.1.1 fixes are enforced in 3.1 too: 3.1 sends a
    # PUBREL at QoS 1 as well, and leaves the acks' flags unused.
    bad(b"\x60\x02\x00\x01", "PUBREL fixed-header flags are 0, must be 2", level=3)
    bad(b"\x48\x02\x00\x01", "PUBACK fixed-header flags are 8, must be 0", level=3)


def test_encoder_refuses_bad_arguments():
    raises(ValueError, c.publish, BUF, b"a/+", b"", 0)
    raises(ValueError, c.publish, BUF, b"", b"", 0)
    raises(ValueError, c.publish, BUF, b"a", b"", 1, False, False, 0)
    raises(ValueError, c.publish, BUF, b"a", b"", 3, False, False, 1)
    raises(ValueError, c.publish, BUF, b"a", b"x" * 600, 0)
    raises(ValueError, topics.subscribe, BUF, 1, ((b"a#", 0),))
    raises(ValueError, c.connect, BUF, b"", False)
    raises(ValueError, c.connect, BUF, b"", True, 0, None, None, None, 3)


def test_publish_with_a_gap_leaves_it_between_header_and_payload():
    # MQTT 5 writes its properties into the gap (v5.out): the remaining
    # length counts it, everything else is what publish() writes without one.
    n = c.publish(BUF, b"s/t", b"abc", 1, False, False, 9)
    whole = bytes(BUF[:n])
    BUF[:n + 2] = b"\xee" * (n + 2)
    m = c.publish(BUF, b"s/t", b"abc", 1, False, False, 9, 0, 2)
    assert m == n + 2, m
    assert BUF[1] == whole[1] + 2, BUF[1]
    assert bytes(BUF[:1] + BUF[2:n - 3]) == whole[:1] + whole[2:n - 3], bytes(BUF[:m])
    assert bytes(BUF[n - 3:n - 1]) == b"\xee\xee" and bytes(BUF[n - 1:m]) == b"abc", bytes(BUF[:m])


# -- every length checked against the packet it sits in ----------------------

PUBACK3 = b"\x40\x02\x00\x03"


def run(data, size=64, step=None):
    """Feeds data step bytes at a time (all that fits if None) and calls
    next() until it is used up or a protocol error comes. Returns (packets
    and (SKIPPED, length, pid, qos) tuples for oversize ones,
    that error or None); the Reader's offsets stay in its buffer throughout."""
    r = c.Reader(size)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    out = []
    i = 0
    for _ in range(2 * len(data) + 4):  # each round takes a byte or a packet
        if i < len(data):
            i += feed(r, data[i:i + step] if step else data[i:])
        try:
            t = r.next()
            if t == mq.SKIPPED:
                out.append((mq.SKIPPED, r.length, r.pid, (r.flags >> 1) & 3))
                t = -1
        except MQTTProtocolError as e:
            # Sticky: the next call neither resumes mid-stream nor fails otherwise.
            assert str(raises(MQTTProtocolError, r.next)) == str(e)
            return out, str(e)
        finally:
            assert 0 <= r.start <= r.end <= size and r.skip >= 0, (r.start, r.end, r.skip)
        if t > 0:
            out.append((t, r.pid))
        elif not t and i >= len(data):
            return out, None
    raise AssertionError("the Reader stopped taking bytes at %d of %d" % (i, len(data)))


def hostile(data, want, steps=(None, 1, 2, 3, 7)):
    """data must end in a protocol error with want in its words, whatever
    the read sizes, and nothing before it."""
    for step in steps:
        out, why = run(data, step=step)
        assert out == [] and why and want in why, (data[:8], step, out, why)


def test_oversize_publish_whose_topic_runs_past_its_end_is_refused():
    # A 102-byte QoS 1 PUBLISH (remaining length 100) into 64 bytes, its
    # topic length 4096: the skip must not run past the packet (it drove
    # start and skip negative, swallowed what followed, and every later
    # call raised IndexError).
    hostile(b"\x32\x64\x10\x00" + b"x" * 98 + PUBACK3 * 30,
            "PUBLISH topic: string length 4096 runs past the packet")
    # Whatever the QoS: a QoS 0 one is skipped by its remaining length, but
    # its topic must still fit inside it.
    hostile(b"\x30\x64\x00\x63" + b"x" * 98 + PUBACK3, "string length 99 runs past")


def test_oversize_publish_packet_id_must_sit_inside_it():
    # Remaining length 100: a 97-byte topic leaves 1 byte for the packet id,
    # which would be read from the next packet's first byte.
    hostile(b"\x32\x64\x00\x61" + b"t" * 97 + b"\x01" + PUBACK3,
            "PUBLISH message id runs past the packet")
    hostile(b"\x34\x64\x00\x60" + b"t" * 96 + b"\x00\x00" + PUBACK3, "PUBLISH with message id 0")
    hostile(b"\x32\x64\x00\x00" + b"\x00\x07" + b"z" * 96 + PUBACK3, "PUBLISH with an empty topic")
    # One byte less topic and the id fits exactly: skipped, acknowledged
    # with the id from its last two bytes, and the stream stays in step.
    for step in (None, 1, 2, 3, 7):
        assert run(b"\x34\x64\x00\x60" + b"t" * 96 + b"\x01\x02" + PUBACK3, step=step) == \
            ([(mq.SKIPPED, 102, 258, 2), (mq.PUBACK, 3)], None), step
        assert run(b"\x30\x64\x00\x62" + b"t" * 98 + PUBACK3, step=step) == \
            ([(mq.SKIPPED, 102, 0, 0), (mq.PUBACK, 3)], None), step


def test_only_a_publish_may_be_larger_than_the_buffer():
    # 268,435,455 bytes announced: refused as soon as the length is read,
    # never skipped (256 MB of stream thrown away on a live link).
    for first, want in ((0x20, "CONNACK remaining length is 268435455, must be 2"),
                        (0x40, "PUBACK remaining length is 268435455, must be 2"),
                        (0x50, "PUBREC remaining length is 268435455, must be 2"),
                        (0x62, "PUBREL remaining length is 268435455, must be 2"),
                        (0x70, "PUBCOMP remaining length is 268435455, must be 2"),
                        (0xb0, "UNSUBACK remaining length is 268435455, must be 2"),
                        (0xd0, "PINGRESP remaining length is 268435455, must be 0"),
                        (0x90, "SUBACK of 268435460 bytes is larger than the 64-byte receive buffer"),
                        (0x10, "CONNECT of 268435460 bytes is larger than the 64-byte")):
        hostile(bytes((first,)) + b"\xff\xff\xff\x7f" + PUBACK3 * 20, want)
    # A SUBACK (at most what the buffer holds) one byte too long for it.
    hostile(b"\x90\x3f\x00\x01" + b"\x00" * 61, "SUBACK of 65 bytes is larger than the 64-byte")
    assert run(b"\x90\x3e\x00\x01" + b"\x01" * 60, step=1) == ([(mq.SUBACK, 1)], None)


def test_a_length_the_type_fixes_is_refused_before_the_body_arrives():
    for data, want in ((b"\x40\x03", "PUBACK remaining length is 3"),
                       (b"\x20\x80\x01", "CONNACK remaining length is 128"),
                       (b"\xd0\x01", "PINGRESP remaining length is 1, must be 0")):
        r = c.Reader(64)
        inbound.ready(r)  # it decodes PUBLISH and SUBACK
        for k in range(len(data) - 1):
            feed(r, data[k:k + 1])
            assert r.next() == 0, data
        feed(r, data[-1:])
        assert want in str(raises(MQTTProtocolError, r.next)), data


def test_reset_forgets_a_publish_half_skipped():
    # The link dropped while an oversize QoS 1 PUBLISH was being passed
    # over, its packet id not there yet: the next link's first bytes are
    # its own packets, not the rest of that one.
    r = c.Reader(64)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    feed(r, b"\x32\x64\x00\x50" + b"t" * 40)
    assert r.next() == 0 and r.skip
    r.reset()
    feed(r, b"\x20\x02\x00\x00")
    assert r.next() == mq.CONNACK and (r.start, r.end, r.skip) == (4, 4, 0)

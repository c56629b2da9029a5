# MQTT 5 on the wire (holdfast/mqtt5/): every packet the client sends,
# byte for byte as the OASIS MQTT 5.0 layout gives it; every packet a broker
# sends, decoded with every property; every malformed property a named
# error with reason code 0x81 or 0x82 in words. Runs on CPython and
# MicroPython (the paho-mqtt cross-check is host_tests/test_v5_paho.py).
import sys

from holdfast import codec as c
from holdfast.broker import feed
from holdfast import inbound
import consts as mq
from holdfast.mqtt5 import packets as pk, properties as pr, reasons as rs5, session as s5, subscriptions as sb5, wire as w5
from holdfast.errors import V5Error
from support import allocated, raises

BUF = bytearray(300)


def out(n):
    return bytes(BUF[:n])


def pkt(first, body):
    """A packet: first byte, remaining length (len(body), under 128), body."""
    assert len(body) < 128, len(body)
    return bytes((first, len(body))) + body


def dec(data):
    """data (one whole packet) decoded by s5.parse into a Reader's fields."""
    r = c.Reader(len(data) + 4, 5)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    feed(r, data)
    n = 0
    s = 0
    i = 1
    while True:
        d = data[i]
        i += 1
        n |= (d & 0x7F) << s
        if not d & 0x80:
            break
        s += 7
    assert i + n == len(data), (i, n, len(data))
    s5.parse(r, data[0] >> 4, data[0] & 15, i, len(data))
    return r


def prop(r, p):
    return w5.get(r.buf, p, None, r.p0, r.p1)


# -- what the client sends ------------------------------------------------------

def test_connect_every_field():
    n = pk.connect(BUF, b"c1", clean=False, keepalive=30, will_topic=b"w/t", will_msg=b"bye",
                   will_qos=1, will_retain=True, user=b"u", password=b"pw",
                   props=((pr.SESSION_EXPIRY, 3600), (pr.RECEIVE_MAXIMUM, 20),
                          (pr.TOPIC_ALIAS_MAXIMUM, 8), (pr.MAXIMUM_PACKET_SIZE, 2048)),
                   will_props=((pr.WILL_DELAY, 5), (pr.PAYLOAD_FORMAT, 1)))
    want = (b"\x10\x38"
            b"\x00\x04MQTT\x05"  # protocol name, level 5
            b"\xec"  # user, password, will retain, will QoS 1, will, no clean start
            b"\x00\x1e"  # keepalive 30
            b"\x10"  # 16 bytes of properties:
            b"\x11\x00\x00\x0e\x10"  # session expiry interval 3600
            b"\x21\x00\x14"  # receive maximum 20
            b"\x22\x00\x08"  # topic alias maximum 8
            b"\x27\x00\x00\x08\x00"  # maximum packet size 2048
            b"\x00\x02c1"  # client id
            b"\x07\x18\x00\x00\x00\x05\x01\x01"  # will properties: delay 5, payload format 1
            b"\x00\x03w/t\x00\x03bye"  # will topic, will payload
            b"\x00\x01u\x00\x02pw")  # user name, password
    assert out(n) == want, out(n)


def test_connect_smallest_and_password_alone():
    n = pk.connect(BUF, b"")
    assert out(n) == b"\x10\x0d\x00\x04MQTT\x05\x02\x00\x00\x00\x00\x00", out(n)
    # MQTT 5 allows an empty client id without clean start (the server
    # assigns one), and a password without a user name.
    n = pk.connect(BUF, b"", clean=False, password=b"k")
    assert out(n) == b"\x10\x10\x00\x04MQTT\x05\x40\x00\x00\x00\x00\x00\x00\x01k", out(n)


def test_publish_every_property():
    n = pk.publish(BUF, b"a/b", b"hi", qos=1, pid=10, expiry=60, alias=3,
                   props=((pr.PAYLOAD_FORMAT, 1), (pr.CONTENT_TYPE, b"t"), (pr.RESPONSE_TOPIC, "r/1"),
                          (pr.CORRELATION_DATA, b"\x01\x02"), (pr.USER_PROPERTY, (b"k", b"v")),
                          (pr.USER_PROPERTY, ("k", "w"))))
    want = (b"\x32\x31\x00\x03a/b\x00\x0a"
            b"\x27"  # 39 bytes of properties:
            b"\x02\x00\x00\x00\x3c"  # message expiry interval 60
            b"\x23\x00\x03"  # topic alias 3
            b"\x01\x01"  # payload format indicator: UTF-8
            b"\x03\x00\x01t"  # content type
            b"\x08\x00\x03r/1"  # response topic
            b"\x09\x00\x02\x01\x02"  # correlation data
            b"\x26\x00\x01k\x00\x01v\x26\x00\x01k\x00\x01w"  # user properties, in order
            b"hi")
    assert out(n) == want, out(n)
    assert pk.publish_size(b"a/b", 2, 1, 60, 3, ((pr.PAYLOAD_FORMAT, 1), (pr.CONTENT_TYPE, b"t"),
                           (pr.RESPONSE_TOPIC, "r/1"), (pr.CORRELATION_DATA, b"\x01\x02"),
                           (pr.USER_PROPERTY, (b"k", b"v")), (pr.USER_PROPERTY, ("k", "w")))) == n
    # And back: a broker's PUBLISH has the same layout.
    r = dec(want)
    assert (bytes(r.topic), r.pid, bytes(r.payload)) == (b"a/b", 10, b"hi"), r.pid
    got = [prop(r, p) for p in (pr.MESSAGE_EXPIRY, pr.TOPIC_ALIAS, pr.PAYLOAD_FORMAT, pr.CONTENT_TYPE,
                                pr.RESPONSE_TOPIC, pr.CORRELATION_DATA, pr.SUBSCRIPTION_ID)]
    assert got == [60, 3, 1, b"t", b"r/1", b"\x01\x02", None], got
    assert pr.pairs(r.buf, r.p0, r.p1) == [(b"k", b"v"), (b"k", b"w")], pr.pairs(r.buf, r.p0, r.p1)


def test_publish_without_properties_and_by_alias_alone():
    n = pk.publish(BUF, b"t", b"x")
    assert out(n) == b"\x30\x05\x00\x01t\x00x", out(n)  # property length 0 is still sent
    assert pk.publish_size(b"t", 1, 0) == n
    # With an alias the topic may be empty: the broker has it from before.
    n = pk.publish(BUF, b"", b"x", alias=3)
    assert out(n) == b"\x30\x07\x00\x00\x03\x23\x00\x03x", out(n)
    r = dec(out(n))
    assert (bytes(r.topic), prop(r, pr.TOPIC_ALIAS), bytes(r.payload)) == (b"", 3, b"x")
    # The expiry counts down to 0 at most; 0 is sent as it is.
    n = pk.publish(BUF, b"t", b"", qos=2, pid=1, expiry=0, dup=True)
    assert out(n) == b"\x3c\x0b\x00\x01t\x00\x01\x05\x02\x00\x00\x00\x00", out(n)


def test_publish_from_a_broker_with_subscription_ids():
    # Two matching subscriptions: the identifier may repeat here (only here).
    data = pkt(0x30, b"\x00\x01t\x05\x0b\x01\x0b\xac\x02" + b"m")
    r = dec(data)
    assert prop(r, pr.SUBSCRIPTION_ID) == 1
    assert w5.get(r.buf, pr.SUBSCRIPTION_ID, None, w5.find(r.buf, r.p0, r.p1, pr.SUBSCRIPTION_ID) + 1,
                  r.p1) == 300


def test_acks_short_and_long_forms():
    cases = (
        ((mq.PUBACK, 7), b"\x40\x02\x00\x07"),
        ((mq.PUBACK, 7, 0x10), b"\x40\x03\x00\x07\x10"),
        ((mq.PUBREL, 7, 0x92), b"\x62\x03\x00\x07\x92"),
        ((mq.PUBREC, 7, 0x97, ((pr.REASON_STRING, b"full"),)),
         b"\x50\x0b\x00\x07\x97\x07\x1f\x00\x04full"),
        ((mq.PUBCOMP, 7, 0, ((pr.USER_PROPERTY, (b"a", b"b")),)),
         b"\x70\x0b\x00\x07\x00\x07\x26\x00\x01a\x00\x01b"),
    )
    for args, want in cases:
        got = out(pk.ack(BUF, *args))
        assert got == want, (got, want)
        r = dec(got)
        assert (r.pid, r.code) == (7, got[4] if len(got) > 4 else 0), (r.pid, r.code)
    r = dec(b"\x50\x0b\x00\x07\x97\x07\x1f\x00\x04full")
    assert prop(r, pr.REASON_STRING) == b"full"
    # Reason code and an empty property block: as good as the short form.
    r = dec(b"\x40\x04\x00\x07\x00\x00")
    assert (r.pid, r.code, r.p0 == r.p1) == (7, 0, True)


def test_subscribe_options_and_identifier():
    o = sb5.options(1, no_local=True, retain_as_published=True, retain_handling=2)
    assert o == 0x2D, o
    assert [sb5.options(q) for q in (0, 1, 2)] == [0, 1, 2]
    assert sb5.options(0, retain_handling=1) == 0x10
    n = sb5.subscribe(BUF, 10, ((b"a/+", o), ("c", sb5.options(2))), sub_id=300)
    want = (b"\x82\x10\x00\x0a"
            b"\x03\x0b\xac\x02"  # subscription identifier 300, a variable byte integer
            b"\x00\x03a/+\x2d\x00\x01c\x02")
    assert out(n) == want, out(n)
    n = sb5.subscribe(BUF, 10, ((b"c", 0),))
    assert out(n) == b"\x82\x07\x00\x0a\x00\x00\x01c\x00", out(n)
    n = sb5.subscribe(BUF, 10, ((b"c", 0),), props=((pr.USER_PROPERTY, (b"a", b"b")),))
    assert out(n) == b"\x82\x0e\x00\x0a\x07\x26\x00\x01a\x00\x01b\x00\x01c\x00", out(n)
    for bad in (3, 0x40, 0x80, 0x30):  # QoS 3, reserved bits, retain handling 3
        e = raises(ValueError, sb5.subscribe, BUF, 10, ((b"c", bad),))
        assert "subscription options" in str(e), e
    e = raises(ValueError, sb5.options, 0, retain_handling=3)
    assert "retain handling" in str(e), e
    raises(ValueError, sb5.options, 3)
    e = raises(ValueError, sb5.subscribe, BUF, 10, ((b"c", 0),), 1 << 28)
    assert "subscription identifier" in str(e) and "1..268435455" in str(e), e
    e = raises(ValueError, sb5.subscribe, BUF, 10, ((b"c", 0),), 5, ((pr.SUBSCRIPTION_ID, 6),))
    assert "given twice" in str(e), e
    e = raises(ValueError, sb5.subscribe, BUF, 10, ((b"a/#/b", 0),))
    assert "wildcard" in str(e), e


def test_unsubscribe():
    n = sb5.unsubscribe(BUF, 11, (b"a/+",))
    assert out(n) == b"\xa2\x08\x00\x0b\x00\x00\x03a/+", out(n)
    raises(ValueError, sb5.unsubscribe, BUF, 11, ())


def test_suback_and_unsuback_reason_codes():
    r = dec(pkt(0x90, b"\x00\x0a\x05\x1f\x00\x02no\x01\x87"))
    assert (r.pid, bytes(r.payload), prop(r, pr.REASON_STRING)) == (10, b"\x01\x87", b"no")
    assert rs5.words(0x87) == "not authorized (0x87)", rs5.words(0x87)
    assert rs5.words(1, mq.SUBACK) == "granted QoS 1 (0x01)", rs5.words(1, mq.SUBACK)
    r = dec(b"\xb0\x05\x00\x0b\x00\x00\x11")
    assert (r.pid, bytes(r.payload)) == (11, b"\x00\x11")
    assert rs5.words(0x11) == "no subscription existed (0x11)"


def test_disconnect_both_ways():
    assert out(pk.disconnect(BUF)) == b"\xe0\x00"
    assert out(pk.disconnect(BUF, 0x04)) == b"\xe0\x01\x04"
    n = pk.disconnect(BUF, 0, ((pr.SESSION_EXPIRY, 0),))
    assert out(n) == b"\xe0\x07\x00\x05\x11\x00\x00\x00\x00", out(n)
    assert dec(b"\xe0\x00").code == 0
    r = dec(b"\xe0\x01\x8b")
    assert r.code == 0x8B and rs5.words(r.code) == "server shutting down (0x8b)"
    r = dec(b"\xe0\x0f\x9c\x0d\x1c\x00\x04srv2\x1f\x00\x03bye")
    assert (r.code, prop(r, pr.SERVER_REFERENCE), prop(r, pr.REASON_STRING)) == (0x9C, b"srv2", b"bye")
    assert rs5.words(0, mq.DISCONNECT) == "normal disconnection (0x00)"


def test_connack_every_property():
    props = (b"\x12\x00\x03abc"  # assigned client identifier
             b"\x13\x00\x3c"  # server keep alive 60
             b"\x21\x00\x0a"  # receive maximum 10
             b"\x27\x00\x00\x04\x00"  # maximum packet size 1024
             b"\x22\x00\x05"  # topic alias maximum 5
             b"\x1f\x00\x02ok"  # reason string
             b"\x24\x01\x25\x00"  # maximum QoS 1, retain not available
             b"\x26\x00\x01k\x00\x01v"  # user property
             b"\x28\x01\x29\x00\x2a\x01"  # wildcard, subscription id, shared available
             b"\x11\x00\x00\x00\x78"  # session expiry interval 120
             b"\x1a\x00\x01r\x1c\x00\x01s"  # response information, server reference
             b"\x15\x00\x01m\x16\x00\x01d")  # authentication method and data
    r = dec(pkt(0x20, b"\x01\x00" + bytes((len(props),)) + props))
    assert (r.session_present, r.code) == (True, 0)
    got = [prop(r, p) for p in (pr.ASSIGNED_CLIENT_ID, pr.SERVER_KEEP_ALIVE, pr.RECEIVE_MAXIMUM,
                                pr.MAXIMUM_PACKET_SIZE, pr.TOPIC_ALIAS_MAXIMUM, pr.REASON_STRING,
                                pr.MAXIMUM_QOS, pr.RETAIN_AVAILABLE, pr.WILDCARD_AVAILABLE,
                                pr.SUBSCRIPTION_ID_AVAILABLE, pr.SHARED_AVAILABLE, pr.SESSION_EXPIRY,
                                pr.RESPONSE_INFO, pr.SERVER_REFERENCE, pr.AUTH_METHOD, pr.AUTH_DATA)]
    assert got == [b"abc", 60, 10, 1024, 5, b"ok", 1, 0, 1, 0, 1, 120, b"r", b"s", b"m", b"d"], got
    assert pr.pairs(r.buf, r.p0, r.p1) == [(b"k", b"v")]
    # A refusal, with its reason in words.
    r = dec(b"\x20\x03\x00\x87\x00")
    assert (r.session_present, r.code, rs5.words(r.code)) == (False, 0x87, "not authorized (0x87)")
    # The largest u32 arrives whole on a 32-bit port too.
    r = dec(b"\x20\x08\x00\x00\x05\x27\xff\xff\xff\xff")
    assert prop(r, pr.MAXIMUM_PACKET_SIZE) == 4294967295, prop(r, pr.MAXIMUM_PACKET_SIZE)


def test_property_block_alone_round_trip():
    items = ((pr.SESSION_EXPIRY, 4294967295), (pr.RECEIVE_MAXIMUM, 65535),
             (pr.USER_PROPERTY, (b"", b"")), (pr.AUTH_DATA, b"\x00\xff"))
    n = pr.props(BUF, items, mq.CONNECT)
    want = b"\x12\x11\xff\xff\xff\xff\x21\xff\xff\x26\x00\x00\x00\x00\x16\x00\x02\x00\xff"
    assert out(n) == want, out(n)
    r = c.Reader(32, 5)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    r.buf[:n] = want
    assert w5.walk(r, 0, n, mq.CONNECT) == n
    assert (r.p0, r.p1) == (1, n)
    assert [prop(r, p) for p, _ in items if p != pr.USER_PROPERTY] == [4294967295, 65535, b"\x00\xff"]
    # A block of 128 bytes or more has a two-byte length.
    n = pr.props(BUF, ((pr.USER_PROPERTY, (b"k", b"v" * 125)),), mq.CONNECT)
    assert out(4) == b"\x83\x01\x26\x00", out(4)
    assert n == 2 + 131, n


# -- what must be refused ------------------------------------------------------

def refused(data, code, why):
    e = raises(V5Error, dec, data)
    words = "malformed packet (0x81): " if code == 0x81 else "protocol error (0x82): "
    assert e.code == code and str(e).startswith(words) and why in str(e), (data, e.code, str(e))


def test_malformed_properties_are_named_errors_with_0x81_or_0x82():
    # Twice what may be there once: a protocol error.
    refused(pkt(0x40, b"\x00\x01\x80\x08\x1f\x00\x01a\x1f\x00\x01b"), 0x82,
            "PUBACK: property 0x1f (reason string) appears more than once")
    refused(pkt(0x30, b"\x00\x01t\x06\x23\x00\x01\x23\x00\x02"), 0x82, "0x23 (topic alias) appears")
    # A property of another packet, or of none: malformed (MQTT 5.0 2.2.2.2).
    refused(pkt(0x40, b"\x00\x01\x00\x03\x23\x00\x01"), 0x81,
            "PUBACK: property 0x23 (topic alias) may not be in a PUBACK")
    refused(pkt(0x20, b"\x00\x00\x02\x17\x01"), 0x81, "request problem information) may not be in a CONNACK")
    for p in (0x00, 0x05, 0x2B, 0x7F, 0xFF):
        refused(pkt(0x20, b"\x00\x00\x02" + bytes((p, 0))), 0x81,
                "CONNACK: unknown property identifier 0x%02x" % p)
    # Lengths past the packet or the block.
    refused(b"\x40\x05\x00\x01\x00\x09\x1f", 0x81, "PUBACK: property length 9 runs past the packet")
    refused(b"\x20\x06\x00\x00\x02\x21\x00\x05", 0x81,
            "CONNACK: the value of property 0x21 (receive maximum) runs past the properties")
    refused(pkt(0x20, b"\x00\x00\x04\x1f\x00\x05ab"), 0x81, "value of property 0x1f (reason string) runs past")
    refused(pkt(0x20, b"\x00\x00\x05\x26\x00\x01k\x00"), 0x81, "0x26 (user property) runs past")
    refused(b"\x20\x05\x00\x00\x00\xff\xff", 0x81, "CONNACK: 2 bytes after the properties")
    refused(b"\x40\x06\x00\x01\x00\x00\x1f\x00", 0x81, "PUBACK: 2 bytes after the properties")
    # Variable byte integers: at most 4 bytes, in the fewest bytes.
    refused(b"\x40\x08\x00\x01\x00\x80\x80\x80\x80\x01", 0x81, "variable byte integer")
    refused(b"\x40\x05\x00\x01\x00\x80\x00", 0x81, "not in the fewest bytes")
    refused(pkt(0x30, b"\x00\x01t\x03\x0b\x81\x00"), 0x81, "variable byte integer")
    # Values the spec rules out: protocol errors.
    refused(pkt(0x20, b"\x00\x00\x02\x24\x02"), 0x82, "0x24 (maximum QoS) is 2, must be 0 or 1")
    refused(pkt(0x30, b"\x00\x01t\x02\x01\x05"), 0x82, "payload format indicator) is 5")
    refused(pkt(0x20, b"\x00\x00\x03\x21\x00\x00"), 0x82, "0x21 (receive maximum) is 0")
    refused(pkt(0x20, b"\x00\x00\x05\x27\x00\x00\x00\x00"), 0x82, "0x27 (maximum packet size) is 0")
    refused(pkt(0x30, b"\x00\x01t\x03\x23\x00\x00"), 0x82, "0x23 (topic alias) is 0")
    refused(pkt(0x30, b"\x00\x01t\x02\x0b\x00"), 0x82, "0x0b (subscription identifier) is 0")
    # Strings that are not UTF-8: malformed; binary data may be anything.
    refused(pkt(0x20, b"\x00\x00\x05\x1f\x00\x02\xc3\x28"), 0x81, "0x1f (reason string) is not valid UTF-8")
    refused(pkt(0x20, b"\x00\x00\x07\x26\x00\x01k\x00\x01\x00"), 0x81, "user property) is not valid UTF-8")
    assert prop(dec(pkt(0x20, b"\x00\x00\x05\x16\x00\x02\xc3\x28")), pr.AUTH_DATA) == b"\xc3\x28"


def test_malformed_packets_are_named_errors():
    refused(b"\x40\x02\x00\x00", 0x82, "PUBACK with message id 0")
    refused(b"\x40\x01\x00", 0x81, "PUBACK: 1 bytes are too few")
    refused(b"\x40\x03\x00\x01\x92", 0x82, "PUBACK: reason code 0x92 is not one a PUBACK may carry")
    refused(b"\x70\x03\x00\x01\x10", 0x82, "reason code 0x10 is not one a PUBCOMP may carry")
    refused(b"\x20\x03\x00\x04\x00", 0x82, "reason code 0x04 is not one a CONNACK may carry")
    refused(b"\x20\x03\x01\x87\x00", 0x82, "session present with reason code 0x87")
    refused(b"\x20\x03\x02\x00\x00", 0x81, "CONNACK reserved flag bits")
    refused(b"\x20\x02\x00\x00", 0x81, "CONNACK: 2 bytes are too few")
    refused(b"\xe0\x01\x01", 0x82, "reason code 0x01 is not one a DISCONNECT may carry")
    refused(b"\x90\x03\x00\x01\x00", 0x82, "SUBACK without a reason code")
    refused(b"\x90\x04\x00\x01\x00\x05", 0x82, "SUBACK: reason code 0x05")
    refused(b"\xb0\x04\x00\x01\x00\x01", 0x82, "UNSUBACK: reason code 0x01")
    refused(b"\x30\x03\x00\x00\x00", 0x82, "empty topic and no topic alias")
    refused(pkt(0x30, b"\x00\x03a/+\x00"), 0x82, "wildcard in a PUBLISH topic")
    refused(pkt(0x30, b"\x00\x02\xc3\x28\x00"), 0x81, "PUBLISH topic is not valid UTF-8")
    refused(pkt(0x32, b"\x00\x01t\x00"), 0x81, "PUBLISH: 1 bytes are too few")
    refused(pkt(0x32, b"\x00\x01t\x00\x00\x00"), 0x82, "PUBLISH with message id 0")
    refused(pkt(0x30, b"\x00\x05t"), 0x81, "PUBLISH: 3 bytes are too few")


def test_a_level_5_reader_decodes_by_v5_and_refuses_what_only_clients_send():
    # Reader.next() hands a level-5 packet to Reader5 (mqtt5/session.py): a PUBACK
    # with a reason code, 3 bytes that level 4 refuses, is taken; CONNECT,
    # SUBSCRIBE and UNSUBSCRIBE are refused by name, as at level 4.
    from holdfast.mqtt5.session import Reader5
    from holdfast.errors import MQTTProtocolError
    r = Reader5(64, 5)
    feed(r, b"\x40\x03\x00\x07\x10")
    assert r.next() == mq.PUBACK and (r.pid, r.code) == (7, 0x10), (r.pid, r.code)
    for data, name in ((pkt(0x82, b"\x00\x01\x00\x00\x01a\x00"), "SUBSCRIBE"),
                       (pkt(0xa2, b"\x00\x01\x00\x00\x01a"), "UNSUBSCRIBE"),
                       (pkt(0x10, b"\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x00"), "CONNECT")):
        r.reset()
        feed(r, data)
        e = raises(MQTTProtocolError, r.next)
        assert str(e) == name + " is sent by clients, not by a broker", str(e)


class Long:
    """A value 65536 bytes long, without the 64 KB (the heap-per-module run
    must find room for the test)."""

    def __len__(self):
        return 65536


def test_bad_arguments_are_named_errors_and_write_nothing():
    def bad(why, fn, *args, **kw):
        BUF[:] = bytes(len(BUF))
        e = raises(ValueError, fn, *args, **kw)
        assert why in str(e), (why, str(e))
        assert BUF == bytearray(len(BUF)), "written before the check"

    bad("0x05 is not an MQTT 5 property identifier", pk.connect, BUF, b"c", props=((5, 1),))
    bad("0x00 is not an MQTT 5 property identifier", pr.props, BUF, ((0, 1),), mq.CONNECT)
    bad("property 0x23 (topic alias) may not be in a CONNECT", pk.connect, BUF, b"c",
        props=((pr.TOPIC_ALIAS, 1),))
    bad("may not be in a will properties", pk.connect, BUF, b"c", will_topic=b"w",
        will_props=((pr.SESSION_EXPIRY, 1),))
    bad("property 0x11 (session expiry interval) given twice", pk.connect, BUF, b"c",
        props=((pr.SESSION_EXPIRY, 1), (pr.SESSION_EXPIRY, 2)))
    bad("0x21 (receive maximum): 0 is outside 1..65535", pk.connect, BUF, b"c",
        props=((pr.RECEIVE_MAXIMUM, 0),))
    bad("70000 is outside 1..65535", pk.connect, BUF, b"c", props=((pr.RECEIVE_MAXIMUM, 70000),))
    bad("2 is outside 0..1", pk.connect, BUF, b"c", props=((pr.REQUEST_PROBLEM_INFO, 2),))
    bad("4294967296 is outside 0..4294967295", pk.connect, BUF, b"c",
        props=((pr.SESSION_EXPIRY, 4294967296),))
    bad("string of 65536 bytes", pk.connect, BUF, b"c", props=((pr.AUTH_DATA, Long()),))
    bad("string of 65536 bytes", pk.ack, BUF, mq.PUBACK, 1, 0x80, ((pr.USER_PROPERTY, (b"k", Long())),))
    bad("for a broker to add", pk.publish, BUF, b"t", b"", props=((pr.SUBSCRIPTION_ID, 1),))
    bad("0x02 (message expiry interval) given twice", pk.publish, BUF, b"t", b"", expiry=5,
        props=((pr.MESSAGE_EXPIRY, 6),))
    bad("0x23 (topic alias) given twice", pk.publish, BUF, b"t", b"", alias=1,
        props=((pr.TOPIC_ALIAS, 2),))
    bad("0x23 (topic alias): 65536 is outside 1..65535", pk.publish, BUF, b"t", b"", alias=65536)
    bad("-1 is outside 0..4294967295", pk.publish, BUF, b"t", b"", expiry=-1)
    bad("empty topic", pk.publish, BUF, b"", b"x")
    bad("wildcard", pk.publish, BUF, b"a/#", b"x", alias=2)
    bad("may not be in a PUBACK", pk.ack, BUF, mq.PUBACK, 1, 0, ((pr.CONTENT_TYPE, b"x"),))
    bad("may not be in a DISCONNECT", pk.disconnect, BUF, 0, ((pr.RECEIVE_MAXIMUM, 1),))
    bad("does not fit", pk.publish, bytearray(8), b"topic", b"payload")
    bad("does not fit", pr.props, bytearray(4), ((pr.SESSION_EXPIRY, 1),), mq.CONNECT)


def test_every_reason_code_a_packet_may_carry_has_words():
    for codes in (w5._CONNACK_CODES, w5._PUBACK_CODES, w5._PUBREL_CODES, sb5._SUBACK_CODES,
                  sb5._UNSUBACK_CODES, w5._DISCONNECT_CODES):
        for code in codes:
            w = rs5.words(code)
            assert "unknown" not in w and w.endswith("(0x%02x)" % code), w
    assert rs5.words(0x03) == "unknown reason code (0x03)"


def test_the_words_load_only_when_something_is_explained():
    sys.modules.pop("holdfast.mqtt5.reasons", None)
    r = dec(out(pk.publish(BUF, b"t", b"x", 1, pid=2, expiry=9)))
    assert prop(r, pr.MESSAGE_EXPIRY) == 9
    dec(b"\x40\x04\x00\x02\x97\x00")
    assert "holdfast.mqtt5.reasons" not in sys.modules
    refused(b"\x40\x02\x00\x00", 0x82, "message id 0")
    assert "holdfast.mqtt5.reasons" in sys.modules


def test_publish_encoding_allocates_nothing():
    # The guarantee is MicroPython's (heap_lock turns any allocation into
    # MemoryError); CPython allocates ints and has no such lock.
    if sys.implementation.name != "micropython":
        return
    import micropython
    topic = b"sensors/t"
    payload = b"21.5"
    user = ((pr.USER_PROPERTY, (b"unit", b"C")),)
    pk.publish(BUF, topic, payload, 1, pid=3, expiry=60, alias=2, props=user)  # warm
    micropython.heap_lock()
    try:
        n = pk.publish(BUF, topic, payload, 1, False, False, 3, 0, 60, 2, user)
        m = pk.publish_header(BUF, b"", 4, 0, False, False, 0, 0, None, 2)
    finally:
        micropython.heap_unlock()
    # fixed header, topic, pid, property length, expiry, alias, user property, payload
    assert n == 2 + 11 + 2 + 1 + 5 + 3 + 10 + 4, n
    assert m == 2 + 2 + 1 + 3, m


def test_inbound_publish_with_properties_allocates_what_311_does():
    # Decoding hands out views of topic and payload (two memoryviews, as the
    # 3.1.1 decoder does); walking and checking the properties and finding
    # the topic alias add nothing to that.
    if sys.implementation.name != "micropython":
        return
    data = pkt(0x32, b"\x00\x03a/b\x00\x05\x0f\x02\x00\x00\x00\x3c\x23\x00\x07\x26\x00\x01k\x00\x01vpayload")
    r = dec(data)  # warm: topics.py loaded
    r4 = c.Reader(64, 4)
    inbound.ready(r4)  # it decodes PUBLISH and SUBACK
    feed(r4, b"\x32\x0e\x00\x03a/b\x00\x05payload")
    r4.next()

    body = len(data) - 2

    def v5_parse():
        s5.parse(r, 3, 2, 2, 2 + body)
        w5.find(r.buf, r.p0, r.p1, pr.TOPIC_ALIAS)

    def v4_parse():
        inbound.parse(r4, 3, 2, 2, 16)

    assert allocated(v5_parse) == allocated(v4_parse), (allocated(v5_parse), allocated(v4_parse))
    assert w5.get(r.buf, pr.TOPIC_ALIAS, 0, r.p0, r.p1) == 7 and bytes(r.payload) == b"payload"

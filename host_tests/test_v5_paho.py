"""holdfast/mqtt5/ against paho-mqtt's MQTT 5 encoding (CPython only).

paho builds its packets in its own code (paho.mqtt.client's _send_*,
paho.mqtt.properties): the same arguments must give the same bytes, and
each side must read the other's property blocks. paho packs properties in
identifier order, so the items are given in that order here.
"""

import pytest
from paho.mqtt import client as paho
from paho.mqtt.packettypes import PacketTypes as PT
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from holdfast import codec as c
from holdfast import inbound
from holdfast.broker import feed
import consts as mq
from holdfast.mqtt5 import packets as pk, properties as pr, reasons as rs5, session as s5, subscriptions as sb5, wire as w5

BUF = bytearray(4096)

# Every property, a value for it, and paho's attribute name.
VALUES = {
    pr.PAYLOAD_FORMAT: (1, "PayloadFormatIndicator"),
    pr.MESSAGE_EXPIRY: (4294967295, "MessageExpiryInterval"),
    pr.CONTENT_TYPE: ("text/plain", "ContentType"),
    pr.RESPONSE_TOPIC: ("reply/to/me", "ResponseTopic"),
    pr.CORRELATION_DATA: (b"\x00\x01\xff", "CorrelationData"),
    pr.SUBSCRIPTION_ID: (268435455, "SubscriptionIdentifier"),
    pr.SESSION_EXPIRY: (86400, "SessionExpiryInterval"),
    pr.ASSIGNED_CLIENT_ID: ("auto-1", "AssignedClientIdentifier"),
    pr.SERVER_KEEP_ALIVE: (120, "ServerKeepAlive"),
    pr.AUTH_METHOD: ("SCRAM", "AuthenticationMethod"),
    pr.AUTH_DATA: (b"\x01\x02", "AuthenticationData"),
    pr.REQUEST_PROBLEM_INFO: (0, "RequestProblemInformation"),
    pr.WILL_DELAY: (30, "WillDelayInterval"),
    pr.REQUEST_RESPONSE_INFO: (1, "RequestResponseInformation"),
    pr.RESPONSE_INFO: ("resp", "ResponseInformation"),
    pr.SERVER_REFERENCE: ("other:1883", "ServerReference"),
    pr.REASON_STRING: ("because \u00e9", "ReasonString"),
    pr.RECEIVE_MAXIMUM: (16, "ReceiveMaximum"),
    pr.TOPIC_ALIAS_MAXIMUM: (10, "TopicAliasMaximum"),
    pr.TOPIC_ALIAS: (65535, "TopicAlias"),
    pr.MAXIMUM_QOS: (1, "MaximumQoS"),
    pr.RETAIN_AVAILABLE: (0, "RetainAvailable"),
    pr.MAXIMUM_PACKET_SIZE: (1 << 20, "MaximumPacketSize"),
    pr.WILDCARD_AVAILABLE: (1, "WildcardSubscriptionAvailable"),
    pr.SUBSCRIPTION_ID_AVAILABLE: (0, "SubscriptionIdentifierAvailable"),
    pr.SHARED_AVAILABLE: (1, "SharedSubscriptionAvailable"),
}
USER = [("unit", "C"), ("unit", "F"), ("", "")]
TYPES = {PT.CONNECT: mq.CONNECT, PT.CONNACK: mq.CONNACK, PT.PUBLISH: mq.PUBLISH, PT.PUBACK: mq.PUBACK,
         PT.PUBREC: mq.PUBREC, PT.PUBREL: mq.PUBREL, PT.PUBCOMP: mq.PUBCOMP, PT.SUBSCRIBE: mq.SUBSCRIBE,
         PT.SUBACK: mq.SUBACK, PT.UNSUBSCRIBE: mq.UNSUBSCRIBE, PT.UNSUBACK: mq.UNSUBACK,
         PT.DISCONNECT: mq.DISCONNECT, PT.WILLMESSAGE: pk.WILL}


def allowed(pt):
    """The properties paho allows in packet type pt, as (id, value, name)."""
    p = Properties(pt)
    return [(i, VALUES[i][0], VALUES[i][1]) for i in sorted(VALUES)
            if pt in p.properties[i][1]]


def reader(data):
    r = c.Reader(len(data) + 4, 5)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    feed(r, data)
    return r


def name(pt):
    return "Will" if pt == PT.WILLMESSAGE else PT.Names[pt]


@pytest.mark.parametrize("pt", sorted(TYPES), ids=name)
def test_property_blocks_both_ways(pt):
    ours = TYPES[pt]
    props = allowed(pt)
    # Which properties each packet may carry: the same table.
    table = Properties(pt).properties
    for i in range(256):
        value = VALUES[i][0] if i in VALUES else ("k", "v") if i == pr.USER_PROPERTY else 0
        try:
            pr.props(BUF, ((i, value),), ours)
            ok = True
        except ValueError:
            ok = False
        want = i in table and pt in table[i][1]
        if i == pr.SUBSCRIPTION_ID and ours == mq.PUBLISH:
            want = False  # paho allows it on PUBLISH: a broker may send it, a client may not
        assert ok == want, (name(pt), hex(i))
    items = [(i, v) for i, v, _ in props if not (i == pr.SUBSCRIPTION_ID and ours == mq.PUBLISH)]
    items += [(pr.USER_PROPERTY, u) for u in USER]
    items.sort(key=lambda it: it[0])  # paho's order; the user properties keep theirs
    # Ours read by paho.
    n = pr.props(BUF, items, ours)
    theirs = Properties(pt)
    theirs.unpack(bytes(BUF[:n]))
    for i, v in items:
        if i != pr.USER_PROPERTY:
            got = getattr(theirs, VALUES[i][1])
            assert got == v or got == [v], (hex(i), got, v)
    assert theirs.UserProperty == USER
    # paho's read by ours; the same bytes when the order is paho's.
    p = Properties(pt)
    for i, v, name in props:
        setattr(p, name, v)
    p.UserProperty = USER
    packed = p.pack()
    if ours != mq.PUBLISH:
        assert bytes(BUF[:n]) == packed
    r = reader(packed)
    assert w5.walk(r, 0, len(packed), ours) == len(packed)
    for i, v, _ in props:
        got = w5.get(r.buf, i, None, r.p0, r.p1)
        assert got == (v.encode() if isinstance(v, str) else v), (hex(i), got, v)
    assert pr.pairs(r.buf, r.p0, r.p1) == [(a.encode(), b.encode()) for a, b in USER]


class Capture(paho.Client):
    """A paho client whose packets are kept instead of sent."""

    def __init__(self, client_id):
        super().__init__(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=paho.MQTTv5)
        self.sent = []
        self._sock = self  # paho checks only that there is one, and closes it

    def close(self):
        pass

    def _packet_queue(self, command, packet, mid, qos, info=None):
        self.sent.append(bytes(packet))
        return paho.MQTT_ERR_SUCCESS


def props_of(pt, items):
    p = Properties(pt)
    for i, v in items:
        if i == pr.USER_PROPERTY:
            p.UserProperty = list(getattr(p, "UserProperty", [])) + [v]
        else:
            setattr(p, VALUES[i][1], v)
    return p


def test_connect_as_paho_builds_it():
    props = [(pr.SESSION_EXPIRY, 3600), (pr.RECEIVE_MAXIMUM, 20), (pr.TOPIC_ALIAS_MAXIMUM, 8),
             (pr.USER_PROPERTY, ("a", "b")), (pr.MAXIMUM_PACKET_SIZE, 2048)]
    will = [(pr.PAYLOAD_FORMAT, 1), (pr.MESSAGE_EXPIRY, 60), (pr.WILL_DELAY, 5)]
    for clean, with_will, user in ((True, False, None), (False, True, "u"), (True, True, "u")):
        p = Capture("sensor-1")
        p._clean_start = clean
        p._connect_properties = props_of(PT.CONNECT, props)
        if with_will:
            p.will_set("w/t", b"bye", 2, True, props_of(PT.WILLMESSAGE, will))
        if user:
            p.username_pw_set(user, "pw")
        p._send_connect(45)
        n = pk.connect(BUF, "sensor-1", clean, 45, "w/t" if with_will else None, b"bye", 2, True,
                       user, "pw" if user else None, props, will)
        assert bytes(BUF[:n]) == p.sent[0], (bytes(BUF[:n]), p.sent[0])


def test_publish_as_paho_builds_it():
    items = [(pr.PAYLOAD_FORMAT, 0), (pr.MESSAGE_EXPIRY, 10), (pr.CONTENT_TYPE, "json"),
             (pr.RESPONSE_TOPIC, "r"), (pr.CORRELATION_DATA, b"id-7"), (pr.TOPIC_ALIAS, 4),
             (pr.USER_PROPERTY, ("k", "v"))]
    for qos, retain, dup, props in ((0, False, False, None), (1, True, False, items),
                                    (2, False, True, items[1:2])):
        p = Capture("x")
        p._send_publish(9 if qos else 0, b"s/t", b"\x00payload", qos, retain, dup, None,
                        props_of(PT.PUBLISH, props) if props else None)
        n = pk.publish(BUF, "s/t", b"\x00payload", qos, retain, dup, 9 if qos else 0, 0, None, 0,
                       props or ())
        assert bytes(BUF[:n]) == p.sent[0], (bytes(BUF[:n]), p.sent[0])
        # The same through the expiry and alias arguments, which go first.
        if props is items:
            rest = [it for it in items if it[0] not in (pr.MESSAGE_EXPIRY, pr.TOPIC_ALIAS)]
            m = pk.publish(BUF, "s/t", b"\x00payload", qos, retain, dup, 9, 0, 10, 4, rest)
            assert m == n
            r = reader(bytes(BUF[:m]))
            s5.parse(r, mq.PUBLISH, BUF[0] & 15, 2, m)
            for i, v in items:
                if i != pr.USER_PROPERTY:
                    got = w5.get(r.buf, i, None, r.p0, r.p1)
                    assert got == (v.encode() if isinstance(v, str) else v), (i, got)


def test_subscribe_unsubscribe_disconnect_as_paho_builds_them():
    p = Capture("x")
    opts = [SubscribeOptions(1, noLocal=True, retainAsPublished=True,
                             retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB),
            SubscribeOptions(2), SubscribeOptions(0, retainHandling=SubscribeOptions.RETAIN_DO_NOT_SEND)]
    sprops = props_of(PT.SUBSCRIBE, [(pr.SUBSCRIPTION_ID, 77), (pr.USER_PROPERTY, ("a", "b"))])
    p._send_subscribe(False, [(b"a/+", opts[0]), (b"b/#", opts[1]), (b"c", opts[2])], sprops)
    ours = [sb5.options(1, True, True, 1), sb5.options(2), sb5.options(0, retain_handling=2)]
    assert ours == [o.pack()[0] for o in opts]
    n = sb5.subscribe(BUF, 1, (("a/+", ours[0]), ("b/#", ours[1]), ("c", ours[2])), 77,
                     ((pr.USER_PROPERTY, ("a", "b")),))
    assert bytes(BUF[:n]) == p.sent[0], (bytes(BUF[:n]), p.sent[0])
    p._send_unsubscribe(False, [b"a/+", b"c"], props_of(PT.UNSUBSCRIBE, [(pr.USER_PROPERTY, ("x", "y"))]))
    n = sb5.unsubscribe(BUF, 2, ("a/+", "c"), ((pr.USER_PROPERTY, ("x", "y")),))
    assert bytes(BUF[:n]) == p.sent[1], (bytes(BUF[:n]), p.sent[1])
    for code, props in ((None, None), (0x04, None), (0x80, [(pr.SESSION_EXPIRY, 0),
                                                          (pr.REASON_STRING, "bye")])):
        p._send_disconnect(None if code is None else ReasonCode(PT.DISCONNECT, identifier=code),
                           props_of(PT.DISCONNECT, props) if props else None)
        n = pk.disconnect(BUF, code or 0, props or ())
        assert bytes(BUF[:n]) == p.sent[-1], (bytes(BUF[:n]), p.sent[-1])


def test_reason_codes_per_packet_match_paho():
    ours = {PT.CONNACK: w5._CONNACK_CODES, PT.PUBACK: w5._PUBACK_CODES, PT.PUBREC: w5._PUBACK_CODES,
            PT.PUBREL: w5._PUBREL_CODES, PT.PUBCOMP: w5._PUBREL_CODES, PT.SUBACK: sb5._SUBACK_CODES,
            PT.UNSUBACK: sb5._UNSUBACK_CODES, PT.DISCONNECT: w5._DISCONNECT_CODES}
    # Where paho's table leaves out what MQTT 5.0 table 2-6 lists.
    spec_only = {PT.CONNACK: {0x99}}
    for pt, codes in ours.items():
        theirs = {code for code, names in ReasonCode.names.items()
                  for ts in names.values() if pt in ts}
        assert set(codes) == theirs | spec_only.get(pt, set()), PT.Names[pt]
        for code in codes:
            assert "unknown" not in rs5.words(code, TYPES[pt])

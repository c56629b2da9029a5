"""MQTTClient(level=5) against the real mosquitto, on CPython and the
MicroPython unix port: the Session Expiry Interval honoured, refusals by an
ACL as reason codes, Receive Maximum with 64 QoS 2 flows. Every wait is for
evidence, bounded; nothing asserts a time."""

import glob
import json
import os

import paho.mqtt.client as paho
import pytest

from fleet.mosquitto import Mosquitto
from test_v5_client import RUNTIMES, run

WAIT = 30  # seconds: bound on a wait for evidence, never a pass/fail figure


def private(tmp_path_factory, name, conf, files=()):
    """A mosquitto of this module's own, with conf appended to its config
    and files ((name, text), ...) written into its workdir first."""
    d = str(tmp_path_factory.mktemp(name))
    for fname, text in files:
        with open(os.path.join(d, fname), "w") as f:
            f.write(text)
    return Mosquitto(workdir=d, extra_conf=conf % {"dir": d})


# -- the Session Expiry Interval: the broker forgets the session ------------------

EXPIRY = """
import time
c = MQTTClient(CID, HOST, PORT, level=5, reconnect=False)
c.session.expiry = 2  # seconds the broker keeps the session after the link
c.connect(False)
c.subscribe(b"v5se/t", 1)
c.disconnect()
R["at_once"] = c.connect(False)
c.disconnect()
d = MQTTClient(CID + "-never", HOST, PORT, level=5, reconnect=False)  # the default expiry
d.connect(False)
d.subscribe(b"v5se/t", 1)
d.disconnect()
# A reconnect that still finds the session starts its 2 s again: the gap
# between tries grows, so one of them comes after the broker forgot it.
R["tries"] = []
for gap in range(1, 8):
    time.sleep(gap)
    present = c.connect(False)
    c.disconnect()
    R["tries"].append(present)
    if not present:
        break
R["never"] = d.connect(False)  # it waited all the tries took, and longer
d.disconnect()
d.connect(True)  # leave no session behind on the shared broker
d.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_broker_forgets_a_session_when_its_expiry_is_over(runtime, mosquitto):
    r = run(runtime, "CID = %r\n" % ("v5se-" + runtime) + EXPIRY, port=mosquitto.port)
    assert r["at_once"] is True, r
    assert r["tries"] and r["tries"][-1] is False, r  # the broker forgot it
    assert r["never"] is True, r


# -- refusals from mosquitto's ACL: reason codes, events in words -------------------

ACL = """\
topic readwrite v5acl/open/#
topic read v5acl/ro
topic write v5acl/wo
"""


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    b = private(tmp_path_factory, "mosquitto-acl", "acl_file %(dir)s/acl", (("acl", ACL),))
    b.start()
    try:
        yield b
    finally:
        b.close()


REFUSED = """
seen = []
got = []
c = MQTTClient("v5acl-" + RUNTIME, HOST, PORT, level=5, reconnect=False)
c.on_rejected = lambda pid, code: seen.append([pid, code, str(c.last_error)])
c.set_delivered(lambda pid: seen.append([pid, "delivered"]))
c.set_callback(lambda t, m: got.append([bytes(t).decode(), bytes(m).decode()]))
c.connect()
R["granted"] = [c.subscribe(b"v5acl/ro", 1), c.subscribe(b"v5acl/wo", 1),
                c.subscribe(b"v5acl/open/#", 1)]
R["pids"] = [c.publish(b"v5acl/ro", b"denied 1", False, 1),
             c.publish(b"v5acl/ro", b"denied 2", False, 2),
             c.publish(b"v5acl/wo", b"unread", False, 1),
             c.publish(b"v5acl/open/t", b"allowed", False, 1)]
for i in range(80):  # a bound under the run's (40 s with nothing coming): the evidence ends the wait
    if len(seen) >= 4 and got:
        break
    c.wait_msg(500)
R["seen"] = seen
R["got"] = got
R["rejected"] = c.rejected
R["pending"] = c.pending()
c.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_mosquittos_acl_refusals_are_events_in_words(runtime, acl_broker):
    r = run(runtime, "RUNTIME = %r\n" % runtime + REFUSED, port=acl_broker.port)
    # mosquitto 2.0's acl_file grants every SUBSCRIBE (it checks read access
    # as it delivers): a filter the client may not read is granted, and what
    # is published there never comes. (SUBACK 0x87: the next test.)
    assert r["granted"] == [1, 1, 1], r
    p1, p2, p3, p4 = r["pids"]
    # A denied QoS 1 PUBLISH: PUBACK 0x87; QoS 2: PUBREC 0x87. Each an event
    # in words, neither passed on (the client is subscribed to the topic).
    assert r["seen"] == [[p1, 0x87, "message %d refused by the broker: not authorized (0x87)" % p1],
                         [p2, 0x87, "message %d refused by the broker: not authorized (0x87)" % p2],
                         [p3, "delivered"], [p4, "delivered"]], r["seen"]
    assert r["got"] == [["v5acl/open/t", "allowed"]], r
    assert (r["rejected"], r["pending"]) == (2, 0), r


# mosquitto's dynamic security plugin (shipped with 2.0) checks SUBSCRIBE
# too: a denied filter gets SUBACK 0x87. Anonymous clients take the roles of
# its anonymous group.
DYNSEC = {
    "defaultACLAccess": {"publishClientSend": True, "publishClientReceive": True,
                         "subscribe": True, "unsubscribe": True},
    "clients": [],
    "groups": [{"groupname": "anyone", "roles": [{"rolename": "limited"}], "clients": []}],
    "anonymousGroup": "anyone",
    "roles": [{"rolename": "limited", "acls": [
        {"acltype": "subscribePattern", "topic": "v5acl/secret/#", "allow": False, "priority": 1},
        {"acltype": "publishClientSend", "topic": "v5acl/ro", "allow": False, "priority": 1}]}],
}


@pytest.fixture(scope="module")
def dynsec_broker(tmp_path_factory):
    found = [p for d in ("/usr/lib/*/", "/usr/lib/", "/usr/local/lib/")
             for p in glob.glob(d + "mosquitto_dynamic_security.so")]
    if not found:
        pytest.fail("mosquitto_dynamic_security.so not found beside mosquitto's libraries: "
                    "it comes with mosquitto 2.0", pytrace=False)
    b = private(tmp_path_factory, "mosquitto-dynsec",
                "plugin %s\nplugin_opt_config_file %%(dir)s/dynsec.json" % found[0],
                (("dynsec.json", json.dumps(DYNSEC)),))
    b.start()
    try:
        yield b
    finally:
        b.close()


DENIED = """
from holdfast.errors import SubscribeError
seen = []
c = MQTTClient("v5dyn-" + RUNTIME, HOST, PORT, level=5, reconnect=False)
c.on_rejected = lambda pid, code: seen.append([pid, code])
c.connect()
try:
    c.subscribe(b"v5acl/secret/#", 1)
except SubscribeError as e:
    R["sub"] = str(e)
R["granted"] = c.subscribe(b"v5acl/open/#", 1)
R["pid"] = c.publish(b"v5acl/ro", b"denied", False, 1)
for i in range(80):  # a bound under the run's (40 s with nothing coming): the evidence ends the wait
    if seen:
        break
    c.wait_msg(500)
R["seen"] = seen
R["error"] = str(c.last_error)
c.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_filter_mosquitto_denies_is_a_subscribe_error_in_words(runtime, dynsec_broker):
    r = run(runtime, "RUNTIME = %r\n" % runtime + DENIED, port=dynsec_broker.port)
    assert r.get("sub") == "subscription to b'v5acl/secret/#' refused by the broker: not authorized (0x87)", r
    assert r["granted"] == 1, r
    assert r["seen"] == [[r["pid"], 0x87]], r
    assert r["error"] == "message %d refused by the broker: not authorized (0x87)" % r["pid"], r


# -- Receive Maximum 16, a backlog of 64 QoS 2 messages after an outage -----------

HELD = 16
FLOOD = 64


@pytest.fixture(scope="module")
def inflight_broker(tmp_path_factory):
    # max_inflight_messages at the table's size, as for a level-4 client;
    # mosquitto 2.0.11 goes past it and past Receive Maximum (docs/mqtt5.md).
    b = private(tmp_path_factory, "mosquitto-inflight", "max_inflight_messages %d" % HELD)
    b.start()
    try:
        yield b
    finally:
        b.close()


FLOODED = """
from holdfast.memstore import MemoryStore
got = []
store = MemoryStore(4096, 16, HELD)  # its table of held ids: the Receive Maximum sent
c = MQTTClient(CID, HOST, PORT, level=5, outbox=store)
c.set_callback(lambda t, m: got.append(bytes(m).decode()))
if PHASE == 1:  # subscribe, then go away: the broker keeps the messages
    c.connect(False)
    R["granted"] = c.subscribe(b"v5rm/" + CID.encode(), 2)
    c.disconnect()
else:  # back after the outage: the backlog comes at once
    R["present"] = c.connect(False)
    for i in range(400):  # a bound under the run's (40 s with nothing coming): the evidence ends the wait
        if len(got) >= N:
            break
        c.wait_msg(100)
    R["got"] = got  # a message sent twice on the one link would be in it, out of order
    R["links"] = c.links  # one: no re-send after a reconnect
    R["held_evicted"] = store.held_evicted
    c.disconnect()
    c.connect(True)  # leave no session behind
    c.disconnect()
done()
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_backlog_of_64_qos2_messages_is_delivered_once(runtime, inflight_broker):
    b = inflight_broker
    cid = "v5rm-" + runtime
    head = "CID = %r\nHELD = %d\nN = %d\n" % (cid, HELD, FLOOD)
    assert run(runtime, head + "PHASE = 1\n" + FLOODED, port=b.port) == {"granted": 2}
    payloads = ["m%02d" % i for i in range(FLOOD)]
    pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="v5rm-pub-" + runtime,
                      protocol=paho.MQTTv5)
    pub.connect(b.host, b.port)
    pub.loop_start()
    try:
        for p in payloads:
            info = pub.publish("v5rm/" + cid, p, qos=2)
            info.wait_for_publish(WAIT)
            assert info.is_published(), p
    finally:
        pub.loop_stop()
        pub.disconnect()
    r = run(runtime, head + "PHASE = 2\n" + FLOODED, port=b.port)
    assert r["present"] is True, r
    # Each once, in order, on one link. The table of held ids is not asked
    # to keep up: mosquitto 2.0.11 sends a resumed session's queued QoS 2
    # messages past the Receive Maximum of 16 (up to 48 without a PUBREC),
    # so the table evicts ids (32 here) while nothing is sent twice.
    assert r["got"] == payloads and r["links"] == 1, r

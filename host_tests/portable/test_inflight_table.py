# The in-flight table (session.py's _ACKS and _ACKS_REFUSED, docs/engine.md):
# every state of an outgoing message's slot, every acknowledgement the broker
# can send it, and what the engine does, walked against the real Session
# (level 4) and Session5 (level 5, where an ack can refuse), in exact bytes.
# The table below is the specification, written apart from the engine's: a
# transition that changes in session.py fails here, and one missing here
# fails too. Then what each state sends when its message goes out again,
# and the inbound QoS 2 side (an id held between PUBREC and PUBREL).
import sys

import consts as mq
from consts import DELIVERED, REJECTED
from holdfast.session import Session
from holdfast.mqtt5.session import Session5
from holdfast.inbound import handled
from fakebroker import parse

# The slot states (session.py: the packet type a slot waits for); FREE: no
# slot holds the ack's id (a late or stray ack).
FREE, WAIT_PUBACK, WAIT_PUBREC, WAIT_PUBCOMP = 0, 4, 5, 7
STATES = (FREE, WAIT_PUBACK, WAIT_PUBREC, WAIT_PUBCOMP)
NAMES = {FREE: "FREE", WAIT_PUBACK: "WAIT_PUBACK", WAIT_PUBREC: "WAIT_PUBREC",
         WAIT_PUBCOMP: "WAIT_PUBCOMP"}
ACKS = {mq.PUBACK: "PUBACK", mq.PUBREC: "PUBREC", mq.PUBCOMP: "PUBCOMP"}
# The events: each ack, as accepted (success) or refused (MQTT 5, a reason
# code of 0x80 or more: 0x87 Not authorized; PUBCOMP's only one is 0x92).
EVENTS = [(t, False) for t in (mq.PUBACK, mq.PUBREC, mq.PUBCOMP)] + [
    (t, True) for t in (mq.PUBACK, mq.PUBREC, mq.PUBCOMP)]
REFUSAL = {mq.PUBACK: 0x87, mq.PUBREC: 0x87, mq.PUBCOMP: 0x92}

# What an entry does: (event receive() returns, PUBREL queued, the slot's
# next state, the message after it: "kept" as it was, "released" (past
# PUBREC), "gone" (out of the outbox)).
NOTHING = "nothing"
OUTCOMES = {
    NOTHING: (0, False, None, "kept"),  # None: the slot stays as it is
    "delivered": (DELIVERED, False, FREE, "gone"),
    "rejected": (REJECTED, False, FREE, "gone"),
    "release": (0, True, WAIT_PUBCOMP, "released"),
    "pubrel again": (0, True, None, "kept"),
}
# The table: state -> (PUBACK, PUBREC, PUBCOMP, then refused PUBACK, PUBREC, PUBCOMP).
TABLE = {
    FREE: (NOTHING,) * 6,
    WAIT_PUBACK: ("delivered", NOTHING, NOTHING, "rejected", NOTHING, NOTHING),
    WAIT_PUBREC: (NOTHING, "release", NOTHING, NOTHING, "rejected", NOTHING),
    WAIT_PUBCOMP: (NOTHING, "pubrel again", "delivered", NOTHING, "pubrel again", "rejected"),
}
# The engine's own entry numbers for the outcomes (session.py's comment).
ENTRY = {NOTHING: 0, "pubrel again": 1, "delivered": 2, "release": 3, "rejected": 4}


def connected(level, clean=True):
    s = (Session5 if level == 5 else Session)(b"table", clean, 0, level, 256, 4)
    s.start(0)
    s.sent(s.tx_end, 0)
    ack(s, b"\x20\x03\x00\x00\x00" if level == 5 else b"\x20\x02\x00\x00")
    assert s.state == mq.CONNECTED, s.state
    return s


def ack(s, data):
    """data into the receive buffer as a socket read would; the events."""
    r = s.rx
    r.tail()[:len(data)] = data
    r.end += len(data)
    got = []
    e = s.receive(0)
    while e:
        got.append(e)
        if e == mq.MESSAGE:
            handled(s)
        e = s.receive(0)
    return got


def ack_bytes(t, pid, refused):
    b = bytes([t << 4, 3 if refused else 2, pid >> 8, pid & 0xFF])
    return b + bytes([REFUSAL[t]]) if refused else b


def taken(s):
    out = parse(bytes(s.tx[s.tx_start:s.tx_end]))
    s.sent(s.tx_end - s.tx_start, 0)
    return out


def slot_of(s, pid):
    for i in range(s.window):
        if s._state[i] and s._pid[i] == pid:
            return s._state[i]
    return FREE


def in_state(level, state):
    """A connected session whose message (id pid, key k) is in state, or,
    for FREE, whose message was delivered before: (session, pid, key)."""
    s = connected(level)
    pid = s.publish(b"t/1", b"reading", 1 if state in (FREE, WAIT_PUBACK) else 2, False, 0)
    key = s.store.tail - 1
    assert taken(s)[0][0] == mq.PUBLISH
    if state == WAIT_PUBCOMP:
        ack(s, ack_bytes(mq.PUBREC, pid, False))
        assert taken(s) == [(mq.PUBREL, pid)]
    elif state == FREE:
        assert ack(s, ack_bytes(mq.PUBACK, pid, False)) == [DELIVERED]
    assert slot_of(s, pid) == state, (NAMES[state], slot_of(s, pid))
    return s, pid, key


def message(s, key):
    if s.store.next(key - 1) != key:
        return "gone"
    return "released" if s.store.qos(key) == 3 else "kept"


def walk(level, refused_too):
    seen = 0
    for state in STATES:
        assert len(TABLE[state]) == len(EVENTS)
        for (t, refused), name in zip(EVENTS, TABLE[state]):
            if refused and not refused_too:
                continue
            event, pubrel, nxt, after = OUTCOMES[name]
            s, pid, key = in_state(level, state)
            before, inflight = message(s, key), s.inflight
            where = "level %d, %s, %s%s" % (level, NAMES[state], ACKS[t], " refused" if refused else "")
            got = ack(s, ack_bytes(t, pid, refused))
            assert got == ([event] if event else []), (where, name, got)
            assert taken(s) == ([(mq.PUBREL, pid)] if pubrel else []), (where, name)
            want = state if nxt is None else nxt
            assert slot_of(s, pid) == want, (where, name, NAMES[slot_of(s, pid)])
            assert message(s, key) == (before if after == "kept" else after), (where, name)
            assert s.inflight == inflight - (1 if event else 0), (where, name)
            if event:
                assert s.done_pid == pid, where
            assert s.state == mq.CONNECTED and s.error is None, where
            seen += 1
    return seen


def test_every_state_and_ack_at_level_4():
    # MQTT 3.1.1 acks carry no reason code: the accepted columns only.
    assert walk(4, False) == len(STATES) * 3


def test_every_state_and_ack_at_level_5_refused_too():
    # MQTT 5: the same transitions, and a refusal ends the flow (REJECTED)
    # where the ack would have moved it on, and is a repeat where it is one.
    assert walk(5, True) == len(STATES) * 6


if sys.implementation.name != "micropython":
    # CPython keeps the engine's consts as module globals (MicroPython folds
    # them into the bytecode, so there the walks above are the check).
    def test_the_engines_table_reads_as_the_specification():
        # The ints decoded by the formula session.py documents give this
        # file's table, entry for entry.
        from holdfast import session
        for state in STATES[1:]:
            for (t, refused), name in zip(EVENTS, TABLE[state]):
                table = session._ACKS_REFUSED if refused else session._ACKS
                e = table >> 9 * (state - 3 >> 1) + 3 * (t - 3 >> 1) & 7
                assert e == ENTRY[name], (NAMES[state], ACKS[t], refused, e, name)


def test_what_each_state_sends_when_its_message_goes_out_again():
    # The next link (the broker kept the session): a PUBLISH with DUP, or
    # for WAIT_PUBCOMP its PUBREL; a new session: PUBLISH again for every
    # one. With retry_ms, the same on the same link once it waited long.
    for present in (True, False):
        for state in STATES[1:]:
            s, pid, key = in_state(4, state)
            s.clean = False  # the broker may keep it: CONNACK says
            s.lost()
            s.start(0)
            s.sent(s.tx_end, 0)
            ack(s, b"\x20\x02" + (b"\x01" if present else b"\x00") + b"\x00")
            out = taken(s)
            again = (mq.PUBREL, pid) if state == WAIT_PUBCOMP and present else (
                mq.PUBLISH, b"t/1", b"reading", 1 if state == WAIT_PUBACK else 2, False, True, pid)
            assert out == [again], (NAMES[state], present, out)
            want = WAIT_PUBCOMP if again[0] == mq.PUBREL else WAIT_PUBACK if again[3] == 1 else WAIT_PUBREC
            assert slot_of(s, pid) == want, (NAMES[state], present, NAMES[slot_of(s, pid)])
    for state in STATES[1:]:
        s = Session(b"retry", True, 0, 4, 256, 4, None, 1000)
        s.start(0)
        s.sent(s.tx_end, 0)
        ack(s, b"\x20\x02\x00\x00")
        pid = s.publish(b"t/1", b"reading", 1 if state == WAIT_PUBACK else 2, False, 0)
        taken(s)
        if state == WAIT_PUBCOMP:
            ack(s, ack_bytes(mq.PUBREC, pid, False))
            taken(s)
        s.tick(999)
        assert taken(s) == [], NAMES[state]
        s.tick(1000)
        again = (mq.PUBREL, pid) if state == WAIT_PUBCOMP else (
            mq.PUBLISH, b"t/1", b"reading", 1 if state == WAIT_PUBACK else 2, False, True, pid)
        assert taken(s) == [again], NAMES[state]
        assert slot_of(s, pid) == state, NAMES[state]


def test_the_inbound_qos2_side_held_between_pubrec_and_pubrel():
    # An inbound QoS 2 id: not held -> PUBLISH delivers it, PUBREC, held;
    # held -> the broker's copy again (DUP) is not delivered, PUBREC again;
    # PUBREL -> PUBCOMP, not held; PUBREL for an id not held -> PUBCOMP.
    s = connected(4, clean=False)  # a kept session: messages can arrive
    pid = 9
    publish = bytes([0x34, 2 + 3 + 1 + 2, 0, 3]) + b"a/b" + bytes([0, pid]) + b"x"
    held = lambda: s.store.held_ids is not None and s.store.held_ids.held(pid)
    assert ack(s, publish) == [mq.MESSAGE] and taken(s) == [(mq.PUBREC, pid)] and held()
    dup = bytes([publish[0] | 8]) + publish[1:]
    assert ack(s, dup) == [] and taken(s) == [(mq.PUBREC, pid)] and held()
    assert ack(s, bytes([0x62, 2, 0, pid])) == [] and taken(s) == [(mq.PUBCOMP, pid)]
    assert not held()
    assert ack(s, bytes([0x62, 2, 0, pid])) == [] and taken(s) == [(mq.PUBCOMP, pid)]
    assert ack(s, publish) == [mq.MESSAGE] and taken(s) == [(mq.PUBREC, pid)] and held()

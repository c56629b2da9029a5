# Property tests of the wire codec (CPython only: hypothesis does not run on
# MicroPython; the portable byte-vector tests cover that runtime).
from hypothesis import given, settings, strategies as st

from holdfast import codec as c
from holdfast import inbound
from holdfast.broker import feed
import consts as mq
from holdfast.errors import MQTTProtocolError
from packets import current, encode, decode_all

pid = st.integers(1, 65535)
qos = st.integers(0, 2)
level_char = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#/")
level = st.text(level_char, min_size=1, max_size=6)
topic = st.lists(level, min_size=1, max_size=4).map(lambda ls: "/".join(ls).encode())
filter_ = st.lists(st.one_of(level, st.just("+")), min_size=1, max_size=4).flatmap(
    lambda ls: st.sampled_from(["/".join(ls), "/".join(ls) + "/#"])).map(str.encode)
blob = st.binary(max_size=300)
opt_blob = st.one_of(st.none(), st.binary(max_size=40))


@st.composite
def connects(draw):
    lvl = draw(st.sampled_from([3, 4]))
    clean = draw(st.booleans())
    cid = draw(st.binary(min_size=0 if (lvl == 4 and clean) else 1, max_size=23))
    will = draw(st.booleans())
    user = draw(opt_blob)
    pw = draw(opt_blob) if (user is not None or lvl == 3) else None
    return (mq.CONNECT, lvl, cid, clean, draw(st.integers(0, 65535)),
            draw(topic) if will else None, draw(st.binary(max_size=40)) if will else None,
            draw(qos) if will else 0, draw(st.booleans()) if will else False, user, pw)


@st.composite
def publishes(draw):
    q = draw(qos)
    return (mq.PUBLISH, draw(topic), draw(blob), q, draw(st.booleans()),
            draw(st.booleans()) if q else False, draw(pid) if q else 0)


packets = st.one_of(
    connects(),
    st.tuples(st.just(mq.CONNACK), st.booleans(), st.integers(0, 5)),
    publishes(),
    st.tuples(st.sampled_from([mq.PUBACK, mq.PUBREC, mq.PUBREL, mq.PUBCOMP, mq.UNSUBACK]), pid),
    st.tuples(st.just(mq.SUBSCRIBE), pid, st.lists(st.tuples(filter_, qos), min_size=1, max_size=4).map(tuple)),
    st.tuples(st.just(mq.SUBACK), pid, st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1, max_size=4).map(tuple)),
    st.tuples(st.just(mq.UNSUBSCRIBE), pid, st.lists(filter_, min_size=1, max_size=4).map(tuple)),
    st.tuples(st.sampled_from([mq.PINGREQ, mq.PINGRESP, mq.DISCONNECT])),
)


def lvl_of(p):
    return p[1] if p[0] == mq.CONNECT else 4


def enc(p):
    buf = bytearray(2048)
    return bytes(buf[:encode(buf, p)])


@settings(max_examples=600)
@given(packets)
def test_decode_encode_round_trip(p):
    assert decode_all(enc(p), level=lvl_of(p)) == [p]


@settings(max_examples=200)
@given(st.lists(packets.filter(lambda p: p[0] != mq.CONNECT), min_size=1, max_size=8), st.integers(1, 7))
def test_any_chunking_gives_the_same_packets(ps, step):
    stream = b"".join(enc(p) for p in ps)
    assert decode_all(stream, step=1) == ps
    assert decode_all(stream, step=step) == ps


def _only_protocol_errors(data, size):
    try:
        decode_all(data, size=size)
    except MQTTProtocolError:
        pass


@settings(max_examples=1000)
@given(st.binary(max_size=200), st.sampled_from([16, 64, 4096]))
def test_random_bytes_raise_only_the_protocol_error(data, size):
    _only_protocol_errors(data, size)


@settings(max_examples=1000)
@given(packets, st.data())
def test_mutated_packets_raise_only_the_protocol_error(p, data):
    b = bytearray(enc(p))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        i = data.draw(st.integers(0, max(0, len(b) - 1)))
        if op == "flip" and b:
            b[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del b[i:]
        else:
            b[i:i] = bytes([data.draw(st.integers(0, 255))])
    _only_protocol_errors(bytes(b), data.draw(st.sampled_from([32, 4096])))


# -- hostile streams: what a client's Reader meets ----------------------------

# What a broker sends a client, valid.
from_broker = st.one_of(
    st.tuples(st.just(mq.CONNACK), st.booleans(), st.integers(0, 5)),
    publishes(),
    st.tuples(st.sampled_from([mq.PUBACK, mq.PUBREC, mq.PUBREL, mq.PUBCOMP, mq.UNSUBACK]), pid),
    st.tuples(st.just(mq.SUBACK), pid, st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1, max_size=4).map(tuple)),
    st.tuples(st.just(mq.PINGRESP)),
)


@st.composite
def long_heads(draw):
    """The start of a packet that may be larger than the buffer, most often a
    PUBLISH with a topic length that may or may not fit inside it, and some
    of its body."""
    rl = draw(st.one_of(st.integers(0, 80), st.integers(0, 400)))
    head = bytearray(8)
    head[0] = draw(st.one_of(st.builds(lambda q, r: 0x30 | q << 1 | r, qos, st.integers(0, 1)),
                             st.sampled_from([0x10, 0x20, 0x40, 0x50, 0x62, 0x70, 0x82, 0x90, 0xa2, 0xb0, 0xd0])))
    n = c.put_length(head, 1, rl)
    # Most often near where the topic and packet id stop fitting inside it.
    tl = draw(st.one_of(st.integers(max(0, rl - 6), rl + 1), st.integers(0, rl + 3), st.integers(0, 65535)))
    rest = max(0, rl - 2)  # all of it, or its start
    return bytes(head[:n]) + bytes((tl >> 8, tl & 255)) + draw(
        st.one_of(st.binary(min_size=rest, max_size=rest), st.binary(max_size=rest)))


pieces = st.one_of(from_broker.map(enc), long_heads(), st.binary(min_size=1, max_size=12))


def hostile_events(stream, size, cuts, by_tail):
    """Feeds stream into a client's Reader in pieces of the sizes in cuts
    (repeated), by broker.feed() or into tail() (end += n) as by_tail says, and calls
    next() until it is done. Returns what came out: packets as tuples, the
    oversize ones as ("too large", length, pid, qos), and the protocol error
    that ended the stream. Fails on any other exception, and when an offset
    leaves the buffer."""
    r = c.Reader(size)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    out = []
    i = k = 0
    for _ in range(4 * len(stream) + 8):
        if i < len(stream):
            n = cuts[k % len(cuts)]
            if by_tail[k % len(by_tail)]:
                room = r.tail()
                n = min(n, len(room), len(stream) - i)
                room[:n] = stream[i:i + n]
                r.end += n
            else:
                n = feed(r, stream[i:i + n])
            i += n
            k += 1
        while True:
            try:
                t = r.next()
                if t == mq.SKIPPED:
                    q = (r.flags >> 1) & 3
                    assert r.type == mq.PUBLISH and r.length > size and (r.pid > 0) == (q > 0), r.length
                    out.append(("too large", r.length, r.pid, q))
                    continue
            except MQTTProtocolError as e:
                out.append(("error", str(e)))
                return out
            finally:
                assert 0 <= r.start <= r.end <= size, (r.start, r.end, size)
                pid_at = getattr(r, "_pid_at", -2)  # inbound.big()'s, set with the first oversize PUBLISH
                assert 0 <= r.skip <= mq.MAX_REMAINING + 5 and pid_at >= -2, (r.skip, pid_at)
            if not t:
                break
            p = current(r)
            # Well-formed: it encodes again, and those bytes decode to it.
            assert decode_all(enc(p)) == [p], p
            out.append(p)
        if i >= len(stream):
            return out
    raise AssertionError("the Reader stopped taking bytes at %d of %d" % (i, len(stream)))


def roomy_events(stream, size):
    """What a Reader of size bytes must report, worked out by one that holds
    the whole stream: its packets, each PUBLISH longer than size as
    ("too large", length, pid, qos), up to the first error or the first other
    packet longer than size. Returns (those, the error that must follow them
    or None)."""
    r = c.Reader(max(len(stream), size) + 8)
    inbound.ready(r)  # it decodes PUBLISH and SUBACK
    feed(r, stream)
    out = []
    while True:
        s = r.start
        try:
            t = r.next()
        except MQTTProtocolError as e:
            return out, ("error", str(e))
        if not t:
            return out, None
        if t == mq.SKIPPED:  # longer than the whole stream
            out.append(("too large", r.length, r.pid, (r.flags >> 1) & 3))
            return out, None
        p = current(r)
        if r.start - s > size:
            if t != mq.PUBLISH:
                return out, ("error", c.why(c._E_TOO_LARGE, t, r.start - s, size))
            p = ("too large", r.start - s, p[6], p[3])
        out.append(p)


def _content(why):
    # What only a Reader that holds a PUBLISH's topic can see (it looks at
    # the topic before the packet id).
    return "UTF-8" in why or "wildcard" in why


@settings(max_examples=1500, deadline=None)  # long streams a byte at a time; the speed is no part of it
@given(st.lists(pieces, min_size=1, max_size=8).map(b"".join), st.sampled_from([16, 32, 64, 256]),
       st.lists(st.integers(1, 70), min_size=1, max_size=6), st.lists(st.booleans(), min_size=1, max_size=3))
def test_hostile_streams_at_any_cut_give_packets_or_protocol_errors(stream, size, cuts, by_tail):
    got = hostile_events(stream, size, cuts, by_tail)
    # Whatever the read sizes, the same packets and the same error: the
    # Reader's state never depends on where a read ended.
    assert got == hostile_events(stream, size, [len(stream)], [False])
    # And what a Reader that holds the whole stream sees: an oversize
    # PUBLISH skipped with its own packet id, the stream kept in step, the
    # same error where it finds one.
    want, last = roomy_events(stream, size)
    assert got[:len(want)] == want
    rest = got[len(want):]
    if last is None:  # at most the start of a packet larger than size is left
        assert rest == [] or len(rest) == 1 and rest[0][0] in ("too large", "error"), rest
    elif rest[:1] != [last]:
        assert rest, last
        if rest[0][0] == "too large" or "message id" in rest[0][1]:
            assert _content(last[1]), (rest[0], last)  # a PUBLISH skipped unread
        else:
            assert "receive buffer" in rest[0][1], (rest[0], last)  # any other type

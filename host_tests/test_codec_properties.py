# Property tests of the wire codec (CPython only: hypothesis does not run on
# MicroPython; the portable byte-vector tests cover that runtime).
from hypothesis import given, settings, strategies as st

from holdfast import codec as c
from holdfast.errors import MQTTProtocolError
from packets import encode, decode_all

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
    return (c.CONNECT, lvl, cid, clean, draw(st.integers(0, 65535)),
            draw(topic) if will else None, draw(st.binary(max_size=40)) if will else None,
            draw(qos) if will else 0, draw(st.booleans()) if will else False, user, pw)


@st.composite
def publishes(draw):
    q = draw(qos)
    return (c.PUBLISH, draw(topic), draw(blob), q, draw(st.booleans()),
            draw(st.booleans()) if q else False, draw(pid) if q else 0)


packets = st.one_of(
    connects(),
    st.tuples(st.just(c.CONNACK), st.booleans(), st.integers(0, 5)),
    publishes(),
    st.tuples(st.sampled_from([c.PUBACK, c.PUBREC, c.PUBREL, c.PUBCOMP, c.UNSUBACK]), pid),
    st.tuples(st.just(c.SUBSCRIBE), pid, st.lists(st.tuples(filter_, qos), min_size=1, max_size=4).map(tuple)),
    st.tuples(st.just(c.SUBACK), pid, st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1, max_size=4).map(tuple)),
    st.tuples(st.just(c.UNSUBSCRIBE), pid, st.lists(filter_, min_size=1, max_size=4).map(tuple)),
    st.tuples(st.sampled_from([c.PINGREQ, c.PINGRESP, c.DISCONNECT])),
)


def lvl_of(p):
    return p[1] if p[0] == c.CONNECT else 4


def enc(p):
    buf = bytearray(2048)
    return bytes(buf[:encode(buf, p)])


@settings(max_examples=600)
@given(packets)
def test_decode_encode_round_trip(p):
    assert decode_all(enc(p), level=lvl_of(p)) == [p]


@settings(max_examples=200)
@given(st.lists(packets.filter(lambda p: p[0] != c.CONNECT), min_size=1, max_size=8), st.integers(1, 7))
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

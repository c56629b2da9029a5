# Packets as plain tuples, so tests can compare what was encoded with what was
# decoded. Test-side helper only; the firmware works on the Reader's fields.
from holdfast import codec as c
from holdfast.broker import feed
import consts as mq
from holdfast import broker, topics

ACKS = (mq.PUBACK, mq.PUBREC, mq.PUBREL, mq.PUBCOMP, mq.UNSUBACK)
EMPTY = (mq.PINGREQ, mq.PINGRESP, mq.DISCONNECT)


def encode(buf, p):
    t = p[0]
    if t == mq.CONNECT:
        _, level, cid, clean, ka, wt, wm, wq, wr, user, pw = p
        will = None if wt is None else (wt, wm if wm is not None else b"", wq, wr)
        return c.connect(buf, cid, clean, ka, will, user, pw, level)
    if t == mq.CONNACK:
        return broker.connack(buf, p[2], p[1])
    if t == mq.PUBLISH:
        _, topic, payload, qos, retain, dup, pid = p
        return c.publish(buf, topic, payload, qos, retain, dup, pid)
    if t in ACKS:
        return c.ack(buf, t, p[1])
    if t == mq.SUBSCRIBE:
        return topics.subscribe(buf, p[1], p[2])
    if t == mq.SUBACK:
        return broker.suback(buf, p[1], p[2])
    if t == mq.UNSUBSCRIBE:
        return topics.unsubscribe(buf, p[1], p[2])
    return c.ack(buf, t, 0)


def _opt(v):
    return None if v is None else bytes(v)


def current(r):
    """The packet the Reader r just returned, as a tuple."""
    t = r.type
    if t == mq.CONNECT:
        return (t, r.level, bytes(r.client_id), r.clean, r.keepalive, _opt(r.will_topic),
                _opt(r.will_msg), r.will_qos, r.will_retain, _opt(r.user), _opt(r.password))
    if t == mq.CONNACK:
        return (t, r.session_present, r.code)
    if t == mq.PUBLISH:
        f = r.flags
        return (t, bytes(r.topic), bytes(r.payload), (f >> 1) & 3, bool(f & 1), bool(f & 8), r.pid)
    if t in ACKS:
        return (t, r.pid)
    if t == mq.SUBSCRIBE:
        return (t, r.pid, tuple((bytes(f), q) for f, q in r.filters()))
    if t == mq.SUBACK:
        return (t, r.pid, tuple(r.payload))
    if t == mq.UNSUBSCRIBE:
        return (t, r.pid, tuple(bytes(f) for f, _ in r.filters()))
    return (t,)


def decode_all(data, size=None, step=None, level=4):
    """Feeds data (step bytes at a time, or as much as fits) and returns every packet.

    The reader's buffer defaults to the size of data, which holds any packet in
    it, and a fixed 4 KB block may find no room in the 64k heap the codec must fit.
    """
    r = broker.BrokerReader(size or max(len(data), 16), level)
    out = []
    i = 0
    while True:
        if i < len(data):
            chunk = data[i:i + step] if step else data[i:]
            i += feed(r, chunk)
        t = r.next()
        while t:  # an oversize PUBLISH passed over: (SKIPPED, its length, its id)
            out.append(current(r) if t != mq.SKIPPED else (t, r.length, r.pid))
            t = r.next()
        if i >= len(data):
            return out


def one(data, **kw):
    ps = decode_all(data, **kw)
    assert len(ps) == 1, ps
    return ps[0]

# Heap bytes allocated per codec operation, measured on the MicroPython unix
# port with gc disabled (run by `make bench`):
#     micropython tools/bench/codec_alloc.py   -> one JSON line
import sys
import gc
import json

sys.path.insert(0, (sys.argv[0].rsplit("/", 1)[0] if "/" in sys.argv[0] else ".") + "/../../firmware")
from holdfast import codec  # noqa: E402
from holdfast import inbound

N = 1000
TOPIC = b"sensors/dev-1/telemetry"
PAYLOAD = b"x" * 64


def per_op(op):
    op()  # warm up: first calls may intern or cache
    gc.collect()
    gc.disable()
    before = gc.mem_alloc()
    for _ in range(N):
        op()
    after = gc.mem_alloc()
    gc.enable()
    return (after - before) / N


buf = bytearray(256)
r = codec.Reader(256)
inbound.ready(r)  # it decodes PUBLISH and SUBACK
puback = bytearray(4)
codec.ack(puback, 4, 7)  # PUBACK
pub = bytearray(128)
pub_len = codec.publish(pub, TOPIC, PAYLOAD, 1, False, False, 9)


def encode_publish():
    codec.publish(buf, TOPIC, PAYLOAD, 1, False, False, 9)


def load_puback():
    r.buf[0:4] = puback
    r.start = 0
    r.end = 4


def decode_puback():
    load_puback()
    r.next()


def load_publish():
    r.buf[0:pub_len] = pub
    r.start = 0
    r.end = pub_len


def decode_publish():
    load_publish()
    r.next()


def one_view():
    r.mv[2:5]


# Putting the bytes back into the Reader is the harness's cost, not the codec's.
view = per_op(one_view)
publish = per_op(decode_publish) - per_op(load_publish)
res = {
    "runtime": sys.implementation.name,
    "encode_publish_qos1": per_op(encode_publish),
    "decode_puback": per_op(decode_puback) - per_op(load_puback),
    "decode_publish_qos1": publish,
    # A decoded PUBLISH hands the caller two memoryviews (topic, payload).
    "decode_publish_beyond_views": publish - 2 * view,
}
print(json.dumps(dict((k, round(v, 1) + 0.0 if isinstance(v, float) else v) for k, v in res.items())))

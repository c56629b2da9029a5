# Hostile bytes from the broker, seen from the blocking client (issue 17,
# group F): a length that runs past its packet, or a packet other than
# PUBLISH larger than the buffer, drops the link with the cause in words and
# the next link starts clean. The byte-level cases are in test_codec_errors.py.
import consts as mq
from fakebroker import wire
from rig import Rig, CONNACK


def _hit(bad, want):
    # After the bad bytes a message the broker sends on the same link must
    # not arrive; the one after the reconnect must.
    after = wire((mq.PUBLISH, b"a", b"after", 1, False, False, 7))
    again = wire((mq.PUBLISH, b"a", b"again", 1, False, False, 8))
    with Rig([CONNACK], [CONNACK + again]) as rig:
        cl = rig.client(size=64, backoff_ms=(100, 1000))
        got = []
        cl.set_callback(lambda t, m: got.append(bytes(m)))
        cl.connect()
        for k in range(0, len(bad), 5):  # a few bytes per read
            rig.socks[0].push(bad[k:k + 5])
        rig.socks[0].push(after)
        for _ in range(len(bad)):
            cl.check_msg()
            if not cl.isconnected():
                break
        assert not cl.isconnected() and rig.socks[0].closed, cl.last_error
        assert want in str(cl.last_error), cl.last_error
        rig.now += 1000  # past the backoff
        for _ in range(3):
            cl.check_msg()
        assert cl.isconnected() and got == [b"again"], got
        assert (mq.PUBACK, 8) in rig.socks[1].take()


def test_oversize_publish_with_its_topic_past_its_end_drops_the_link():
    # Was: skip and start negative, the next packets swallowed, every
    # check_msg() raised IndexError, the link kept.
    _hit(b"\x32\x64\x10\x00" + b"x" * 98, "PUBLISH topic: string length 4096 runs past the packet")


def test_puback_of_256_mb_drops_the_link():
    # Was: "skipped" as oversize, 256 MB of stream thrown away on a live link.
    _hit(b"\x40\xff\xff\xff\x7f", "PUBACK remaining length is 268435455, must be 2")


def test_a_publish_half_skipped_when_the_link_drops_is_forgotten():
    # The link drops while an oversize QoS 1 PUBLISH is being passed over;
    # the next link's CONNACK is its own packet, not the rest of that one.
    big = wire((mq.PUBLISH, b"t" * 50, b"z" * 200, 1, False, False, 5))
    with Rig([CONNACK, big[:30]], [CONNACK]) as rig:  # its packet id not there yet
        cl = rig.client(size=64, backoff_ms=(100, 1000))
        cl.connect()
        cl.check_msg()
        rig.socks[0].eof = True
        cl.check_msg()
        assert not cl.isconnected() and "closed" in str(cl.last_error)
        rig.now += 1000
        for _ in range(3):
            cl.check_msg()
        assert cl.isconnected(), cl.last_error

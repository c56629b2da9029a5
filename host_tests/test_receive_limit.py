"""The receive limit on its own (rx_size): a subscriber takes a 15 KB
message without a 16 KB send buffer or outbox, and a message over the limit
is skipped, acknowledged and counted in the public `oversized` counter.

On the MicroPython unix port with a 96 KB heap, holdfast loaded from .mpy
(as a board runs it; from source it needs 128 KB: README), against the real
mosquitto; and under CPython. views=True on the small heap: bytes copies of
a 15 KB message would take 15 KB more (README's table says what each costs)."""

import os
import subprocess
import sys

import paho.mqtt.client as paho
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "host_tests", "big_receiver.py")


def run(cmd, env, broker):
    p = subprocess.Popen(cmd + [PROGRAM, str(broker.port), "1"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        first = p.stdout.readline()
        assert first.strip() == "subscribed", first + p.stdout.read()
        o = paho.Client(paho.CallbackAPIVersion.VERSION2)
        o.connect(broker.host, broker.port)
        o.loop_start()
        try:
            for topic, fill, n in (("big/a", b"x", 15000), ("big/b", b"y", 20000), ("big/c", b"z", 100)):
                o.publish(topic, b"head" + fill * n + b"tail", qos=1).wait_for_publish(30)
        finally:
            o.disconnect()
            o.loop_stop()
        out = p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, first + out
    return lines[0][7:]


@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
def test_a_large_message_needs_only_the_receive_limit(runtime, mosquitto):
    env = dict(os.environ)
    if runtime == "micropython":
        from runtimes import mpyc
        env["MICROPYPATH"] = os.path.join(mpyc.build(), "firmware") + ":.frozen"
        cmd = [mpyc.micropython_exe(), "-X", "heapsize=96k"]
    else:
        env["PYTHONPATH"] = os.path.join(ROOT, "firmware")
        cmd = [sys.executable]
    # The 15 KB message whole; the 20 KB one skipped and counted in
    # `oversized`, the stream in step for the next one.
    # Send buffer 256 bytes (no message out needed more), outbox 2 KB: the defaults.
    assert run(cmd, env, mosquitto) == "[(15008, True), (108, True)] 1 256 16384 2048"

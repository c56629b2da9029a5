# The subscriber of test_held_ids.py, run as a program under either runtime:
#   python|micropython host_tests/held_scenario.py HOST PORT CLIENT_ID TOPIC N
# The test drives it a step at a time with lines on stdin; it answers on
# stdout (READY, DELIVERED n, then one RESULT line with what it observed).
import sys
import json

from scenario_support import ticks_ms, ticks_diff  # first: firmware/ on sys.path
from holdfast import MQTTClient
from holdfast.memstore import MemoryStore


def say(line):
    sys.stdout.write(line + "\n")
    if hasattr(sys.stdout, "flush"):
        sys.stdout.flush()


def pump(c, until, ms=20000):
    t0 = ticks_ms()
    while not until() and ticks_diff(ticks_ms(), t0) < ms:
        c.wait_msg(20)


def main():
    host, port, cid, topic, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    store = MemoryStore()  # the default table of held ids
    got = []
    c = MQTTClient(cid, host, port, timeout_ms=5000, backoff_ms=(100, 200), outbox=store)
    c.set_callback(lambda t, m: got.append(m.decode()))
    c.connect(clean_session=False)
    c.subscribe(topic, 2)
    say("READY")
    sys.stdin.readline()  # the broker's n messages wait in this socket; the link is black-holed
    pump(c, lambda: len(got) >= n)
    say("DELIVERED %d" % len(got))
    sys.stdin.readline()  # the link was cut; "end" was published after the n
    pump(c, lambda: "end" in got)
    r = {"got": got, "links": c.links, "held_evicted": store.held_evicted,
         "last_error": repr(c.last_error)}
    c.disconnect()
    c.connect(clean_session=True)  # leave no session behind
    c.disconnect()
    say("RESULT " + json.dumps(r))


main()

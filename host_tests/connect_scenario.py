# sockets.dial/sockets.connected against real sockets, under either runtime:
#   python|micropython host_tests/connect_scenario.py PORT  (a free port)
# A listener whose accept queue is full drops new SYNs, as a broker that
# stopped answering does: the connect stays pending and each step must say so
# without waiting. Prints one JSON line; test_net.py asserts.
import json
import socket
import sys

from scenario_support import sleep_ms, ticks_ms, ticks_diff  # first: firmware/ on sys.path
from holdfast import sockets


def listener(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(socket.getaddrinfo("127.0.0.1", port)[0][-1])
    s.listen(0)
    return s


def main():
    r = {}
    port = int(sys.argv[1])
    lst = listener(port)
    fill = []
    for _ in range(8):  # more than the accept queue holds
        f = socket.socket()
        f.setblocking(False)
        try:
            f.connect(socket.getaddrinfo("127.0.0.1", port)[0][-1])
        except OSError:
            pass
        fill.append(f)
    sleep_ms(200)
    # A connect waited for (ms > 0) that the full queue never takes: the wait
    # runs out and Unreachable says so, ETIMEDOUT in args[0].
    t = sockets.dial("127.0.0.1", port)
    try:
        sockets.connected(t, "127.0.0.1", port, 100)
        r["timeout"] = None
    except OSError as e:
        r["timeout"] = [e.__class__.__name__] + list(e.args)
    d = sockets.dial("127.0.0.1", port)
    r["pending_steps"] = sum(1 for _ in range(20) if sockets.connected(d, "127.0.0.1", port, 0) is None)
    # Take the queued connections: the kernel re-sends our SYN (after about
    # 1 s, then 3 s) and the connect completes.
    lst.setblocking(False)
    t0 = ticks_ms()
    sock = None
    while sock is None and ticks_diff(ticks_ms(), t0) < 20000:
        try:
            while True:
                lst.accept()[0].close()
        except OSError:
            pass
        sock = sockets.connected(d, "127.0.0.1", port, 0)
        sleep_ms(20)
    r["connected"] = sock is not None
    if sock is not None:
        sock.close()
    for f in fill:
        f.close()
    lst.close()
    # A port nobody listens on: refused, as an OSError from dial() or from
    # a step, never a hang.
    try:
        d = sockets.dial("127.0.0.1", port)
        t0 = ticks_ms()
        while sockets.connected(d, "127.0.0.1", port, 0) is None and ticks_diff(ticks_ms(), t0) < 5000:
            sleep_ms(10)
        r["refused"] = None
    except OSError as e:
        r["refused"] = e.args[0]
    print("RESULT " + json.dumps(r))


main()

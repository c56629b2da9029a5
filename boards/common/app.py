# The sensor application shared by every board: read the sensor, publish one
# compact JSON reading per interval (docs/telemetry.md) through holdfast with
# the outbox on flash, take commands on <prefix>/<device>/cmd, and keep going
# through Wi-Fi loss, broker loss, bad configuration and bad commands. Board
# specifics (network, LED, watchdog, id, sensor) come from the board module
# main.py passes in; see docs/boards.md.
import gc
import os
import sys
import time

try:
    from micropython import const
except ImportError:  # CPython (host tests)
    def const(x):  # type: ignore
        return x

HOLD = "hf_hold"  # written by tools/board/deploy.py: skip the app for one boot
DRAIN = "hf_drain"  # written by the fleet tool: stop taking readings, deliver the rest
_RESERVE = const(100)  # state write every this many readings (QoS 0 / wiped outbox)
_BUF = const(320)  # client tx and rx buffers: a reading's PUBLISH is ~150 bytes
_CMDS = const(4)  # commands kept between two turns of the main loop

try:
    from time import ticks_ms, ticks_diff, ticks_add, sleep_ms
except ImportError:  # CPython, for the type checker and host tools
    from holdfast.compat import ticks_ms, ticks_diff, ticks_add  # type: ignore

    def sleep_ms(ms):  # type: ignore
        time.sleep(ms / 1000)


def log(*a):
    print("holdfast:", *a)


def _exists(p):
    try:
        os.stat(p)
        return True
    except OSError:
        return False


if False:  # the type checker's import (typing is not on the boards)
    from holdfast.durable import FileStore

# -- boot counter and sequence numbers ------------------------------------------
class Seq:
    """Boot counter and per-device sequence numbers that never repeat.

    QoS 1/2: s = outbox key + base. The outbox gives every stored message the
    next key and makes it durable in the same write as the record, so the
    sequence number is persisted with the reading itself, at no extra flash
    write: no gap and no repeat, whatever the moment of a power cut (a torn
    record is dropped on boot and its key, with its s, is used again).
    QoS 0: s counts in RAM; every _RESERVE readings the state file reserves
    the next block, and a boot starts after the reserved block (QoS 0 may lose
    anyway: the skipped numbers read as lost).
    The state file (written once per boot, then every _RESERVE readings) keeps
    b, base, the reserve and the outbox's last key, replaced atomically
    (write, then rename). A wiped outbox (keys went back) continues after the
    reserve: a gap, never a repeat.

    appboot.seq() makes it from the state file at path (store, path, keyed:
    QoS 1/2, boot, base, next, hi) and writes this boot's state. No
    __init__: what runs once per boot is appboot's, which leaves the heap.
    """

    # For the type checker only: annotations without a value make nothing.
    store: "FileStore"
    path: str
    keyed: bool
    boot: int
    base: int
    next: int
    hi: int

    def _save(self, hi):
        self.hi = hi
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write('{"b":%d,"base":%d,"hi":%d,"k":%d,"keyed":%s}' % (
                self.boot, self.base, hi, self.store.tail - 1, "true" if self.keyed else "false"))
        os.rename(tmp, self.path)

    def take(self):
        """The s for the next reading (not yet consumed)."""
        if self.keyed:
            self.next = self.store.tail + self.base
        if self.next >= self.hi:
            self._save(self.next + _RESERVE)
        return self.next

    def used(self, s, stored):
        """The reading with s was published; stored: it went to the outbox."""
        if self.keyed and stored:
            k = self.store.tail - 1
            if k + self.base != s:  # a backend that numbers differently: follow it
                self.base = s - k
                self._save(self.hi)
        self.next = s + 1


# -- commands ---------------------------------------------------------------------
_cmds = []  # type: list  # commands received, not yet applied
_own = [None, None]  # type: list  # this device's command topic (bytes) and the client, set by main


def on_cmd(t, m):
    # The client's callback, run inside its calls: it only notes the
    # command. A callback, not a handler of the subscription: the broker's
    # kept session may deliver commands sent while the board was off before
    # the app subscribes again. Only a command on the device's own topic
    # counts (the broker's ACL says who may publish there), and never a
    # retained one, which would come back at every boot: 0 marks the others.
    if t != _own[0] or _own[1].retained:
        m = 0
    if len(_cmds) < _CMDS:
        _cmds.append(m)
    else:
        _cmds[-1] = None  # appcmd.take_commands says some were ignored


# -- the application -------------------------------------------------------------
def unload(m):
    """Drops module m, loaded for one job (the boot, a command). Its globals
    are emptied too: a stale pointer to the module that the conservative GC
    finds on the stack kept all of appconfig's code (5 KB) alive."""
    del sys.modules[m.__name__]
    m.__dict__.clear()


# Some ports count time from 2000, the contract's "w" from 1970.
_EPOCH = 946684800 if time.gmtime(0)[0] == 2000 else 0


def _payload(dev, b, s, q, t, u):
    w = ""
    if time.time() + _EPOCH > 1600000000:  # the board knows the date (NTP, or the host's)
        w = ',"w":%d' % (time.time_ns() // 1000000 + _EPOCH * 1000)
    return '{"d":"%s","b":%d,"s":%d,"q":%d,"t":%s,"u":%d%s}' % (
        dev, b, s, q, "null" if t is None else "%.2f" % t, u, w)


def main(board):
    if _exists(HOLD):
        os.remove(HOLD)
        log("hold file found: app not started this boot (deploy in progress)")
        return
    import appboot  # the code that runs once per boot, dropped once it has run

    # What appboot needs of this module comes as arguments: it imports
    # nothing from here, so the import goes one way.
    cfg, wdt, client, seq, read, dev, topic, cmd = appboot.start(board, Seq, unload, on_cmd, _BUF)
    _own[0] = cmd and cmd.encode()
    _own[1] = client
    unload(appboot)
    del appboot
    # Now, before the loop: what the boot left is freed before the subscribe
    # side and the first messages load code among it (75 KB heap, not 77;
    # with the collect before subscribe() below, 73).
    gc.collect()
    from holdfast import MQTTError, OutboxFull

    qos = cfg["qos"]
    expiry = cfg["expiry_s"]
    interval = cfg["interval_ms"]
    due = ticks_ms()
    started = False  # the first connect() succeeded: from then on the client reconnects itself
    retry_at = due
    delay = 1000
    online = False
    full = 0
    blink = False
    drained = False
    big = 0  # inbound messages the client dropped as too large
    while True:
        wdt.feed()
        now = ticks_ms()
        net = board.network(cfg)
        if not started and net and ticks_diff(now, retry_at) >= 0:
            try:
                client.connect(cfg["clean_session"])
                started = True
            except (OSError, MQTTError) as e:
                log("broker:", e)
                delay = min(delay * 2, 60000)
                retry_at = ticks_add(ticks_ms(), delay)
        if cmd and started and client.isconnected():
            # Once: connected, the request is queued whatever comes of it,
            # and the client sends it again on every later link that needs
            # it (after a timeout too); refused (the broker's ACL), it is
            # gone until the next boot.
            gc.collect()  # the connect's garbage goes before the subscribe side loads its code
            try:
                client.subscribe(cmd, 1)
                log("commands on", cmd)
            except (OSError, MQTTError) as e:
                log("commands:", e)
            cmd = None
        if _cmds:
            gc.collect()  # room for its code: the path that received them left garbage
            import appcmd  # loaded for the commands, then unloaded

            v = appcmd.take_commands(_cmds, interval, cfg["command_min_ms"])
            unload(appcmd)
            del appcmd
            due = ticks_add(due, v - interval)  # the next reading v after the last
            interval = v
        if client.session.dropped != big:
            big = client.session.dropped
            log("command: over %d bytes with its topic, dropped by the client" % _BUF)
        if ticks_diff(now, due) >= 0 and _exists(DRAIN):
            due = ticks_add(now, interval)
            if not drained and started and client.isconnected() and not client.pending():
                drained = True
                log("drained, last s=%d" % (seq.next - 1))
        if ticks_diff(now, due) >= 0:
            due = ticks_add(due, interval)
            if ticks_diff(now, due) > 0:  # far behind (a long stall): start afresh
                due = ticks_add(now, interval)
            try:
                t = read()
            except Exception as e:  # noqa: a sensor that failed gives null
                t = None
                log("sensor:", e)
            s = seq.take()
            try:
                client.publish(topic, _payload(dev, seq.boot, s, qos, t, now), False, qos, expiry)
                seq.used(s, qos > 0)
                if full:
                    log("outbox has room again after %d dropped readings" % full)
                    full = 0
            except (OutboxFull, OSError) as e:  # OSError: the flash itself (full, worn)
                if not full:
                    log(e, "- new readings are dropped until the outbox drains")
                full += 1  # s not consumed: no gap in the sequence
            gc.collect()
        if online != client.isconnected():
            online = not online
            log("broker connected" if online else "broker lost: %s" % client.last_error)
        board.led(online or blink)
        blink = not blink
        left = ticks_diff(due, ticks_ms())
        if started:
            client.wait_msg(max(0, min(left, 500)))
        elif left > 0:
            sleep_ms(min(left, 500))

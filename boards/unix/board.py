# The emulated board (MicroPython unix port under tools/board/emulator.py): what
# differs from a real board. The host's network is always up, there is no LED
# and no hardware watchdog, and the sensor is simulated.
import os
import time
from time import ticks_ms, ticks_diff

NAME = "unix"


def unique_id():
    """HOLDFAST_UID (set by the emulator's --uid), else the flash file
    unique_id (made once by the emulator, like a chip's factory id)."""
    uid = os.getenv("HOLDFAST_UID")
    if uid:
        return uid
    try:
        with open("unique_id") as f:
            return f.read().strip()
    except OSError:
        from binascii import hexlify
        uid = hexlify(os.urandom(8)).decode()
        with open("unique_id", "w") as f:
            f.write(uid)
        return uid


def init(cfg):
    pass  # nothing to set up


# No LED, and no I2C bus (a driver module gets None): one function does for all three.
led = i2c = init


def network(cfg):
    return True


class watchdog:
    """board.watchdog(ms): no hardware to reset the process, so a starved
    watchdog is reported instead (the fleet tool kills and restarts a board
    that hangs). A class, not a function making one: one object less."""

    def __init__(self, ms):
        self.ms = ms
        self.at = ticks_ms()

    def feed(self):
        now = ticks_ms()
        if ticks_diff(now, self.at) > self.ms:
            print("holdfast: watchdog starved for %d ms: a board would reset" % ticks_diff(now, self.at))
        self.at = now


def temperature():
    """Simulated: a slow 20..26 C sawtooth. The flash file sensor_fail makes
    it fail (the reading then carries t=null)."""
    try:
        os.stat("sensor_fail")
    except OSError:
        return 20.0 + int(time.time()) % 60 / 10
    raise OSError("simulated sensor failure (flash file sensor_fail)")

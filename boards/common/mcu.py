# What the microcontroller boards (esp32, rp2040) do the same way through
# machine: the chip's unique id, the status LED on a pin that config "led"
# moves or removes, and the I2C bus of config "i2c". A board's board.py names
# its LED pin and takes the rest from here.
import machine

_led = None  # type: machine.Pin | None


def unique_id():
    from binascii import hexlify
    return hexlify(machine.unique_id()).decode()


def led_pin(p):
    """The status LED on pin p (a name or a number); None: no LED."""
    global _led
    _led = None if p is None else machine.Pin(p, machine.Pin.OUT)


def init(cfg):
    if "led" in cfg:
        led_pin(cfg["led"])


def led(on):
    if _led is not None:
        _led.value(1 if on else 0)


def i2c(cfg):
    return machine.I2C(cfg.get("bus", 0), scl=machine.Pin(cfg["scl"]), sda=machine.Pin(cfg["sda"]),
                       freq=cfg.get("freq", 100000))

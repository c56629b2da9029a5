# ESP32 (any variant with Wi-Fi): what differs from the other boards.
import esp32
import machine
import wifi

NAME = "esp32"
_led = machine.Pin(2, machine.Pin.OUT)  # type: machine.Pin | None  # most DevKit boards; config "led" overrides


def unique_id():
    from binascii import hexlify
    return hexlify(machine.unique_id()).decode()


def init(cfg):
    global _led
    if "led" in cfg:
        p = cfg["led"]
        _led = None if p is None else machine.Pin(p, machine.Pin.OUT)


def led(on):
    if _led is not None:
        _led.value(1 if on else 0)


network = wifi.up


def watchdog(ms):
    return machine.WDT(timeout=ms)


def temperature():
    """The chip's own sensor: mcu_temperature() (S2, S3, C3, C6), else the
    classic ESP32's raw_temperature() in Fahrenheit (uncalibrated: a few
    degrees off, and often 128 F when the radio is off)."""
    if hasattr(esp32, "mcu_temperature"):
        return esp32.mcu_temperature()
    return (esp32.raw_temperature() - 32) / 1.8


def i2c(cfg):
    return machine.I2C(cfg.get("bus", 0), scl=machine.Pin(cfg["scl"]), sda=machine.Pin(cfg["sda"]),
                       freq=cfg.get("freq", 100000))

# ESP32 (any variant with Wi-Fi): what differs from the other boards.
import esp32
import machine
import mcu
import wifi
from mcu import unique_id, init, led, i2c  # noqa: F401 (the board interface app.py calls)

NAME = "esp32"
mcu.led_pin(2)  # most DevKit boards; config "led" overrides

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

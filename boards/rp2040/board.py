# Raspberry Pi Pico W (RP2040 + CYW43 Wi-Fi): what differs from the other boards.
import machine
import mcu
import wifi
from mcu import unique_id, led, i2c  # noqa: F401 (the board interface app.py calls)

NAME = "rp2040"
mcu.led_pin("LED")  # on the CYW43; config "led" overrides
_adc = machine.ADC(4)  # the RP2040's internal temperature sensor


def init(cfg):
    cfg["wdt_ms"] = min(cfg["wdt_ms"], 8388)  # the RP2040 watchdog's longest
    mcu.init(cfg)


network = wifi.up


def watchdog(ms):
    return machine.WDT(timeout=min(ms, 8388))


def temperature():
    """Internal sensor on ADC 4 (datasheet 4.9.5): 27 C at 0.706 V,
    -1.721 mV per degree; about +-2 C unless calibrated."""
    v = _adc.read_u16() * 3.3 / 65535
    return 27 - (v - 0.706) / 0.001721

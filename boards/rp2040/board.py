# Raspberry Pi Pico W (RP2040 + CYW43 Wi-Fi): what differs from the other boards.
import machine
import wifi

NAME = "rp2040"
_led = machine.Pin("LED", machine.Pin.OUT)  # type: machine.Pin | None  # on the CYW43; config "led" overrides
_adc = machine.ADC(4)  # the RP2040's internal temperature sensor


def unique_id():
    from binascii import hexlify
    return hexlify(machine.unique_id()).decode()


def init(cfg):
    global _led
    cfg["wdt_ms"] = min(cfg["wdt_ms"], 8388)  # the RP2040 watchdog's longest
    if "led" in cfg:
        p = cfg["led"]
        _led = None if p is None else machine.Pin(p, machine.Pin.OUT)


def led(on):
    if _led is not None:
        _led.value(1 if on else 0)


network = wifi.up


def watchdog(ms):
    return machine.WDT(timeout=min(ms, 8388))


def temperature():
    """Internal sensor on ADC 4 (datasheet 4.9.5): 27 C at 0.706 V,
    -1.721 mV per degree; about +-2 C unless calibrated."""
    v = _adc.read_u16() * 3.3 / 65535
    return 27 - (v - 0.706) / 0.001721


def i2c(cfg):
    return machine.I2C(cfg.get("bus", 0), scl=machine.Pin(cfg["scl"]), sda=machine.Pin(cfg["sda"]),
                       freq=cfg.get("freq", 100000))

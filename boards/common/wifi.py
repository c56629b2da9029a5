# Wi-Fi station bring-up shared by the boards that have it (esp32, rp2040).
# Never blocks: the app calls up() every loop and keeps queueing readings into
# the outbox while the association is retried with backoff.
import network
from time import ticks_ms, ticks_diff, ticks_add

_wlan = None
_at = ticks_ms()
_delay = 0
_up = False
_ntp = False


def up(cfg):
    """True while the station has an address. Starts the association, and
    starts it again every 10 s doubling to 5 min while it does not come up."""
    global _wlan, _at, _delay, _up, _ntp
    w = cfg["wifi"]
    if not w:  # no "wifi" section: the network is brought up elsewhere
        return True
    if _wlan is None:
        if w.get("country"):
            network.country(w["country"])
        _wlan = network.WLAN(network.STA_IF)
        _wlan.active(True)
    if _wlan.isconnected():
        if not _up:
            _up = True
            _delay = 0
            print("holdfast: wifi up,", _wlan.ifconfig()[0])
            if not _ntp and cfg.get("ntp", True):
                _ntp = True
                try:  # the date gives readings their "w" (wall clock)
                    import ntptime
                    ntptime.settime()
                except Exception as e:
                    print("holdfast: ntp:", e)
        return True
    if _up:
        _up = False
        print("holdfast: wifi lost")
    now = ticks_ms()
    if ticks_diff(now, _at) >= 0:
        _delay = min(_delay * 2, 300000) if _delay else 10000
        _at = ticks_add(now, _delay)
        try:
            _wlan.disconnect()
        except OSError:
            pass
        _wlan.connect(w["ssid"], w.get("password", ""))
    return False

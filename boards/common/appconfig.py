# config.json on the board: read and checked at boot (app.main), then this
# module is unloaded again. tools/board/deploy.py checks a config on the host
# with the same rules. Error messages name the key, never its value.
import json

from appcmd import check_interval  # the rule a command's interval_ms follows too

try:
    from time import ticks_ms, ticks_diff, sleep_ms
except ImportError:  # CPython (tools/board/deploy.py)
    import time
    from holdfast.compat import ticks_ms, ticks_diff  # type: ignore

    def sleep_ms(ms):  # type: ignore
        time.sleep(ms / 1000)

CONFIG = "config.json"
_RETRY_MS = 30000


class ConfigError(Exception):
    pass


# -- configuration -------------------------------------------------------------
# key: (type, default); default None means required. Values are never printed.
_KEYS = {  # type: dict
    "broker": (str, None),
    "port": (int, 0),
    "tls": (bool, False),
    "ca": (str, ""),  # file on the board with the broker's CA (PEM or DER)
    "user": (str, ""),
    "password": (str, ""),
    "credentials_in_clear": (bool, False),  # accept user/password without tls (docs/security.md)
    "prefix": (str, "holdfast"),
    "interval_ms": (int, 10000),  # a command may change it until the next boot (docs/boards.md)
    "commands": (bool, True),  # take commands on <prefix>/<device>/cmd
    "command_min_ms": (int, 1000),  # the shortest interval_ms a command may set
    "qos": (int, 1),
    "keepalive": (int, 60),
    "clean_session": (bool, False),
    "outbox_dir": (str, "/outbox"),
    "outbox_slots": (int, 128),  # readings the outbox holds unacknowledged (17 bytes of RAM each)
    "outbox_group": (int, 1),  # commit the outbox every N readings (a power cut loses up to N-1)
    "when_full": (str, "refuse"),  # outbox full: "refuse" new readings or "drop_oldest"
    "expiry_s": (int, 0),  # readings still unsent after this many seconds are dropped (0: never)
    "wdt_ms": (int, 30000),
    "device": (str, ""),  # overrides <board>-<unique id>
    "wifi": (dict, {}),  # {"ssid": ..., "password": ..., "country": "DE"}
    "i2c": (dict, {}),  # {"bus": 0, "scl": 22, "sda": 21, "freq": 100000, "driver": "module"}
    "ntp": (bool, True),  # set the clock after Wi-Fi comes up (readings get "w")
    "led": (object, None),  # pin name or number; null: no LED; absent: board default
}


def load(name=CONFIG):
    """The validated config as a dict; ConfigError names what is wrong."""
    try:
        with open(name) as f:
            raw = json.load(f)
    except OSError:
        raise ConfigError("no %s on the board (deploy one: make deploy CONFIG=file)" % name)
    except ValueError:
        raise ConfigError("%s is not valid JSON" % name)
    if not isinstance(raw, dict):
        raise ConfigError("%s must hold one JSON object" % name)
    cfg = {}
    for k in _KEYS:
        typ, default = _KEYS[k]
        if k not in raw:
            if default is None:
                if typ is object:
                    continue  # absent: the board's default
                raise ConfigError("%s: %r is required" % (name, k))
            cfg[k] = default
            continue
        v = raw[k]
        if typ is not object and (not isinstance(v, typ) or (typ is int and isinstance(v, bool))):
            raise ConfigError("%s: %r must be of type %s" % (name, k, typ.__name__))
        cfg[k] = v
    for k in raw:
        if k not in _KEYS:
            raise ConfigError("%s: unknown key %r" % (name, k))
    if not cfg["broker"] or cfg["broker"].startswith("<"):
        raise ConfigError("%s: 'broker' is not set (still the template?)" % name)
    if cfg["qos"] not in (0, 1, 2):
        raise ConfigError("%s: 'qos' must be 0, 1 or 2" % name)
    if cfg["when_full"] not in ("refuse", "drop_oldest"):
        raise ConfigError("%s: 'when_full' must be \"refuse\" or \"drop_oldest\"" % name)
    if cfg["outbox_group"] < 1 or cfg["expiry_s"] < 0:
        raise ConfigError("%s: 'outbox_group' must be at least 1 and 'expiry_s' not negative" % name)
    try:
        check_interval(cfg["interval_ms"])
    except ValueError as e:
        raise ConfigError("%s: %s" % (name, e))
    if cfg["command_min_ms"] < 10:
        raise ConfigError("%s: 'command_min_ms' must be at least 10" % name)
    # They make the topics: a wildcard would be refused by publish(), a "/"
    # in the device would add a topic level the collector does not expect.
    if "+" in cfg["prefix"] or "#" in cfg["prefix"]:
        raise ConfigError("%s: 'prefix' must not contain '+' or '#' (MQTT wildcards)" % name)
    if "+" in cfg["device"] or "#" in cfg["device"] or "/" in cfg["device"]:
        raise ConfigError("%s: 'device' must not contain '+', '#' or '/' (it is one topic level)" % name)
    if cfg["password"] and not cfg["user"]:
        raise ConfigError("%s: 'password' needs a 'user'" % name)
    if cfg["user"] and not cfg["tls"] and not cfg["credentials_in_clear"]:
        # Without TLS anyone on the path reads them: refused unless said.
        raise ConfigError("%s: 'user' and 'password' without 'tls' go over the network in "
                          "clear: set \"tls\": true (and \"ca\"), or "
                          "\"credentials_in_clear\": true to accept it" % name)
    if cfg["tls"] and not cfg["ca"]:
        # Without a CA the broker cannot be verified, and verification is never off.
        raise ConfigError("%s: 'tls' needs 'ca', the broker's CA certificate file on the board "
                          "(see docs/security.md)" % name)
    w = cfg["wifi"]
    if w and (not isinstance(w.get("ssid"), str) or w["ssid"].startswith("<")):
        raise ConfigError("%s: 'wifi' needs an 'ssid' (still the template?)" % name)
    return cfg


def wait(board):
    """The checked config. Until there is one: the reason on the console and
    a blinking LED, the file read again every 30 s. Never a boot loop: no
    watchdog is armed yet, and nothing stored is touched."""
    while True:
        try:
            return load(CONFIG)
        except ConfigError as e:
            print("holdfast: config:", e, "- the app waits and reads it again in 30 s")
        t = ticks_ms()
        while ticks_diff(ticks_ms(), t) < _RETRY_MS:
            board.led(True)
            sleep_ms(100)
            board.led(False)
            sleep_ms(900)

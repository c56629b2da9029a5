# The app's commands (docs/boards.md): what the callback (app.on_cmd) noted,
# checked and applied, and the rule for interval_ms that config.json follows
# too (appconfig). Commands are rare: app.main loads this module when
# one has come and unloads it once they are applied, so its code does not
# stay on the heap. It imports nothing from app: take_commands() is handed
# the list, and prints with app.log's prefix, as appconfig does.
import json

try:
    from micropython import const
except ImportError:  # CPython (host tests, tools/board/deploy.py)
    def const(x):  # type: ignore
        return x

# The millisecond ticks wrap at 2**30 and are compared within half of that:
# a longer interval would read as already due.
_MAX_INTERVAL = const(518400000)  # 6 days
# A command comes over the network: by default it may not make the board
# take a reading more than once a second (at 10 ms a publisher filled the
# flash outbox with 500 readings in 5 s); config.json's command_min_ms,
# the owner's, says otherwise.
_CMD_MIN = const(1000)


def check_interval(v, lo=10):
    """v if it is a valid interval_ms (config.json's, or a command's with
    lo=_CMD_MIN), else ValueError naming the key."""
    if not isinstance(v, int) or not lo <= v <= _MAX_INTERVAL:  # true, false: below 10
        raise ValueError("'interval_ms' must be an int of at least %d and at most %d (6 days)"
                         % (lo, _MAX_INTERVAL))
    return v


def command(m, lo=_CMD_MIN):
    """The reading interval command m (the message's bytes) sets, at least
    lo, or ValueError saying what is wrong with it."""
    try:
        c = json.loads(m)
    except ValueError:  # UnicodeError too; MicroPython's own words say no more
        raise ValueError("not JSON")
    if not isinstance(c, dict):
        raise ValueError('not a JSON object such as {"interval_ms": 60000}')
    for k in c:
        if k != "interval_ms":
            raise ValueError("unknown key %r" % k)
    if not c:
        raise ValueError("no 'interval_ms' in it")
    return check_interval(c["interval_ms"], lo)


def take_commands(_cmds, interval, lo=_CMD_MIN):
    """The reading interval after the commands received since the last
    call (_cmds: app._cmds, emptied), each applied or, if bad, named on the
    console; lo: config.json's command_min_ms."""
    while _cmds:
        try:
            m = _cmds.pop(0)
            if m is None:
                raise ValueError("too many at once, some ignored")
            if m == 0:
                raise ValueError("not on this device's command topic, or retained: ignored")
            interval = command(m, lo)
            print("holdfast: command: interval_ms %d from the next reading on" % interval)
        except ValueError as e:
            print("holdfast: command:", e)
    return interval

# The app's commands (docs/boards.md): what the callback (app.on_cmd) noted,
# checked and applied. Commands are rare: app.main loads this module when
# one has come and unloads it once they are applied, so its code does not
# stay on the heap.
import json

from app import _cmds, check_interval, log


def command(m):
    """The reading interval command m (the message's bytes) sets, or
    ValueError saying what is wrong with it."""
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
    return check_interval(c["interval_ms"])


def take_commands(interval):
    """The reading interval after the commands received since the last
    call, each applied or, if bad, named on the console."""
    while _cmds:
        try:
            m = _cmds.pop(0)
            if m is None:
                raise ValueError("too many at once, some ignored")
            interval = command(m)
            log("command: interval_ms %d from the next reading on" % interval)
        except ValueError as e:
            log("command:", e)
    return interval

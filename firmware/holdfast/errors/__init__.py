# Every failure a user can hit has a name and its cause in words.
#
# Two families, as in umqtt: what the broker or the client said about MQTT
# (refused, malformed, outbox full, TLS set-up) derives from MQTTError;
# a lost or unreachable link is an OSError (LinkDown, MQTTTimeout,
# Unreachable, and the socket's own), so a umqtt.robust-style loop that
# catches OSError to reconnect keeps working. No class can be both:
# MicroPython refuses a class with OSError and another exception class as
# bases ("multiple bases have instance lay-out conflict"). Everything:
# except (OSError, MQTTError).
#
# This package is a face: only the base of the MQTT family (base.py) is
# loaded with it; each other class loads, with its module, the first time it
# is raised or caught (`from holdfast.errors import LinkDown`,
# `holdfast.errors.LinkDown` and `holdfast.LinkDown` give the one class).
# An exception class costs about 230 bytes of heap on a board, more with an
# __init__: a client that connects and publishes without a failure carries
# none of them.
from .base import MQTTError, MQTTException

# Where each class lives is where.py's table, loaded with the first lookup:
# a table of eleven names here would cost every board about 0.5 KB of heap
# for a failure it may never meet.


def __getattr__(name):
    if not name[:1].isupper():  # only class names: CPython's import asks for others
        raise AttributeError(name)
    from .where import WHERE
    m = WHERE.get(name)
    if m is None:
        raise AttributeError(name)
    v = globals()[name] = getattr(__import__(m, globals(), None, (name,), 1), name)
    return v

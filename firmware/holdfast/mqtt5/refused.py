# A QoS 1/2 message the broker refused (MQTT 5), loaded with the first: the
# shell's REJECTED event.
from ..errors import MQTTError
from .wire import _words
from .session import said

_E_REJECTED = const(31)


def rejected(f):
    """Shell f's message the broker refused (a PUBACK or PUBREC with a
    reason code of 0x80 or more, or PUBCOMP's 0x92): counted in
    f.rejected, said in f.last_error, and handed to f.on_rejected(pid,
    code) if the application set one."""
    from .reasons import words
    s = f.session
    r = s.rx
    f.rejected += 1
    f.last_error = MQTTError(_words(_E_REJECTED, (s.done_pid, words(r.code), said(r))))
    cb = getattr(f, "on_rejected", None)
    if cb:
        cb(s.done_pid, r.code)

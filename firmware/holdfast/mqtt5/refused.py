# What the broker refused or closed, in words (MQTT 5), loaded with the
# first: a QoS 1/2 message it refused (the shell's REJECTED event), a
# refused connection, a DISCONNECT it sent.
from ..errors import MQTTError
from .wire import get

_REASON_STRING = const(0x1F)
_E_REJECTED = const(31)


def said(n, r, type=0, *args):
    """Error n in words (reasons.py): args, then reader r's reason code
    (in a packet of type) and its Reason String, if it has one."""
    from .reasons import text, words
    why = get(r.buf, _REASON_STRING, None, r.p0, r.p1)
    return text(n, args + (words(r.code, type), ": " + why.decode() if why else ""))


def rejected(f):
    """Shell f's message the broker refused (a PUBACK or PUBREC with a
    reason code of 0x80 or more, or PUBCOMP's 0x92): counted in
    f.rejected, said in f.last_error, and handed to f.on_rejected(pid,
    code) if the application set one."""
    s = f.session
    r = s.rx
    f.rejected += 1
    f.last_error = MQTTError(said(_E_REJECTED, r, 0, s.done_pid))
    cb = getattr(f, "on_rejected", None)
    if cb:
        cb(s.done_pid, r.code)

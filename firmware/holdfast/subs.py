# The subscribe side of a session: the filters the application asked for
# and their SUBSCRIBE/UNSUBSCRIBE requests, keyed by packet id; the matching
# of inbound topics against them; request(), the session's subscribe verb,
# and the clients' subscribe() around their wait (ask, answer). Loaded on
# the first subscribe(): a sensor that only publishes never carries it.
from array import array
from .compat import const
from . import codec, filters

_OUT = const(4)  # SUBSCRIBE/UNSUBSCRIBE packets awaiting their ack at once
_ACK_ROOM = const(16)  # send buffer bytes left for acknowledgements (session.ACK_ROOM)
_UNSUBACK = const(11)  # packet type (codec.py)
_REFUSED = const(3)  # what session.receive() returns for filters refused on a restore
_SUBACK_FAILURE = const(0x80)

# A request's entry: [filter, qos, handler, pid, answer]; an UNSUBSCRIBE's
# has qos -1 and no handler.
_PID = const(3)  # 0: to be sent; >0: awaits its ack; -1: granted on this session
_GRANTED = const(4)  # the last SUBACK code (0 for an UNSUBACK); -1 before the first

# Error reasons (reasons.py has the words).
_E_NO_UNSUBACK = const(48)
_E_RESTORE_REFUSED = const(53)
_E_SUB_REFUSED = const(54)
_E_NO_SUBACK = const(55)
_E_SUBACK_COUNT = const(62)
_E_ACK_TYPE = const(63)


def match(f, t):
    """True if topic t matches topic filter f (both bytes-like, no allocation)."""
    nf = len(f)
    nt = len(t)
    if nt and t[0] == 36 and nf and (f[0] == 43 or f[0] == 35):
        return False  # '$' topics are not matched by a leading wildcard
    i = j = 0
    while i < nf:
        ch = f[i]
        if ch == 35:
            return True
        if ch == 43:
            while j < nt and t[j] != 47:
                j += 1
            i += 1
            continue
        if j >= nt:  # "a/#" also matches its parent "a"
            return i + 2 == nf and ch == 47 and f[i + 1] == 35
        if ch != t[j]:
            return False
        i += 1
        j += 1
    return j == nt


def request(s, flt, qos, handler=None):
    """Session s's verb for the subscribe side: registers filter flt (with
    handler(topic, msg, retained) for the messages it matches, from now on)
    and queues its SUBSCRIBE; with qos None forgets it (its handler gets
    nothing more) and queues its UNSUBSCRIBE. Queued now or once there is
    room. Returns its entry in s.subs, [filter, qos, handler, pid, answer]:
    answer is set by the SUBACK (0x80: refused, and the filter is gone) or
    is 0 once the UNSUBACK came (or a new session made it moot). ValueError
    if it can never fit the send buffer, or for a bad filter or QoS: checked
    before anything is registered."""
    if s.subs is None:
        s.subs = Subs()
    s.fits((8 if qos is None else 10) + len(flt))  # MQTT 5 subscribes with one byte more
    if qos is not None:  # None, not -1: a QoS of -1 is refused, not taken for an unsubscribe
        codec._check_qos(qos & 3 if s.v5 else qos)
    filters.check_filter(flt, 0, len(flt))
    if qos is None:
        e = s.subs.remove(flt)
    else:
        e = s.subs.add(flt, qos, handler)
        s._rx_full()
    s._fill(s.last_tx)
    return e


# -- a client's part (front.Front c): subscribe() and unsubscribe() are
# ask(), the shell's wait for the entry's answer, answer().

def ask(c, flt, qos, handler, opts):
    """Client c's SUBSCRIBE (qos None: UNSUBSCRIBE) queued; its entry.
    opts: MQTT 5's subscription options, in the QoS the entry keeps
    (v5more.sub_options)."""
    c._idle()
    c._need_link()
    flt = codec.to_bytes(flt)
    if opts:
        v5 = c.session.v5
        if not v5:
            from .v5words import text
            raise ValueError(text(35, ()))
        qos = v5.more().sub_options(qos, **opts)
    return request(c.session, flt, qos, handler)


def answer(c, e, arrived):
    """After client c's wait for entry e's ack: the granted QoS, or why
    there is none."""
    if not arrived:
        from .errors import MQTTTimeout
        raise MQTTTimeout(codec.why(_E_NO_UNSUBACK if e[1] < 0 else _E_NO_SUBACK, c.timeout_ms))
    g = e[_GRANTED]
    if g >= _SUBACK_FAILURE:  # MQTT 5 has more refusals than 0x80
        from .errors import SubscribeError
        v5 = c.session.v5
        raise SubscribeError(codec.why(_E_SUB_REFUSED, e[0]) + (": " + v5.words(g) if v5 else ""))
    return g


def refusals(c):
    """The session's REFUSED event: the broker refused filters it restored.
    Counted in client c's restore_refused, the last named in its last_error."""
    from .errors import SubscribeError
    subs = c.session.subs
    c.restore_refused += subs.nrefused
    c.last_error = SubscribeError(codec.why(_E_RESTORE_REFUSED, subs.refused))


class Subs:
    """The filters in force, in the order first subscribed, each with its
    request state; and the unsubscribes not yet acknowledged.

    A filter belongs to the session (its handler gets messages) from the
    moment subscribe() queues it until its SUBACK refuses it or unsubscribe()
    removes it. A request survives a lost link: it is sent again on the next
    one. reconcile() decides at CONNACK: a new session on the broker needs
    every filter again and has none to unsubscribe; a kept one needs only
    what was not granted yet. Every refused filter is counted (nrefused, the
    last in refused)."""

    def __init__(self):
        self.list = []
        self.gone = []  # UNSUBSCRIBEs awaiting UNSUBACK
        self.out = array("H", [0] * _OUT)  # ids of the packets awaiting their ack
        self.refused = None
        self.nrefused = 0

    def add(self, flt, qos, handler):
        for e in self.list:
            if e[0] == flt:
                e[1] = qos
                e[2] = handler
                e[_PID] = 0
                e[_GRANTED] = -1
                return e
        e = [flt, qos, handler, 0, -1]
        self.list.append(e)
        return e

    def remove(self, flt):
        for e in self.list:
            if e[0] == flt:
                self.list.remove(e)
                break
        g = [flt, -1, None, 0, -1]
        self.gone.append(g)
        return g

    def dispatch(self, topic, msg, retained):
        """Calls the handler of every filter topic matches (the shell does,
        once the engine's state is consistent)."""
        for e in self.list:
            if e[2] and match(e[0], topic):
                e[2](topic, msg, retained)

    def uses(self, pid):
        for e in self.list:
            if e[_PID] == pid:
                return True
        for g in self.gone:
            if g[_PID] == pid:
                return True
        return False

    def restoring(self):
        """True while some request has not been acknowledged."""
        for e in self.list:
            if e[_PID] >= 0:
                return True
        return len(self.gone) > 0

    def lost(self):
        # Requests in flight went with the link: send them again.
        for i in range(_OUT):
            self.out[i] = 0
        for e in self.list:
            if e[_PID] > 0:
                e[_PID] = 0
        for g in self.gone:
            g[_PID] = 0

    def reconcile(self, new):
        if not new:
            return
        for e in self.list:
            e[_PID] = 0
        for g in self.gone:  # a new session subscribes to nothing
            g[_GRANTED] = 0
        self.gone = []

    def send(self, s):
        """Queues the requests not sent yet while session s has send room,
        a few packets at a time (subscribe() made sure each filter fits)."""
        for g in self.gone:
            if g[_PID]:
                continue
            slot = _free(self.out)
            n = 8 + len(g[0])
            if slot < 0 or s.make_room(n) - _ACK_ROOM < n:
                return
            g[_PID] = self.out[slot] = s.new_pid()
            if s.v5:
                s.tx_end = s.v5.more().unsubscribe(s.tx, g[_PID], (g[0],), (), s.tx_end)
            else:
                s.tx_end = filters.unsubscribe(s.tx, g[_PID], (g[0],), s.tx_end)
        lst = self.list
        i = 0
        while i < len(lst):
            slot = _free(self.out)
            if slot < 0:
                return
            if lst[i][_PID]:
                i += 1
                continue
            # As many filters still to send as fit one packet; at MQTT 5
            # those with the same Subscription Identifier (e[1] >> 8).
            pid = 0
            n = 12 if s.v5 else 7  # fixed header (type, up to 3 length bytes), packet id, MQTT 5's properties
            room = s.make_room(n + 3 + len(lst[i][0])) - _ACK_ROOM
            batch = []
            sid = -1
            while i < len(lst):
                e = lst[i]
                i += 1
                if e[_PID]:
                    continue
                if n + 3 + len(e[0]) > room:
                    break
                if sid >= 0 and e[1] >> 8 != sid:
                    i -= 1  # it starts the next packet
                    break
                sid = e[1] >> 8
                if not pid:
                    pid = s.new_pid()
                n += 3 + len(e[0])
                e[_PID] = pid
                batch.append((e[0], e[1] & 0xFF))
            if not batch:
                return  # no room now: the rest once tx drains
            if s.v5:  # the options byte (QoS in bits 0-1)
                s.tx_end = s.v5.more().subscribe(s.tx, pid, batch, sid, (), s.tx_end)
            else:
                s.tx_end = filters.subscribe(s.tx, pid, batch, s.tx_end)
            self.out[slot] = pid

    def acked(self, s, t, now):
        """Session s's SUBACK or UNSUBACK (t, in s.rx): what s.receive()
        returns, REFUSED (3) if restored filters were refused, else 0.
        Refused filters leave the list."""
        r = s.rx
        pid = r.pid
        slot = -1
        for k in range(_OUT):
            if self.out[k] == pid:
                slot = k
        if slot < 0:
            return 0  # none of our requests
        self.out[slot] = 0
        if t == _UNSUBACK:
            for g in self.gone:
                if g[_PID] == pid:
                    g[_GRANTED] = 0
                    self.gone.remove(g)
                    s._fill(now)
                    return _REFUSED if self.nrefused else 0
            raise codec.protocol_error(_E_ACK_TYPE, "UNSUBACK", pid, "SUBACK")
        codes = r.payload
        self.nrefused = 0
        j = 0
        i = 0
        lst = self.list
        while i < len(lst):
            e = lst[i]
            if e[_PID] != pid:
                i += 1
                continue
            if j >= len(codes):
                raise codec.protocol_error(_E_SUBACK_COUNT, pid, len(codes))
            g = codes[j]
            j += 1
            if g >= _SUBACK_FAILURE:  # MQTT 5: 0x80 and every code above
                if e[_GRANTED] >= 0:  # a restore: nobody waits for this answer
                    self.refused = e[0]
                    self.nrefused += 1
                e[_GRANTED] = g
                lst.pop(i)
                continue
            e[_GRANTED] = g
            e[_PID] = -1
            i += 1
        if not j:
            for g in self.gone:
                if g[_PID] == pid:
                    raise codec.protocol_error(_E_ACK_TYPE, "SUBACK", pid, "UNSUBACK")
        s._fill(now)
        return _REFUSED if self.nrefused else 0


def _free(a):
    for i in range(len(a)):
        if not a[i]:
            return i
    return -1

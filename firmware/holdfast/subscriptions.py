# The subscribe side of a session: the filters the application asked for
# and their SUBSCRIBE/UNSUBSCRIBE requests, keyed by packet id; the matching
# of inbound topics against them; request(), the session's subscribe verb,
# and the clients' subscribe() around their wait (ask, answer). Loaded on
# the first subscribe(): a sensor that only publishes never carries it.
# Its failures too (no ack in time, refused, restored filters refused).
from . import codec, topics
from . import errors  # errors.X where raised: the class loads with the first failure

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


def request(s, topic, qos, handler=None):
    """Session s's verb for the subscribe side: registers the topic filter
    topic (with handler(topic, msg, retained) for the messages it matches,
    from now on) and queues its SUBSCRIBE; with qos None forgets it (its
    handler gets nothing more) and queues its UNSUBSCRIBE. Queued now or
    once there is room. Returns its entry in s.subs, [filter, qos, handler,
    pid, answer]: answer is set by the SUBACK (0x80: refused, and the filter
    is gone) or is 0 once the UNSUBACK came (or a new session made it moot).
    ValueError if it can never fit the send buffer, or for a bad filter or
    QoS: checked before anything is registered."""
    subs = s.subs
    if subs is None:
        subs = s.subs = Subs()
    s.fits((8 if qos is None else 10) + len(topic))  # MQTT 5 subscribes with one byte more
    if qos is not None:  # None, not -1: a QoS of -1 is refused, not taken for an unsubscribe
        codec._check_qos(qos & 3 if s.v5 else qos)
    topics.check_filter(topic, 0, len(topic))
    lst = subs.list
    e = None
    for x in lst:
        if x[0] == topic:
            e = x
            break
    if qos is None:
        if e:
            lst.remove(e)
            if e[_GRANTED] < 0:  # a subscribe() still waits on it: answered, with None
                e[1] = -1
                e[_GRANTED] = 0
        e = [topic, -1, None, 0, -1]
        subs.gone.append(e)
    else:
        if e:  # subscribed again: the entry keeps its place, and whoever waits on it
            e[1] = qos
            e[2] = handler
            e[_PID] = 0
            e[_GRANTED] = -1
        else:
            e = [topic, qos, handler, 0, -1]
            lst.append(e)
        s._rx_full()
    s._fill(s.last_tx)
    return e


# -- a client's part (shell.Shell c): subscribe() and unsubscribe() are
# ask(), the shell's wait for the entry's answer, answer().

def ask(c, topic, qos, handler, options):
    """Client c's SUBSCRIBE (qos None: UNSUBSCRIBE) queued; its entry.
    options: MQTT 5's subscription options, in the QoS the entry keeps
    (mqtt5.subscriptions.sub_options); ValueError below level 5."""
    c._idle(True)
    topic = codec.to_bytes(topic)
    if options:
        if not c.session.v5:
            from .mqtt5.reasons import text
            raise ValueError(text(35, ()))
        import holdfast.mqtt5.subscriptions as m
        qos = m.sub_options(qos, **options)
    return request(c.session, topic, qos, handler)


def answer(c, e, acked):
    """After client c's wait for entry e's ack: the granted QoS, or why
    there is none: MQTTTimeout (no ack in time), SubscribeError (refused)."""
    g = e[_GRANTED]
    if acked and g < _SUBACK_FAILURE:  # MQTT 5 has more refusals than 0x80
        return None if e[1] < 0 else g  # None: an UNSUBSCRIBE's, or a subscribe() unsubscribed meanwhile
    if not acked:
        raise errors.MQTTTimeout(codec.why(_E_NO_UNSUBACK if e[1] < 0 else _E_NO_SUBACK, c.timeout_ms))
    if c.session.v5:  # MQTT 5 has more refusals than 0x80, in words
        from .mqtt5.reasons import words
        raise errors.SubscribeError(codec.why(_E_SUB_REFUSED, e[0]) + ": " + words(g))
    raise errors.SubscribeError(codec.why(_E_SUB_REFUSED, e[0]))


def refusals(c):
    """The session's REFUSED event: the broker refused filters it restored.
    Counted in client c's restore_refused, the last named in its last_error."""
    subs = c.session.subs
    c.restore_refused += subs.nrefused
    c.last_error = errors.SubscribeError(codec.why(_E_RESTORE_REFUSED, subs.refused))



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
        self.out = [0] * _OUT  # ids of the packets awaiting their ack (0: a free place)
        # The entries each SUBSCRIBE in out listed, in its order: the SUBACK's
        # codes answer them by position, whatever was asked since.
        self.listed = [None] * _OUT
        self.refused = None
        self.nrefused = 0

    def dispatch(self, topic, msg, retained):
        """Calls the handler of every filter topic matches (the shell does,
        once the engine's state is consistent)."""
        for e in self.list:
            if e[2] and match(e[0], topic):
                e[2](topic, msg, retained)

    def uses(self, pid):
        # Every id a request awaits its ack with is in out, that of a request
        # asked again before its ack came too (the ack still comes).
        return pid in self.out

    def lost(self):
        # Requests in flight went with the link: send them again.
        for i in range(_OUT):
            self.out[i] = 0
            self.listed[i] = None
        for e in self.list:
            if e[_PID] > 0:
                e[_PID] = 0
        for g in self.gone:
            g[_PID] = 0

    def reconcile(self, reset):
        # reset: the broker has a new session (see the class).
        if not reset:
            return
        for e in self.list:
            e[_PID] = 0
        for g in self.gone:  # a new session subscribes to nothing
            g[_GRANTED] = 0
        self.gone = []

    def send(self, s):
        """Queues the requests not sent yet while session s has send room,
        a few packets at a time (subscribe() made sure each filter fits)."""
        out = self.out
        for g in self.gone:
            if g[_PID]:
                continue
            n = 8 + len(g[0])
            if 0 not in out or s.make_room(n) - _ACK_ROOM < n:
                return
            g[_PID] = out[out.index(0)] = s.new_pid()
            if s.v5:
                import holdfast.mqtt5.subscriptions as m
                s.tx_end = m.unsubscribe(s.tx, g[_PID], (g[0],), (), s.tx_end)
            else:
                s.tx_end = topics.unsubscribe(s.tx, g[_PID], (g[0],), s.tx_end)
        lst = self.list
        i = 0
        while i < len(lst):
            if 0 not in out:
                return
            if lst[i][_PID]:
                i += 1
                continue
            # As many filters still to send as fit one packet; at MQTT 5
            # those with the same Subscription Identifier (e[1] >> 8).
            pid = 0
            listed = []
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
                listed.append(e)
                batch.append((e[0], e[1] & 0xFF))
            if not batch:
                return  # no room now: the rest once tx drains
            if s.v5:  # the options byte (QoS in bits 0-1)
                import holdfast.mqtt5.subscriptions as m
                s.tx_end = m.subscribe(s.tx, pid, batch, sid, (), s.tx_end)
            else:
                s.tx_end = topics.subscribe(s.tx, pid, batch, s.tx_end)
            k = out.index(0)
            out[k] = pid
            self.listed[k] = listed

    def acked(self, s, t, now):
        """Session s's SUBACK or UNSUBACK (t, in s.rx): what s.receive()
        returns, REFUSED (3) if restored filters were refused, else 0.
        Refused filters leave the list."""
        r = s.rx
        pid = r.pid
        out = self.out
        if pid not in out:
            return 0  # none of our requests
        k = out.index(pid)
        out[k] = 0
        listed = self.listed[k]
        self.listed[k] = None
        for g in self.gone:
            if g[_PID] == pid:
                break
        else:
            g = None
        if (t == _UNSUBACK) != (g is not None):  # an ack of the other type
            if t == _UNSUBACK:
                raise codec.protocol_error(_E_ACK_TYPE, "UNSUBACK", pid, "SUBACK")
            raise codec.protocol_error(_E_ACK_TYPE, "SUBACK", pid, "UNSUBACK")
        self.nrefused = 0  # refusals are this SUBACK's to report, once
        if g:
            g[_GRANTED] = 0
            self.gone.remove(g)
        else:
            # Code j answers the j-th filter the request listed: one asked
            # again since (a new pid) or unsubscribed awaits its own answer.
            codes = r.payload
            if len(codes) < len(listed):
                raise codec.protocol_error(_E_SUBACK_COUNT, pid, len(codes))
            lst = self.list
            for j in range(len(listed)):
                e = listed[j]
                for i in range(len(lst) if e[_PID] == pid else 0):
                    if lst[i] is e:
                        break
                else:
                    continue
                code = codes[j]
                if code < _SUBACK_FAILURE:  # MQTT 5: 0x80 and every code above refuse
                    e[_GRANTED] = code
                    e[_PID] = -1
                    continue
                if e[_GRANTED] >= 0:  # a restore: nobody waits for this answer
                    self.refused = e[0]
                    self.nrefused += 1
                e[_GRANTED] = code
                lst.pop(i)
        s._fill(now)
        return _REFUSED if self.nrefused else 0


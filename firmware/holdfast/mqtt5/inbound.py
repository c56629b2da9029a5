# An inbound PUBLISH at level 5, loaded with the first one: decoded (its
# topic, packet id, properties and payload, as views), and the Topic Alias
# it sets or uses, kept for the link in the Reader5's table.
from .wire import ALIASES, _fail, _n16, packet_id, walk, find

_PUBLISH = const(3)
_MALFORMED = const(0x81)
_PROTOCOL_ERROR = const(0x82)
_TOPIC_ALIAS = const(0x23)
_TOPIC_ALIAS_INVALID = const(0x94)

# Error reasons, by number; the words are in reasons.py.
_E_SHORT = const(13)
_E_TOPIC_EMPTY = const(15)
_E_TOPIC_UTF8 = const(16)
_E_TOPIC_WILD = const(17)
_E_ALIAS_RANGE = const(26)
_E_ALIAS_UNKNOWN = const(27)


def parse(r, flags, i, end):
    """Reader r's PUBLISH at r.buf[i:end]: topic (empty when the broker sent
    only a Topic Alias: get(r.buf, TOPIC_ALIAS, 0, r.p0, r.p1)), pid, the
    span of the properties, payload: views, nothing copied."""
    b = r.buf
    if end - i < 2:
        _fail(_MALFORMED, _E_SHORT, _PUBLISH, end - i)
    j = i + 2 + _n16(b, i)
    if j > end:
        _fail(_MALFORMED, _E_SHORT, _PUBLISH, end - i)
    import holdfast.topics as f
    if not f.utf8_ok(b, i + 2, j):
        _fail(_MALFORMED, _E_TOPIC_UTF8)
    for k in range(i + 2, j):
        if b[k] == 43 or b[k] == 35:
            _fail(_PROTOCOL_ERROR, _E_TOPIC_WILD)
    r.topic = r.mv[i + 2:j]
    empty = j == i + 2
    if flags & 6:
        r.pid = packet_id(b, j, end, _PUBLISH)
        j += 2
    else:
        r.pid = 0
    j = walk(r, j, end, _PUBLISH)
    if empty and not find(b, r.p0, r.p1, _TOPIC_ALIAS):
        _fail(_PROTOCOL_ERROR, _E_TOPIC_EMPTY)
    r.payload = r.mv[j:end]


def alias_in(r):
    """Reader r (session.Reader5) has an inbound PUBLISH: a Topic Alias it
    sets is remembered for the link, one it sends alone gets its topic back."""
    at = find(r.buf, r.p0, r.p1, _TOPIC_ALIAS)
    if not at:
        return
    a = _n16(r.buf, at)
    if a > ALIASES:
        _fail(_TOPIC_ALIAS_INVALID, _E_ALIAS_RANGE, a, ALIASES)
    if r.aliases is None:
        r.aliases = [None] * ALIASES
    if len(r.topic):
        r.aliases[a - 1] = bytes(r.topic)
    elif r.aliases[a - 1] is None:
        _fail(_PROTOCOL_ERROR, _E_ALIAS_UNKNOWN, a)
    else:
        r.topic = r.aliases[a - 1]

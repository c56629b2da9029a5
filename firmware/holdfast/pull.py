# The pull API: inbound messages returned to the caller instead of handed to
# a callback (micropython #2265, micropython-lib #130). Loaded with the first
# c.messages() or c.next_msg(); the engine's side is two checks in the
# shells: Shell._events() stops at a message once the pull API is on
# (c.pull_held >= 0) and holds it (c.pull_held: its link), and nothing more is read
# until take() hands it out.
# Bounded: one message is held, the rest wait unread in the socket (the
# broker's flow control backs off). What take() allocates per message: the
# tuple, and the topic and payload bytes a callback would get too (views
# into the receive buffer with views=True, valid until the next call on the
# client).
_CONNECTED = const(3)  # session.py's link state


def bind(c, name):
    """Shell.__getattr__'s messages and next_msg of client c, kept on c once
    made (so later calls allocate nothing to find them)."""
    if name == "messages":
        def messages():
            """From now on every inbound message waits to be taken by the pull
            API instead of going to the callback and the filters' handlers.
            Returns the client. Call it before subscribe() not to miss a
            retained message."""
            if c.pull_held < 0:
                c.pull_held = 0
            return c
        f = messages
    elif hasattr(type(c), "wait_msg"):
        def next_msg(timeout_ms=0):
            return pull(c, timeout_ms)
        f = next_msg
    else:  # AsyncClient: async for over the client
        raise AttributeError(name)
    setattr(c, name, f)
    return f


def take(c):
    """The message the engine holds for client c as (topic, msg, retained,
    qos), acknowledged now that it is handed out (QoS 1/2 as after a
    callback: inbound.handled()); None if none is held. One held when the
    client found its link gone is forgotten unacknowledged: the broker
    sends a QoS 1/2 message again on the next link. (Nothing is read while
    one is held, so a link that closed meanwhile is found after the
    hand-out: then handled() holds a QoS 2 id and acknowledges nothing.)"""
    s = c.session
    if c.pull_held != s.link or s.state != _CONNECTED:
        c.pull_held = 0
        return None
    c.pull_held = 0
    m = (s.topic, s.msg, s.retained, s.qos)
    import holdfast.inbound as i
    i.handled(s)
    return m


def pull(c, timeout_ms):
    """MQTTClient.next_msg(timeout_ms=0): the next inbound message as
    (topic, msg, retained, qos), or None if none came within timeout_ms
    (0: only what has arrived; None: until one comes); turns the pull API on
    (messages()). LinkDown as wait_msg() raises it."""
    from time import ticks_ms, ticks_add, ticks_diff
    if c.pull_held < 0:
        c.pull_held = 0
    deadline = ticks_add(ticks_ms(), timeout_ms or 0)
    while True:
        m = take(c)
        if m is not None:
            return m
        left = None if timeout_ms is None else ticks_diff(deadline, ticks_ms())
        if left is not None and left < 0:
            return None
        c.wait_msg(left)

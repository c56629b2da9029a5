# micropython-lib's umqtt.robust as a one-import drop-in on holdfast's engine:
# `from holdfast.robust import MQTTClient`. Its calls behave as umqtt.robust's
# do: publish(), wait_msg(), check_msg() and subscribe() ride out a lost link
# by calling reconnect(), which calls connect(False) until it succeeds,
# log(True, e) and delay(i) between attempts; log(False, e) names each
# failure first; DEBUG prints them. What the engine adds: every QoS 1/2
# message publish() accepted stays in the outbox and goes out again after the
# reconnect, and a full outbox waits for room (for the link first, the way
# umqtt.robust's publish() waits for the broker) instead of raising.
#
# A wrapper, not a subclass: the holdfast client keeps its `reconnect` flag
# (off here: reconnect() is the one that reconnects, when this shell calls it),
# and umqtt.robust's reconnect() is a method of the same name. Loaded only by
# a program that imports it.
from time import sleep
from .client import MQTTClient as _Client
from . import errors  # errors.X where caught: the class loads with the first failure


class MQTTClient:
    """umqtt.robust's MQTTClient: umqtt.simple's arguments (and holdfast's
    keywords but reconnect); DELAY (seconds delay() sleeps), DEBUG (log()
    prints). Anything else is the holdfast client's (flush(), pending(), the
    counters)."""

    DELAY = 2
    DEBUG = False

    def __init__(self, *args, **kw):
        kw["reconnect"] = False
        self.c = _Client(*args, **kw)

    def __getattr__(self, name):
        return getattr(self.c, name)

    def delay(self, i):
        # i: the attempts so far; umqtt.robust sleeps DELAY whatever it is.
        sleep(self.DELAY)

    def log(self, in_reconnect, e):
        if self.DEBUG:
            if in_reconnect:
                print("mqtt reconnect: %r" % e)
            else:
                print("mqtt: %r" % e)

    def connect(self, clean_session=True, timeout_ms=None):
        return self.c.connect(clean_session, timeout_ms)

    def reconnect(self):
        # self.connect: a subclass's own connect(), as umqtt.robust calls it.
        i = 0
        while 1:
            try:
                return self.connect(False)
            except OSError as e:
                self.log(True, e)
                i += 1
                self.delay(i)

    def publish(self, topic, msg, retain=False, qos=0):
        c = self.c
        while 1:
            try:
                c._idle(True)  # LinkDown (an OSError) once the link is lost: reconnect first
                try:
                    return c.publish(topic, msg, retain, qos)
                except errors.OutboxFull as e:
                    self.log(False, e)
                # Online, the broker's acknowledgements make room: wait for
                # the next packet (LinkDown if the link goes meanwhile).
                c.wait_msg(c.timeout_ms)
                continue
            except OSError as e:
                self.log(False, e)
            self.reconnect()

    def wait_msg(self):
        # Returns once a packet was handled: the next one, or the CONNACK of
        # a reconnect (the messages a kept session had waiting may have come
        # with it, and a wait for more would outlast them).
        try:
            return self.c.wait_msg()
        except OSError as e:
            self.log(False, e)
        self.reconnect()

    def check_msg(self, attempts=2):
        c = self.c
        while attempts:
            try:
                c.check_msg()
                return c._idle(True)  # LinkDown if the link is gone (None while it is up)
            except OSError as e:
                self.log(False, e)
            self.reconnect()
            attempts -= 1

    def subscribe(self, topic, qos=0):
        while 1:
            try:
                return self.c.subscribe(topic, qos)
            except OSError as e:
                self.log(False, e)
            self.reconnect()

# micropython-umqtt.simple2 from PyPI: publish() returns the id at once; the
# PUBACK arrives through check_msg()/wait_msg() and the status callback. Used
# stop-and-wait (publish, then wait_msg until that id is delivered): it has no
# window or flow control of its own.
PIPELINED = False
MQTTClient = None


def load():
    global MQTTClient
    from umqtt.simple2 import MQTTClient


class Client:
    def __init__(self, host, port, cid, opts):
        self.c = MQTTClient(cid, host, port)
        self.done = 0
        self.c.set_callback_status(self._status)

    def _status(self, pid, status):
        if status == 1:
            self.done = pid

    def connect(self):
        self.c.connect()

    def topic(self, b):
        return b

    def prepare(self, t0, t1, p):
        pass

    def pub0(self, t, p):
        self.c.publish(t, p)

    def pub1(self, t, p):
        pid = self.c.publish(t, p, False, 1)
        while self.done != pid:
            self.c.wait_msg()

    def drain0(self):
        pass

    def drain1(self):
        pass

    def sync(self):
        self.c.ping()
        self.c.wait_msg()  # handles the PINGRESP, returns None

    def close(self):
        self.c.disconnect()

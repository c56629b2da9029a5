# micropython-umqtt.simple from PyPI: QoS 1 publish() waits for the PUBACK.
PIPELINED = False
MQTTClient = None


def load():
    global MQTTClient
    from umqtt.simple import MQTTClient


class Client:
    def __init__(self, host, port, cid, opts):
        self.c = MQTTClient(cid, host, port)

    def connect(self):
        self.c.connect()

    def topic(self, b):
        return b

    def prepare(self, t0, t1, p):
        pass

    def pub0(self, t, p):
        self.c.publish(t, p)

    def pub1(self, t, p):
        self.c.publish(t, p, False, 1)

    def drain0(self):
        pass

    def drain1(self):
        pass

    def sync(self):
        self.c.ping()
        self.c.wait_msg()  # handles the PINGRESP, returns None

    def close(self):
        self.c.disconnect()

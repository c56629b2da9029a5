# micropython-umqtt.simple from PyPI: QoS 1 publish() waits for the PUBACK.
# lib_umqtt_robust runs this adapter on umqtt.robust's MQTTClient, and
# lib_umqtt_simple2 builds on it.
PIPELINED = False


def load():
    from umqtt.simple import MQTTClient
    Client.MQTTClient = MQTTClient


class Client:
    MQTTClient = None  # the library's class, set by load()

    def __init__(self, host, port, cid, opts):
        self.c = self.MQTTClient(cid, host, port)

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

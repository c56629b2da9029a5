# micropython-umqtt.simple2 from PyPI: publish() returns the id at once; the
# PUBACK arrives through check_msg()/wait_msg() and the status callback. Used
# stop-and-wait (publish, then wait_msg until that id is delivered): it has no
# window or flow control of its own. Otherwise as lib_umqtt_simple.
import lib_umqtt_simple

PIPELINED = False


def load():
    from umqtt.simple2 import MQTTClient
    Client.MQTTClient = MQTTClient


class Client(lib_umqtt_simple.Client):
    def __init__(self, host, port, cid, opts):
        super().__init__(host, port, cid, opts)
        self.done = 0
        self.c.set_callback_status(self._status)

    def _status(self, pid, status):
        if status == 1:
            self.done = pid

    def pub1(self, t, p):
        pid = self.c.publish(t, p, False, 1)
        while self.done != pid:
            self.c.wait_msg()

# umqtt.robust's way: readings at QoS 1 in a loop, check_msg() between them
# for a command; publish() and check_msg() ride out a lost broker by
# themselves (they call reconnect(), which calls delay() between attempts).
# DEBUG on: log() prints every failure. delay() is overridden, as users do,
# to shorten the wait and show the attempt count umqtt.robust passes it.
from umqtt.robust import MQTTClient
import time

SERVER = "192.168.1.10"
PORT = 1883
TOPIC = b"robust/readings"
COUNT = 80
stop = False


class Client(MQTTClient):
    DELAY = 0.3
    DEBUG = True

    def delay(self, i):
        print("delay", i)
        super().delay(i)


def sub_cb(topic, msg):
    global stop
    print("command", msg.decode())
    stop = msg == b"stop"


c = Client(b"robust-pub", SERVER, PORT)
c.set_callback(sub_cb)
c.connect()
c.subscribe(b"robust/cmd", 1)
print("connected")
i = 0
while i < COUNT:
    c.publish(TOPIC, b"%d" % i, qos=1)
    i += 1
    print("sent", i)
    c.check_msg()
    time.sleep_ms(25)
print("all sent, reconnected", c.links - 1, "times")
while not stop:
    c.wait_msg()
c.flush(10000)
print("pending", c.pending())
c.disconnect()

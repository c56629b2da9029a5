# umqtt.robust's way, as fast as it goes: readings at QoS 1 with nothing
# read between them. A broker that stops answering fills the outbox; publish()
# then waits (umqtt.robust's publish() blocks until the broker is back) and
# the loop goes on. The keepalive finds the dead link.
from umqtt.robust import MQTTClient
import time

SERVER = "192.168.1.10"
PORT = 1883
TOPIC = b"robust/burst"
COUNT = 120

c = MQTTClient(b"robust-burst", SERVER, PORT, keepalive=2)
c.DELAY = 0.3
c.DEBUG = True
c.connect()
print("connected")
for i in range(COUNT):
    c.publish(TOPIC, b"%d" % i, qos=1)
    print("sent", i + 1)
    time.sleep_ms(10)
c.flush(10000)
print("pending", c.pending())
c.disconnect()

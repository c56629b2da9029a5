# Keeps trying until the broker is up, then sends five readings at QoS 1
# and reads them back: every network failure is an OSError, so one
# `except OSError` makes the program ride through them (umqtt.robust's way).
from umqtt.simple import MQTTClient
import time

SERVER = "192.168.1.10"
PORT = 1883
TOPIC = b"migrate/robust"
got = []


def sub_cb(topic, msg):
    got.append(msg)


c = MQTTClient(b"umqtt-robust", SERVER, PORT)
c.set_callback(sub_cb)


def reconnect():
    while True:
        try:
            c.connect(False)
            c.subscribe(TOPIC, 1)
            return
        except OSError as e:
            print("broker not reachable, retrying:", e)
            time.sleep(0.3)


reconnect()
print("connected")
sent = 0
while len(got) < 5:
    try:
        if sent < 5:
            c.publish(TOPIC, b"%d" % sent, qos=1)
            sent += 1
        c.wait_msg()
    except OSError as e:
        print("lost the broker:", e)
        reconnect()
c.disconnect()
print("received", b" ".join(got).decode())

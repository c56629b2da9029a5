# umqtt.robust's subscriber: wait_msg() in a loop; when the broker goes away
# wait_msg() reconnects (reconnect(): connect(False) until it works) and the
# subscription comes back with the session.
from umqtt.robust import MQTTClient

SERVER = "192.168.1.10"
PORT = 1883
got = []


def sub_cb(topic, msg):
    print("got", msg.decode())
    got.append(msg)


c = MQTTClient(b"robust-sub", SERVER, PORT)
c.DELAY = 0.3
c.DEBUG = True
c.set_callback(sub_cb)
c.connect(False)
c.subscribe(b"robust/in", 1)
print("subscribed")
while not got or got[-1] != b"stop":
    c.wait_msg()
c.disconnect()
print("received", len(got))

# Prints what arrives on a topic until told to stop.
from umqtt.simple import MQTTClient

SERVER = "192.168.1.10"
PORT = 1883
TOPIC = b"migrate/cmd"
stop = False


def sub_cb(topic, msg):
    global stop
    print((topic, msg))
    if msg == b"stop":
        stop = True


def main(server=SERVER):
    c = MQTTClient(b"umqtt-sub", server, PORT)
    c.set_callback(sub_cb)
    c.connect()
    c.subscribe(TOPIC)
    print("subscribed to %s" % TOPIC.decode())
    try:
        while not stop:
            c.wait_msg()
    finally:
        c.disconnect()
    print("done")


main()

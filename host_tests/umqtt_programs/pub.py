# Publishes a few readings and a last message at QoS 1, then leaves.
from umqtt.simple import MQTTClient, MQTTException

SERVER = "192.168.1.10"
PORT = 1883
CLIENT_ID = b"umqtt-pub"
TOPIC = b"migrate/readings"


def main(server=SERVER):
    c = MQTTClient(CLIENT_ID, server, PORT)
    try:
        c.connect()
    except MQTTException as e:
        print("the broker refused the connection:", e)
        raise
    for i in range(5):
        c.publish(TOPIC, b"reading %d" % i)
    c.publish(TOPIC, b"last", qos=1)
    c.disconnect()
    print("published 6 messages to %s" % TOPIC.decode())


main()

# An LED switched by messages ("on", "off", "toggle"), polled with
# check_msg() between other work.
from umqtt.simple import MQTTClient
import time

SERVER = "192.168.1.10"
PORT = 1883
CLIENT_ID = b"umqtt-led"
TOPIC = b"migrate/led"


class Led:
    # On a board: machine.Pin(2, Pin.OUT, value=1), active low. The unix
    # port has no pins, so this one only remembers its level.
    def __init__(self):
        self.level = 1

    def value(self, v=None):
        if v is None:
            return self.level
        self.level = v


led = Led()
state = 0
running = True


def sub_cb(topic, msg):
    global state, running
    if msg == b"on":
        led.value(0)
        state = 1
    elif msg == b"off":
        led.value(1)
        state = 0
    elif msg == b"toggle":
        # active low: writing the current state inverts the LED
        led.value(state)
        state = 1 - state
    elif msg == b"bye":
        running = False
    print("led", msg.decode(), "->", "lit" if state else "dark")


def main(server=SERVER):
    c = MQTTClient(CLIENT_ID, server, PORT)
    c.set_callback(sub_cb)
    c.connect()
    c.subscribe(TOPIC)
    print("Connected to %s, subscribed to %s topic" % (server, TOPIC))
    try:
        while running:
            c.check_msg()
            time.sleep_ms(10)  # the rest of the board's work would go here
    finally:
        c.disconnect()
    print("led level", led.value())


main()

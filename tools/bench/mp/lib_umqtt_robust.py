# micropython-umqtt.robust from PyPI (with umqtt.simple): retries on OSError,
# else as simple: lib_umqtt_simple's adapter on umqtt.robust's MQTTClient.
from lib_umqtt_simple import PIPELINED, Client  # noqa: F401 (the adapter interface)


def load():
    from umqtt.robust import MQTTClient
    Client.MQTTClient = MQTTClient

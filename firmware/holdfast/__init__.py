# holdfast: an MQTT 3.1.1 / 3.1 client for MicroPython that keeps what it promised to deliver.
from .errors import (MQTTError, MQTTProtocolError, PacketTooLarge, ConnectError, SubscribeError,
                     OutboxFull, MQTTTimeout, LinkDown)
from .client import MQTTClient

# The base of the MQTT family of errors (errors/__init__.py says which
# family is which), loaded with the package: every other class derives
# from it or from OSError.


class MQTTError(Exception):
    """Base of the errors about MQTT itself (not of the link errors)."""


# umqtt.simple's name for its errors (CONNACK refused, SUBACK 0x80): the
# same base, so `from holdfast import MQTTClient, MQTTException` ports as is.
MQTTException = MQTTError

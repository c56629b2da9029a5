# The outbox's refusal of a message.
from .base import MQTTError


class OutboxFull(MQTTError):
    """The outbox has no room for another message; publish() stored nothing."""

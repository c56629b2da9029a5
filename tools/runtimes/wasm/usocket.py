# umqtt.simple imports usocket: the same in-memory sockets (socket.py).
from socket import *  # noqa: F401,F403

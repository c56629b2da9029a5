# The session's link states and receive() events, as session.py documents
# them: it keeps them as private consts (a module-level name costs heap on a
# board), so the tests name them here. Every test that drives a Session
# through CONNACK, a delivery or a failure checks these numbers against it.
CLOSED = 0
OFFLINE = 1
CONNECTING = 2
CONNECTED = 3
CLOSING = 4
FAILED = 5

MESSAGE = 1
DELIVERED = 2
REFUSED = 3
REJECTED = 4

ACK_ROOM = 16  # send buffer bytes kept for acknowledgements

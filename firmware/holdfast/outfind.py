# find_topic() of a persistent outbox (outlog.Log): what a client that
# publishes with latest=True runs (policy.replace), loaded with its first
# use; a store that never looks for a topic never carries this code.
from array import array
from . import codec
from .outlog import crc32
# outlog's constants (const() names with _ are not importable; test_outbox_consts.py
# checks that the copies agree):
_REC = const(16)  # record header
_S_TH = const(32)  # _th holds its topic's hash (not after a reboot, until compared)


def find_topic(log, topic, after):
    """First pending key > after whose message has this topic, or -1."""
    topic = codec.to_bytes(topic)
    h = crc32(topic) & 0xFFFF
    if not log._th:
        log._th = array("H", [0] * log.slots)
    b = log.buf
    n = len(topic)
    i = log._at(after + 1)
    st = log._state
    while i < log._n:
        s = st[i]
        if s and not (s & _S_TH and log._th[i] != h):
            # The topic out of the stored PUBLISH: fixed header,
            # remaining length (1-4 bytes), topic length, topic.
            u = log._unit[i]
            p = log._off[i] + _REC
            log._rd(u, p, b[0:7])
            j = 1
            while b[j] & 0x80:
                j += 1
            same = (b[j + 1] << 8 | b[j + 2]) == n
            p += j + 3
            k = 0
            while same and k < n:
                m = min(len(b), n - k)
                log._rd(u, p + k, b[0:m])
                for x in range(m):
                    if b[x] != topic[k + x]:
                        same = False
                        break
                k += m
            if same:
                log._th[i] = h
                st[i] = s | _S_TH
                return log._key[i]
        i += 1
    return -1

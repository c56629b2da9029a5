# The search of find_topic() of a durable outbox (log.Log): what a client
# that publishes with latest=True runs (policies.replace), loaded with its
# first use; a store that never looks for a topic never carries this code.
# The log keeps the hashes; this only reads.
# log's constants (const() names with _ are not importable; test_outbox_consts.py
# checks that the copies agree):
_REC = const(16)  # record header
_S_TH = const(32)  # _th holds its topic's hash (not after a reboot, until compared)


def entry(log, topic, h, after):
    """The entry of the first pending key > after whose message has this
    topic (bytes, of hash h), or -1."""
    # Reads go into views of the scratch buffer that the store made when it
    # opened (a slice for each read would allocate for each candidate), each
    # placed to end inside the record: 16 bytes up to the packet's 7th, then
    # 20 up to each 20th byte of the topic and up to its end (overlapping the
    # bytes compared already, or those before the topic).
    hd = log._buf16
    w = log._unithead
    n = len(topic)
    i = log._at(after + 1)
    st = log._state
    while i < log._n:
        s = st[i]
        if s and not (s & _S_TH and log._th[i] != h):
            # The topic out of the stored PUBLISH: fixed header,
            # remaining length (1-4 bytes), topic length, topic.
            u = log._unit[i]
            p = log._off[i] + _REC - 9  # the packet's first byte lands in hd[9]
            log._rd(u, p, hd)
            j = 10
            while hd[j] & 0x80:
                j += 1
            same = (hd[j + 1] << 8 | hd[j + 2]) == n
            p += j + 3  # the topic's first byte
            k = 0
            while same and k < n:
                e = min(k + 20, n)
                log._rd(u, p + e - 20, w)
                for x in range(k + 20 - e, 20):
                    if w[x] != topic[e - 20 + x]:
                        same = False
                        break
                k = e
            if same:
                return i
        i += 1
    return -1

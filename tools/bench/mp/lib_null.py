# No library and no I/O: checks that the harness itself allocates nothing.
PIPELINED = False


def load():
    pass


class Client:
    def __init__(self, host, port, cid, opts):
        pass

    def connect(self):
        pass

    def topic(self, b):
        return b

    def prepare(self, t0, t1, p):
        pass

    def pub0(self, t, p):
        pass

    def pub1(self, t, p):
        pass

    def drain0(self):
        pass

    def drain1(self):
        pass

    def sync(self):
        pass

    def close(self):
        pass

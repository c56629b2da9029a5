# select.poll for the in-memory sockets of socket.py (WebAssembly port; see socket.py).
POLLIN = 1
POLLOUT = 4
POLLERR = 8
POLLHUP = 16


class poll:
    def __init__(self):
        self.s = {}

    def register(self, s, mask=POLLIN | POLLOUT):
        self.s[id(s)] = [s, mask]

    def modify(self, s, mask):
        self.s[id(s)][1] = mask

    def unregister(self, s):
        self.s.pop(id(s), None)

    def poll(self, ms=-1):
        out = []
        for s, mask in self.s.values():
            ev = (POLLIN if s.rx else 0) | POLLOUT
            if ev & mask:
                out.append((s, ev & mask))
        return out

    def ipoll(self, ms=-1, flags=0):
        return self.poll(ms)

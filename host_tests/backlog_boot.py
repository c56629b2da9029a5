# Run by test_outbox_boot.py under the MicroPython unix port, in a process of
# its own so -X heapsize bounds it:
#     micropython backlog_boot.py MODPATH fill|open file|flash PATH N [SLOTS]
# fill: put N QoS 1 messages (pid = key + 1), none acknowledged, into a
# FileStore in directory PATH, or a FlashStore on a block device kept in file
# PATH. open: reopen it (the boot scan), print "pending N first F last L pid
# P" for the oldest and newest pending keys, then put one more message and
# acknowledge it, so the backlog is as filled for the next run. SLOTS: the
# index size (default N + 8). make bench runs it too (tools/bench/outbox.py).
import sys

sys.path.insert(0, sys.argv[1])
mode, kind, path, n = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
BLOCKS = 64
BS = 4096
SLOTS = int(sys.argv[6]) if len(sys.argv) > 6 else n + 8


class FileFlash:
    """The block-device protocol over a file, so the flash is not in the heap."""

    def __init__(self, path, fresh):
        if fresh:
            with open(path, "wb") as f:
                blank = b"\xff" * BS
                for _ in range(BLOCKS):
                    f.write(blank)
        self.f = open(path, "r+b")

    def readblocks(self, b, buf, off=0):
        self.f.seek(b * BS + off)
        self.f.readinto(buf)

    def writeblocks(self, b, buf, off=0):
        self.f.seek(b * BS + off)
        self.f.write(buf)
        self.f.flush()

    def ioctl(self, op, arg):
        if op == 4:
            return BLOCKS
        if op == 5:
            return BS
        if op == 6:
            self.writeblocks(arg, b"\xff" * BS)
        return 0


def store():
    if kind == "file":
        from holdfast.durable import FileStore
        return FileStore(path, slots=SLOTS, fsync=False)
    from holdfast.durable import FlashStore
    return FlashStore(FileFlash(path, mode == "fill"), slots=SLOTS)


st = store()
if mode == "fill":
    for i in range(n):
        st.put(b"sensors/board-1/t", b"x" * 64, 1, False, i + 1)
else:
    last = st.tail - 1
    print("pending %d first %d last %d pid %d" % (len(st), st.next(-1), last, st.pid(last)))
    k = st.put(b"sensors/board-1/t", b"after boot", 1, False, n + 1)
    print("put key %d" % k)
    st.done(k)
if hasattr(st, "close"):
    st.close()

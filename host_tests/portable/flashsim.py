"""A NOR flash chip in RAM with the MicroPython block-device protocol.

Flash(blocks, size, prog=1): readblocks(n, buf, off), writeblocks(n, buf,
off), ioctl(4) block count, ioctl(5) block size, ioctl(6, n) erase, as
esp32.Partition and rp2.Flash offer, so both os.VfsLfs2 and FlashStore run on
it. Programming only clears bits (result = old AND new); a byte other than
0xFF that would need a 0 bit set back to 1 raises ValueError (a program over
data without an erase: a bug in the writer). prog > 1 demands whole aligned
pages, as rp2.Flash does.

Counters: programmed (bytes handed to writeblocks), erased (blocks), ops
(program and erase operations). quiet=True: copy byte by byte, so the device
itself allocates nothing (for measuring what its user allocates).

Power cut: cut(k, keep) makes the k-th program or erase from now on
incomplete: only its first `keep` bytes are programmed / erased (0: none,
None: half, negative: all but that many), then it raises OSError(EIO), and
so does every later call until revive(); cut(0) disarms. After a cut,
clone() (a new chip) or other.load(chip) (reusing other's memory) gives a
working chip with the same contents, so file handles left on the old one
keep failing; wipe() makes a chip as new. flip(addr, bit) flips one stored
bit (decay, a stray write).

errno=True: fail by returning -EIO instead of raising, the way a block
device reports errors to os.VfsLfs2 (an exception would unwind through
LittleFS's C code and leave its file handles half closed).
"""

from powercut import PowerCut

_EIO = 5


class Flash(PowerCut):
    def __init__(self, blocks=8, size=512, prog=1, errno=False):
        PowerCut.__init__(self)
        self.blocks = blocks
        self.size = size
        self.prog = prog
        self.mem = bytearray(b"\xff" * (blocks * size))
        self.mv = memoryview(self.mem)
        self._ffb = b"\xff" * size
        self.programmed = 0
        self.erased = 0
        self.errno = errno
        self.quiet = False

    # -- faults ----------------------------------------------------------------

    def revive(self):
        self.dead = False
        self._cut = 0

    def wipe(self):
        """As new: erased, counters at 0, no cut (reuses the memory)."""
        for b in range(self.blocks):
            self.mv[b * self.size:(b + 1) * self.size] = self._ffb
        self.programmed = self.erased = self.ops = 0
        self.revive()

    def load(self, other):
        """Holds what other holds, works (reuses the memory)."""
        self.mem[:] = other.mem
        self.programmed = self.erased = self.ops = 0
        self.revive()

    def clone(self):
        """A working device holding what this one holds (after a power cut:
        anything still using the old one keeps failing)."""
        d = Flash(self.blocks, self.size, self.prog, self.errno)
        d.mem[:] = self.mem
        return d

    def flip(self, addr, bit):
        self.mem[addr] ^= 1 << bit

    def _fail(self):
        if self.errno:
            return -_EIO
        raise OSError(_EIO)

    # -- block protocol ------------------------------------------------------------

    def readblocks(self, n, buf, off=0):
        if self.dead:
            return self._fail()
        a = n * self.size + off
        if not self.quiet:
            try:
                buf[:] = self.mv[a:a + len(buf)]
                return 0
            except MemoryError:  # called by a finaliser: the heap is locked
                pass
        m = self.mem
        for i in range(len(buf)):
            buf[i] = m[a + i]
        return 0

    def writeblocks(self, n, buf, off=None):
        if self.dead:
            return self._fail()
        if off is None:  # the simple protocol: erase, then write whole blocks
            for i in range(len(buf) // self.size):
                self.ioctl(6, n + i)
            off = 0
        a = n * self.size + off
        size = len(buf)
        if self.prog > 1 and (a % self.prog or size % self.prog):
            raise ValueError("program of %d bytes at %d is not in whole %d-byte pages"
                             % (size, a, self.prog))
        if a + size > len(self.mem):
            raise ValueError("program past the end of the device")
        self.programmed += size
        todo = self._torn(size)
        m = self.mem
        if todo > 32 and not self.quiet:
            try:
                if m[a:a + todo] == self._ffb[:todo]:
                    self.mv[a:a + todo] = memoryview(buf)[:todo]  # into erased space: fast
                    todo = 0
            except MemoryError:  # called by a finaliser: the heap is locked
                pass
        for i in range(todo):
            v = buf[i]
            if v != 255:
                if m[a + i] & v != v:
                    raise ValueError("program at %d sets bits of 0x%02x back to 1 (0x%02x)"
                                     % (a + i, m[a + i], v))
                m[a + i] = v
        if self.dead:
            return self._fail()
        return 0

    def ioctl(self, op, arg):
        if self.dead:
            return self._fail()
        if op == 4:
            return self.blocks
        if op == 5:
            return self.size
        if op == 6:
            a = arg * self.size
            n = self._torn(self.size)
            try:
                if n == self.size:  # (a whole erase: no view to make)
                    self.mv[a:a + n] = self._ffb
                else:
                    self.mv[a:a + n] = memoryview(self._ffb)[0:n]
            except MemoryError:  # called by a finaliser: the heap is locked
                m = self.mem
                for i in range(a, a + n):
                    m[i] = 255
            self.erased += 1
            if self.dead:
                return self._fail()
            return 0
        return 0  # 1 init, 2 deinit, 3 sync

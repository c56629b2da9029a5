"""Filesystem calls for FileStore (its fs= argument) over a real directory,
with the faults a board's filesystem can show:

- cut(k, keep): a power cut at the k-th write or remove from now on: the
  write puts only its first `keep` bytes in the file (None: half, negative:
  all but that many), the remove does not happen; it raises OSError(EIO),
  and so does every later call. What reached the file stays (the OS keeps
  it), as a crash of a board keeps what the filesystem committed.
- quota: the directory holds at most this many bytes; a write beyond it
  puts what fits and raises OSError(ENOSPC).
"""
import os

from powercut import PowerCut

_EIO = 5
_ENOSPC = 28


class CutFS(PowerCut):
    def __init__(self, quota=0):
        PowerCut.__init__(self)
        self.quota = quota
        self.used = -1  # bytes in the directory, counted at the first open
        self.files = []

    def _alive(self):
        if self.dead:
            raise OSError(_EIO)

    def _count(self, d):
        if self.used < 0:
            self.used = 0
            for name in os.listdir(d):
                self.used += os.stat(d + "/" + name)[6]

    def open(self, path, mode):
        self._alive()
        self._count(path[:path.rfind("/")])
        f = _File(self, open(path, mode, 0))  # unbuffered: what was written is in the file
        self.files.append(f)
        return f

    def remove(self, path):
        self._alive()
        size = os.stat(path)[6]
        if self._torn(1) == 1:
            os.remove(path)
            if self.used >= 0:
                self.used -= size
        if self.dead:
            raise OSError(_EIO)

    def listdir(self, path):
        self._alive()
        return os.listdir(path)

    def mkdir(self, path):
        self._alive()
        os.mkdir(path)

    def close_all(self):
        """Closes what the store left open (after a cut it cannot)."""
        for f in self.files:
            try:
                f.f.close()
            except OSError:
                pass
        self.files = []


class _File:
    def __init__(self, fs, f):
        self.fs = fs
        self.f = f

    def write(self, b):
        fs = self.fs
        fs._alive()
        n = len(b)
        room = n
        if fs.quota and fs.used + n > fs.quota:
            room = max(0, fs.quota - fs.used)
        k = fs._torn(room)
        if k:
            self.f.write(memoryview(b)[0:k])
            fs.used += k
        if fs.dead:
            raise OSError(_EIO)
        if room < n:
            raise OSError(_ENOSPC)
        return n

    def flush(self):
        self.fs._alive()
        self.f.flush()

    def fileno(self):
        self.fs._alive()
        return self.f.fileno()

    def seek(self, pos, whence=0):
        self.fs._alive()
        return self.f.seek(pos, whence)

    def readinto(self, b):
        self.fs._alive()
        return self.f.readinto(b)

    def close(self):
        self.f.close()
        if self in self.fs.files:
            self.fs.files.remove(self)

# FileStore on LittleFS, the boards' own filesystem, mounted (os.VfsLfs2) on
# a simulated NOR flash: power cuts at every program and erase of the chip,
# and a full filesystem. MicroPython only: CPython has no os.VfsLfs2, so
# there these tests are not defined at all (test_outbox_file.py runs the same
# workload on a directory on both runtimes).
import os
from holdfast.durable import FileStore
from flashsim import Flash
import outbox_work as w

LFS = getattr(os, "VfsLfs2", None)
MNT = "/hfo-lfs"


def _mount(dev, fresh):
    try:
        os.umount(MNT)
    except OSError:
        pass
    if fresh:
        LFS.mkfs(dev)
    os.mount(LFS(dev), MNT)


if LFS is not None:

    def _power_cuts(group):
        ops = w.script(30, seed=5)  # as test_outbox_file: 2 compactions copy records
        # Two chips for all the rounds (their memory is reused, so the heap
        # does not fragment): the workload runs on one until the cut, the
        # other takes what it holds and is mounted for the recovery.
        run = Flash(14, 256, errno=True)
        boot = Flash(14, 256, errno=True)

        def make():
            run.wipe()
            _mount(run, True)
            return FileStore(MNT + "/ob", segment_bytes=200, compact=3, reserve=256, group=group), run

        def reopen(dev):
            boot.load(dev)
            _mount(boot, False)
            return FileStore(MNT + "/ob", segment_bytes=200, compact=3, reserve=256, group=group)

        n = w.cuts(ops, make, reopen, "lfs group=%d" % group)
        assert n > 100, n
        os.umount(MNT)
        return n

    def test_power_cut_on_littlefs():
        _power_cuts(1)

    def test_power_cut_on_littlefs_with_group_commit():
        # Puts since the last commit may be lost; the check allows exactly
        # those, and some cuts do lose them (LittleFS commits on flush only).
        before = w.GROUP_LOST[0]
        _power_cuts(4)
        assert w.GROUP_LOST[0] > before, w.GROUP_LOST

    def test_full_littlefs_then_usable_after_acks():
        dev = Flash(12, 256, errno=True)
        _mount(dev, True)
        st = FileStore(MNT + "/ob", segment_bytes=512, reserve=256)
        w.full_then_usable(st, lambda: FileStore(MNT + "/ob", segment_bytes=512, reserve=256))
        os.umount(MNT)

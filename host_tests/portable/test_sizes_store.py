# The outbox's record limit (store.most, docs/engine.md "Limits") before
# when_full="drop_oldest" drops anything: a RAM ring, a FileStore limit=, a
# FlashStore block. Apart from test_sizes.py for the heap guard of
# test_micropython.py. Runs on CPython and MicroPython.
from holdfast import codec
from holdfast.memstore import MemoryStore
from holdfast.durable import FileStore
from holdfast.durable import FlashStore
from holdfast.errors import OutboxFull
from fakebroker import session
from flashsim import Flash
from support import raises, tmpdir, rmtree


def _stores():
    # Stores whose record limit is below what the send buffer (size=1024)
    # takes: a small RAM ring, a FileStore limit=, a FlashStore block.
    d = tmpdir()
    return d, ((MemoryStore(256, 8), "MemoryStore"), (FileStore(d, limit=256), "FileStore"),
               (FlashStore(Flash(4, 256, 1)), "FlashStore"))


def test_drop_oldest_refuses_what_can_never_fit_the_store_before_dropping():
    d, stores = _stores()
    try:
        for st, name in stores:
            s = session(store=st, drop_oldest=True)
            s.lost()  # offline: the messages stay queued
            for i in range(3):
                s.publish(b"q", b"m%d" % i, 1, False, 0)
            e = raises(OutboxFull, s.publish, b"big", b"x" * 300, 1, False, 0)
            assert "can never fit this outbox" in str(e) and str(st.most) in str(e), (name, str(e))
            assert len(st) == 3 and s.overflowed == 0, (name, len(st), s.overflowed)
            # Right at the limit it is stored, dropping the oldest for room
            # where it must; one byte over, refused as above.
            top = st.most - codec.publish_size(b"big", 0, 1)
            while codec.publish_size(b"big", top, 1) > st.most:  # a longer length field
                top -= 1
            s.publish(b"big", b"y" * top, 1, False, 0)
            assert st.size(st.tail - 1) == st.most, (name, st.size(st.tail - 1), st.most)
            raises(OutboxFull, s.publish, b"big", b"y" * (top + 1), 1, False, 0)
            if hasattr(st, "close"):
                st.close()
    finally:
        rmtree(d)

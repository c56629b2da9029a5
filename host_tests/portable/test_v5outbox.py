# MQTT 5 messages with properties in the persistent outboxes, across a
# reboot, read by a level-5 and by a level-4 session (docs/mqtt5.md). Apart
# from test_v5session: with FileStore and FlashStore loaded too, one module
# would not fit the portable tests' heap guard.
from holdfast.mqtt5 import properties as pr, session as s5
from holdfast.broker import feed


def test_a_level4_session_sends_a_level5_record_without_its_properties():
    # A level-5 program replaced by a level-4 one, the same outbox: the
    # record's properties are left out, the 3.1.1 PUBLISH goes (DUP: a new
    # session cannot know whether the outbox's messages went out before).
    from holdfast.session import Session
    from holdfast.durable import FlashStore
    from flashsim import Flash
    dev = Flash(4, 1024)
    s = s5.Session5(b"four", False, 0, 5, 512, 4, FlashStore(dev))
    s.props = ((pr.RESPONSE_TOPIC, b"r" * 130), (pr.CORRELATION_DATA, b"\x07"))
    s.publish(b"t", b"x" * 200, 1, True, 0)
    s.props = None
    s.publish(b"t", b"plain", 2, False, 0)
    f = Session(b"four", True, 0, 4, 512, 4, FlashStore(dev))  # after the reboot
    f.start(0)
    f.sent(f.tx_end, 0)
    feed(f.rx, b"\x20\x02\x00\x00")
    t0 = f.tx_end
    assert f.receive(0) == 0
    assert bytes(f.tx[t0:f.tx_end]) == (b"\x3b\xcd\x01\x00\x01t\x00\x01" + b"x" * 200
                                    + b"\x3c\x0a\x00\x01t\x00\x02plain"), bytes(f.tx[t0:f.tx_end])


def test_a_stored_messages_properties_last_across_a_reboot():
    # FlashStore and FileStore: a level-5 session stores a message with
    # properties offline; after the reboot (the store opened again) a
    # level-5 session sends it with them, a level-4 one without.
    from holdfast.session import Session
    from holdfast.durable import FileStore
    from holdfast.durable import FlashStore
    from flashsim import Flash
    from support import tmpdir, rmtree
    dev = Flash(4, 256)
    top = tmpdir()
    for reopen in (lambda: FlashStore(dev), lambda: FileStore(top)):
        s = s5.Session5(b"boot", False, 0, 5, 256, 4, reopen())
        s.props = ((pr.RESPONSE_TOPIC, b"t/answer"), (pr.CORRELATION_DATA, b"\x00#1"))
        assert s.publish(b"t", b"asked", 1, False, 0) == 1
        s.store.sync()
        for level, want in ((5, b"\x3a\x1c\x00\x01t\x00\x01\x11\x08\x00\x08t/answer\x09\x00\x03\x00#1asked"),
                            (4, b"\x3a\x0a\x00\x01t\x00\x01asked")):
            st = reopen()
            s = (s5.Session5 if level == 5 else Session)(b"boot", False, 0, level, 256, 4, st)
            s.start(0)
            s.sent(s.tx_end, 0)
            feed(s.rx, b"\x20\x03\x00\x00\x00" if level == 5 else b"\x20\x02\x00\x00")
            t0 = s.tx_end
            assert s.receive(0) == 0
            assert bytes(s.tx[t0:s.tx_end]) == want, (level, bytes(s.tx[t0:s.tx_end]))
            if hasattr(st, "close"):  # FileStore
                st.close()
    rmtree(top)

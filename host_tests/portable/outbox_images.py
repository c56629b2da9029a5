"""Outboxes written by holdfast at commit b689b0c (format version 2), for
test_outbox_format.py: a later holdfast must open what an earlier one wrote.

Both were made by the same calls, scenario(store, traffic) below, on a
FlashStore over flashsim.Flash(4, 256) and on a FileStore(segment_bytes=512,
compact=2), and hold every kind of record that version writes: messages with
and without a deadline, QoS 1 and 2; released QoS 2 messages (an R record,
or the released byte programmed on flash); done ones (D records, done bytes);
held inbound ids and ended holds (H, X, done bytes); and compaction copies
of a released message with a deadline (flags QoS 2 | released | deadline)
and of a hold. `traffic` is how many window publishes it took, on each
store, until the compaction had copied both messages and a hold.

Never regenerate these bytes with the code under test: their point is that
an older holdfast wrote them.
"""
import outbox_work as w
from holdfast.held import table

OPS = w.script(60, seed=5, span=8)


def scenario(st, traffic):
    a = st.put(b"dl/a", b"A", 1, False, 4001, 1700000000)
    b = st.put(b"dl/b", b"B", 2, False, 4002, 1700000007)
    st.release(b)
    for pid in (7, 3, 9, 11):
        table(st).hold(pid)
    table(st).unhold(3)  # st.drop(3) in b689b0c: the same call, moved to the table
    window = []  # four messages in flight, acknowledged oldest first
    for i in range(traffic):
        window.append(st.put(b"k", b"k" * 40, 1, False, 4200 + i))
        if len(window) > 4:
            st.done(window.pop(0))
    for k in window:
        st.done(k)
    m = w.Model()
    m.run(st, OPS)
    return a, b



FLASH_TRAFFIC = 10
FILE_TRAFFIC = 0
# flashsim.Flash(4, 256).mem
FLASH = (
    "68664f42024200000b0000001b000000125dbcb44d024a001b0000001000000007168d64"
    "3448001273656e736f72732f6465762d312f74656d700010697683909daab7c4d1deebf8"
    "05121f2c394653606d7a8794a1aebbc8d5e2effc091623303d4a5764717e8b98a5b2bfcc"
    "d9e6ffff48000000070000000a00ffffe7bb2e7a48000000080000000300ff00bd3ff517"
    "4d023b001c00000011000000ee748eda3439001273656e736f72732f6465762d312f7465"
    "6d700011707d8a97a4b1becbd8e5f2ff0c192633404d5a6774818e9ba8b5c2cfdce9f603"
    "101d2aff4d0214001d000000120000ff9a5dbce434120003742f6100127784919eabb8c5"
    "d2dfecf968664f4202420000050000000b000000bf182ff14d090f0000000000a10fffff"
    "f81ed84632090004646c2f610fa14100f15365ff4d0e0f0001000000a20fffff6a76051b"
    "34090004646c2f620fa24207f15365ff48000000010000000700ffffd60b160e48000000"
    "030000000900ffff7b87a7f748000000040000000b00ff0089691ac14d012f000b000000"
    "7110ff008e7c1339322d00016b10716b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b"
    "6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6bff4d011b000c0000000100ff00deccb8b0"
    "3219001273656e736f72732f6465762d312f74656d700001000d1aff4800000005000000"
    "0500ff00d437354f68664f42024200000c0000001e00000039a4a7894800000009000000"
    "0100ff00af7475ce4d023c001e00000013000000b729a2d3343a0003742f6100137e8b98"
    "a5b2bfccd9e6f3000d1a2734414e5b6875828f9ca9b6c3d0ddeaf704111e2b3845525f6c"
    "798693a0adbac7d4e1eefb08ffffffffffffffffffffffffffffffffffffffffffffffff"
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
    "ffffffffffffffffffffffff68664f42024200000a0000001800000062f2a36a4d024100"
    "180000000d000000b58daee1343f001273656e736f72732f6465762d312f74656d70000d"
    "54616e7b8895a2afbcc9d6e3f0fd0a1724313e4b5865727f8c99a6b3c0cddae7f4010e1b"
    "2835424f5cffffff4d013e00190000000e00ff00fdc92269323c001273656e736f72732f"
    "6465762d312f74656d70000e5b6875828f9ca9b6c3d0ddeaf704111e2b3845525f6c7986"
    "93a0adbac7d4e1eefb0815222f3cffff4d0129001a0000000f00ff0078b8f3e332270003"
    "742f61000f626f7c8996a3b0bdcad7e4f1fe0b1825323f4c596673808d9aa7b4c1cedbe8"
    "f5ffffffffffffffffffffffffffffff"
)
# the segment files (FileStore also keeps a file "reserve", of 0xFF)
FILES = {
    "00000004.hfo": (
        "68664f4202460000040000000e000000919b82ba4d090f0000000000a10ffffff81ed846"
        "32090004646c2f610fa14100f15365ff4d0e0f0001000000a20fffff6a76051b34090004"
        "646c2f620fa24207f15365ff48000000010000000700ffffd60b160e4800000003000000"
        "0900ffff7b87a7f74d0241000e0000000d00ffff418cb0a0343f001273656e736f72732f"
        "6465762d312f74656d70000d54616e7b8895a2afbcc9d6e3f0fd0a1724313e4b5865727f"
        "8c99a6b3c0cddae7f4010e1b2835424f5cffffff520000000e0000000d00ffffdd0cd6ff"
        "440000000e0000000d00ffffa75b604a4d013e000f0000000e00ffff5ca367f8323c0012"
        "73656e736f72732f6465762d312f74656d70000e5b6875828f9ca9b6c3d0ddeaf704111e"
        "2b3845525f6c798693a0adbac7d4e1eefb0815222f3cffff4d012900100000000f00ffff"
        "7056655e32270003742f61000f626f7c8996a3b0bdcad7e4f1fe0b1825323f4c59667380"
        "8d9aa7b4c1cedbe8f5ffffff4d024a00110000001000ffff44f213843448001273656e73"
        "6f72732f6465762d312f74656d700010697683909daab7c4d1deebf805121f2c39465360"
        "6d7a8794a1aebbc8d5e2effc091623303d4a5764717e8b98a5b2bfccd9e6ffff44000000"
        "0f0000000e00ffff2b104a5f44000000100000000f00ffff38626ced5200000011000000"
        "1000ffffaa5ae466"
    ),
    "00000005.hfo": (
        "68664f420246000005000000120000002873e76c48000000070000000a00ffffe7bb2e7a"
        "44000000110000001000ffffd00d52d348000000080000000300ffffbd3ff51758000000"
        "000000000300ffffdd77def74d023b00120000001100ffff5850f20c3439001273656e73"
        "6f72732f6465762d312f74656d700011707d8a97a4b1becbd8e5f2ff0c192633404d5a67"
        "74818e9ba8b5c2cfdce9f603101d2aff4d021400130000001200fffff17ee74e34120003"
        "742f6100127784919eabb8c5d2dfecf952000000120000001100ffffc488d0dd44000000"
        "120000001100ffffbedf666848000000090000000100ffffaf7475ce4d023c0014000000"
        "1300ffffb907c824343a0003742f6100137e8b98a5b2bfccd9e6f3000d1a2734414e5b68"
        "75828f9ca9b6c3d0ddeaf704111e2b3845525f6c798693a0adbac7d4e1eefb0852000000"
        "140000001300ffff592ac87044000000140000001300ffff237d7ec55200000013000000"
        "1200ffff48c3fac858000000000000000100ffffa070fbb5"
    ),
}

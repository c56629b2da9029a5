# The durable outboxes: what a client promised to deliver, kept across a
# reboot or a power cut, on a filesystem (FileStore) or a raw flash partition
# (FlashStore). This package is a face: each store loads with its first use.
# Inside, by idea: log.py the record format and the in-RAM index both stores
# share; scan.py the reading back at boot (blocks.py its flash half), loaded
# while a store opens and unloaded after; compaction.py copying live records
# forward; latest.py what latest=True runs; heldlog.py the held QoS 2 ids,
# logged; softcrc.py the CRC where a port has no binascii.crc32.
# Format and recovery rules: docs/outbox.md.
_WHERE = {"FileStore": "files", "FlashStore": "flash"}


def __getattr__(name):
    m = _WHERE.get(name)
    if m is None:
        raise AttributeError(name)
    v = globals()[name] = getattr(__import__(m, globals(), None, (name,), 1), name)
    return v

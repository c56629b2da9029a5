# The CRC-32 of the record format (zlib's) without a table, for a port whose
# binascii has no crc32: log.py imports it only then, so a port that has one
# never loads it.


def crc32_soft(data, crc=0):
    """CRC-32 (the zlib one) of data, continuing from crc."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

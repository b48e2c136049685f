"""Compression bombs: small gzip and deflate bodies that inflate to many MiB of zeros.

Used by the hostile tests of request bodies and by ``bench/isolation.py``.
"""

from __future__ import annotations

import functools
import struct
import zlib

_MIB = 1 << 20


@functools.cache
def bomb(mib: int, coding: str) -> bytes:
    """A valid ``coding`` (gzip or deflate) body that inflates to ``mib`` MiB of zeros, made
    without compressing them all: a deflate stream of zeros, flushed per MiB, repeats one
    block (what costs is the check sum, about a second per GiB)."""
    gz = coding == "gzip"
    zeros = bytes(_MIB)
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS if gz else zlib.MAX_WBITS)
    first = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    check = 0 if gz else 1
    for _ in range(mib):
        check = zlib.crc32(zeros, check) if gz else zlib.adler32(zeros, check)
    trailer = (
        struct.pack("<II", check, (mib * _MIB) & 0xFFFFFFFF) if gz else struct.pack(">I", check)
    )
    return first + again * (mib - 1) + b"\x03\x00" + trailer  # the final, empty block

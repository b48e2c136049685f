"""A set of byte strings kept as 8-byte digests in one flat table: which keys were seen.

A Resource List snapshot reads the fold with ``HSCAN``, which may return an entry twice
while the hash is resized, so the snapshot remembers which URIs it has listed. For a topic
of 1,000,000 URIs a Python ``set`` of digests held ~70 bytes per URI (the digest object and
its slot); this table holds 16 to 32 (open addressing, linear probing, at most half full),
in one ``array`` allocation, never one object per key.

Two keys with the same 64-bit BLAKE2b digest count as one: among 1,000,000 keys that
happens with a probability of about 3 in 100,000,000.
"""

from __future__ import annotations

import hashlib
from array import array

#: Slots of a new table (a power of two).
_FIRST_SLOTS = 1024


class DigestSet:
    """Keys seen so far, by digest; :meth:`add` says whether a key is new."""

    __slots__ = ("_len", "_mask", "_slots")

    def __init__(self) -> None:
        self._slots = array("Q", bytes(8 * _FIRST_SLOTS))  # 0: an empty slot
        self._mask = _FIRST_SLOTS - 1
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def nbytes(self) -> int:
        """Memory the table holds (for tests and sizing)."""
        return self._slots.itemsize * len(self._slots)

    def add(self, key: bytes) -> bool:
        """Remember ``key``; True if it was not seen before."""
        digest = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") or 1
        if self._place(digest):
            self._len += 1
            if 2 * self._len > len(self._slots):
                self._grow()
            return True
        return False

    def _place(self, digest: int) -> bool:
        slots, mask = self._slots, self._mask
        i = digest & mask
        while True:  # ends: the table is never more than half full
            found = slots[i]
            if found == 0:
                slots[i] = digest
                return True
            if found == digest:
                return False
            i = (i + 1) & mask

    def _grow(self) -> None:
        old = self._slots
        self._slots = array("Q", bytes(16 * len(old)))
        self._mask = 2 * len(old) - 1
        for digest in old:
            if digest:
                self._place(digest)

"""The ``hash`` attribute (Section 7) as running digests: computed while bytes stream past.

A package writer fills ``hash`` from the bytes it packs; a reader, or a Destination
downloading a package, checks the bytes it reads against the ``hash`` it was promised,
without holding them: :class:`Digests` is fed chunk by chunk.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from .validate import check_hash

__all__ = ["WRITTEN_ALGORITHMS", "Digests"]

#: ``hash`` algorithm names (Section 7) and their :mod:`hashlib` constructors' names.
_HASHLIB_NAMES = {"md5": "md5", "sha-1": "sha1", "sha-256": "sha256"}
#: What a writer puts in ``hash``: md5 (the standard's examples) and sha-256 (collision-safe).
WRITTEN_ALGORITHMS = ("md5", "sha-256")


class Digests:
    """Running digests of the algorithms named, fed with :meth:`update`."""

    __slots__ = ("_hashes", "length")

    def __init__(self, algorithms: Iterable[str] = WRITTEN_ALGORITHMS) -> None:
        self._hashes = {
            name: hashlib.new(_HASHLIB_NAMES[name], usedforsecurity=False) for name in algorithms
        }
        #: Bytes fed so far.
        self.length = 0

    @classmethod
    def expecting(cls, value: str) -> Digests:
        """Digests for every algorithm a valid ``hash`` attribute value names.

        Raises:
            ValueError: ``value`` is not a valid ``hash`` value.
        """
        problem = check_hash(value)
        if problem is not None:
            raise ValueError(problem[1])
        return cls(dict.fromkeys(token.partition(":")[0] for token in value.split()))

    def update(self, chunk: bytes | memoryview) -> None:
        for digest in self._hashes.values():
            digest.update(chunk)
        self.length += len(chunk)

    def value(self) -> str:
        """The ``hash`` attribute value of the bytes so far: ``md5:... sha-256:...``."""
        return " ".join(f"{name}:{d.hexdigest()}" for name, d in self._hashes.items())

    def mismatch(self, expected: str) -> str | None:
        """The first token of ``expected`` the bytes so far do not match, else ``None``.

        Hex digits compare case-insensitively; algorithms not fed here are not checked.
        """
        for token in expected.split():
            name, _, hexdigest = token.partition(":")
            digest = self._hashes.get(name)
            if digest is not None and digest.hexdigest() != hexdigest.lower():
                return f"{name} is {digest.hexdigest()}, the manifest says {hexdigest}"
        return None

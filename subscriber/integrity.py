"""Checking fetched bytes against the ``length`` and ``hash`` a Source announced.

``rs:md/@hash`` is a space-separated list of ``algorithm:hexdigest`` with algorithms
``md5``, ``sha-1`` and ``sha-256`` (Z39.99-2014 Section 7); unknown algorithms are ignored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from .exceptions import IntegrityError

__all__ = ["ALGORITHMS", "check", "digests", "matches"]

#: ResourceSync hash algorithm names and their hashlib names.
ALGORITHMS = {"md5": "md5", "sha-1": "sha1", "sha-256": "sha256"}


def digests(announced: str) -> Iterator[tuple[str, str]]:
    """``(hashlib name, lower-case hex)`` for each known algorithm in ``announced``."""
    for item in announced.split():
        name, sep, value = item.partition(":")
        algo = ALGORITHMS.get(name.lower())
        if sep and algo is not None:
            yield algo, value.lower()


def matches(data: bytes, *, length: int | None, hash: str | None) -> str | None:
    """``None`` if ``data`` agrees with what was announced, else what differs."""
    if length is not None and len(data) != length:
        return f"length {len(data)} != announced {length}"
    if hash:
        for algo, expected in digests(hash):
            got = hashlib.new(algo, data).hexdigest()
            if got != expected:
                return f"{algo} {got} != announced {expected}"
    return None


def check(loc: str, data: bytes, *, length: int | None, hash: str | None) -> None:
    """Raise :class:`IntegrityError` if ``data`` does not match ``length``/``hash``."""
    problem = matches(data, length=length, hash=hash)
    if problem is not None:
        raise IntegrityError(loc, problem)

"""hub.core.digest_set: which keys were seen, in a flat table of 8-byte digests."""

from __future__ import annotations

import random
import sys

from hub.core.digest_set import DigestSet


def test_each_key_is_new_once_through_many_growths() -> None:
    seen = DigestSet()
    keys = [f"http://example.org/r{i}".encode() for i in range(50_000)]
    assert all(seen.add(k) for k in keys)
    assert len(seen) == len(keys)
    assert not any(seen.add(k) for k in keys)  # every one remembered after the growths
    assert len(seen) == len(keys)
    assert seen.add(b"http://example.org/other") and not seen.add(b"http://example.org/other")


def test_a_seeded_mix_of_repeats_agrees_with_a_set() -> None:
    rng = random.Random(20261202)
    seen, plain = DigestSet(), set()
    for _ in range(30_000):
        key = rng.randbytes(rng.randrange(0, 40))  # the empty key too
        assert seen.add(key) == (key not in plain)
        plain.add(key)
    assert len(seen) == len(plain)


def test_its_memory_is_a_fraction_of_a_set_of_digests() -> None:
    n = 200_000
    seen = DigestSet()
    digests = set()
    for i in range(n):
        key = f"http://example.org/{i}".encode()
        seen.add(key)
        digests.add(key[-12:])
    as_set = sys.getsizeof(digests) + sum(sys.getsizeof(d) for d in digests)
    assert seen.nbytes <= 32 * n
    assert seen.nbytes * 2 < as_set, (seen.nbytes, as_set)

"""The token bucket and its per-key map: pure arithmetic on a clock the test passes."""

from __future__ import annotations

import random

import pytest

from hub.core.token_bucket import TokenBucket, TokenBuckets


def test_a_burst_then_the_rate_and_the_wait_is_exact() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(100.0) == pytest.approx(0.5)  # one token every 1/2 s
    assert bucket.take(100.25) == pytest.approx(0.25)  # a refused take costs nothing
    assert bucket.take(100.5) == 0.0
    assert bucket.take(110.0) == 0.0 and bucket.tokens == pytest.approx(2.0)  # capped at burst


def test_a_clock_that_steps_back_grants_nothing() -> None:
    bucket = TokenBucket(rate=1.0, burst=1, now=50.0)
    assert bucket.take(50.0) == 0.0
    assert bucket.take(10.0) > 0  # earlier than the last take: no refill
    assert bucket.take(50.5) == pytest.approx(0.5)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)
    with pytest.raises(ValueError):
        TokenBucket(rate=1, burst=0)


def test_keys_have_their_own_buckets() -> None:
    buckets = TokenBuckets(rate=1.0, burst=2)
    assert buckets.take("a", 0.0) == 0.0 and buckets.take("a", 0.0) == 0.0
    assert buckets.take("a", 0.0) > 0
    assert buckets.take("b", 0.0) == 0.0


def test_idle_keys_are_forgotten_and_memory_stays_bounded() -> None:
    buckets = TokenBuckets(rate=10.0, burst=5, max_keys=1000)
    rng = random.Random(21)
    for i in range(20_000):  # addresses never seen again: a scan, or a spoofing client
        buckets.take(f"10.{rng.randrange(256)}.{rng.randrange(256)}.{i % 256}", i * 0.001)
        assert len(buckets) <= 1000
    # Later, once every bucket has refilled, one take sweeps them all away.
    buckets.take("late", 1000.0)
    assert len(buckets) == 1


def test_a_busy_key_is_kept_while_idle_ones_go() -> None:
    buckets = TokenBuckets(rate=1.0, burst=2, max_keys=3)
    for key in ("a", "b", "c"):
        buckets.take(key, 0.0)
    buckets.take("a", 0.0)  # "a" is now the most recently used
    buckets.take("d", 0.0)  # over max_keys: the least recently used ("b") goes
    assert buckets.take("a", 0.0) > 0  # "a" kept its (empty) bucket

"""hub.core.health: when a recorded ping vouches for Redis."""

from __future__ import annotations

from hub.core.health import RedisHealth


def test_nothing_recorded_vouches_for_nothing() -> None:
    assert not RedisHealth().vouched(100.0)


def test_a_recent_success_vouches_until_it_is_stale() -> None:
    health = RedisHealth()
    health.succeeded(100.0)
    assert health.vouched(100.0 + health.fresh_seconds - 0.1)
    assert not health.vouched(100.0 + health.fresh_seconds)


def test_a_failure_since_the_success_is_not_vouched_for() -> None:
    health = RedisHealth()
    health.succeeded(100.0)
    health.failed("connection refused")
    assert not health.vouched(100.1) and health.error == "connection refused"
    health.succeeded(100.2)
    assert health.vouched(100.3) and health.error is None

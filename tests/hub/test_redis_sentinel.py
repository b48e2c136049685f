"""A hub on ``redis+sentinel://`` follows a failover without a restart: a real master, two
replicas and three Sentinels (tests.redis_sentinel), the master SIGKILLed while two hubs
publish. With ``RSHUB_REDIS_WAIT_REPLICAS=1`` no acknowledged change is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hub.failover import run_failover
from tests.redis_sentinel import RedisSentinelProcesses
from tests.support import TIME_SCALE


@pytest.mark.timeout(60)
async def test_publishes_and_reads_follow_a_sentinel_failover(tmp_path: Path) -> None:
    # Two replicas: after the failover the promoted one still has a replica to WAIT for.
    with RedisSentinelProcesses(tmp_path / "redis", replicas=2) as redis:

        async def stored_ids(key: str) -> set[str]:
            client = redis.client(redis.master_port())
            try:
                return {i.decode() for i, _ in client.xrange(key)}
            finally:
                client.close()

        failover, figures, messages = await run_failover(
            redis.url,
            kill=redis.kill_master,
            await_failover=redis.await_failover,
            stored_ids=stored_ids,
        )
    plain, waited = figures
    print(f"\nSentinel failover: promoted after {failover:.2f}s")
    for figure in figures:
        print(f"Sentinel {figure.line()}")
    print("503 messages:", *messages, sep="\n  ")
    assert waited.lost == 0
    # Publishes resume soon after the promotion (not when something else happens to notice).
    for figure in figures:
        assert figure.outage_seconds < failover + 3.0 * TIME_SCALE, figure.line()
    assert plain.acked and waited.acked

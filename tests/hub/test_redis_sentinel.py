"""A hub on ``redis+sentinel://`` follows a failover without a restart: a real master, two
replicas and three Sentinels (tests.redis_sentinel), the master SIGKILLed while two hubs
publish. With ``RSHUB_REDIS_WAIT_REPLICAS=1`` no acknowledged change is lost. The same on
``rediss+sentinel://``, every server behind a TLS front (tests.redis_transports)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from hub.store.redis_connection import sentinel_for
from tests.hub.failover import run_failover
from tests.redis_sentinel import SERVICE, RedisSentinelProcesses
from tests.redis_transports import TlsSentinel
from tests.support import TIME_SCALE
from tests.watchdog import open_sockets, sockets_back


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_publishes_and_reads_follow_a_sentinel_failover(
    tmp_path: Path, transport: str
) -> None:
    # Two replicas: after the failover the promoted one still has a replica to WAIT for.
    with contextlib.ExitStack() as stack:
        url = ""
        if transport == "tls":  # rediss+sentinel://, every server behind a TLS front
            tls = stack.enter_context(TlsSentinel(tmp_path / "redis", replicas=2))
            redis, url = tls.redis, tls.url
        else:
            redis = stack.enter_context(RedisSentinelProcesses(tmp_path / "redis", replicas=2))

        async def stored_ids(key: str) -> set[str]:
            client = redis.client(redis.master_port())
            try:
                return {i.decode() for i, _ in client.xrange(key)}
            finally:
                client.close()

        failover, figures, messages = await run_failover(
            url or redis.url,
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


@pytest.mark.timeout(60)
async def test_concurrent_discoveries_keep_every_sentinel_asked_and_closed(
    tmp_path: Path,
) -> None:
    """redis-py moves the Sentinel that answered to the front with a swap made after its
    await: two discoveries answered by the same one at once put it in the list twice and
    drop another, which is then neither asked again nor closed (the failover test saw its
    connections left open). The first Sentinel named here monitors nothing, so every
    discovery is answered by the second, and twenty run at once."""
    with RedisSentinelProcesses(tmp_path / "redis", replicas=0) as redis:
        stranger = redis.stranger()
        hosts = ",".join(f"127.0.0.1:{p}" for p in [stranger, *redis.sentinel_ports])
        sockets = open_sockets()
        sentinel, spec = sentinel_for(f"redis+sentinel://{hosts}/{SERVICE}")
        assert spec.service == SERVICE
        made = list(sentinel.sentinels)
        masters = await asyncio.gather(*(sentinel.discover_master(SERVICE) for _ in range(20)))
        assert {int(port) for _, port in masters} == {redis.master_port()}
        assert sorted(map(id, sentinel.sentinels)) == sorted(map(id, made))
        assert open_sockets() > sockets  # the answering Sentinel's connections
        await sentinel.aclose()
        await sockets_back(sockets, timeout=5)

"""A hub on a Redis Cluster carries on when a master dies: a replica is promoted, the hub's
clients (redis-py's, and the script pipe's own connections) find it, no restart. Both
hubs' topics live on the master that is SIGKILLed; with ``RSHUB_REDIS_WAIT_REPLICAS=1``
no acknowledged change is lost. The same over TLS (``rediss://`` with
``RSHUB_REDIS_CLUSTER=true``, every node behind a TLS front)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from redis.crc import key_slot

from hub.store import keys
from tests.hub.failover import run_failover
from tests.redis_cluster import RedisClusterProcesses
from tests.redis_transports import TlsCluster
from tests.support import TIME_SCALE


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_publishes_and_reads_follow_a_cluster_failover(
    tmp_path: Path, transport: str
) -> None:
    # Two replicas per master: after the failover the promoted one still has one to WAIT
    # for. A short node timeout makes the failover take seconds, not tens of seconds.
    with contextlib.ExitStack() as stack:
        tls: TlsCluster | None = None
        if transport == "tls":  # every node behind a TLS front (tests.redis_transports)
            tls = stack.enter_context(
                TlsCluster(tmp_path / "redis", replicas=2, node_timeout_ms=1000)
            )
            cluster = tls.cluster
        else:
            cluster = stack.enter_context(
                RedisClusterProcesses(tmp_path / "redis", replicas=2, node_timeout_ms=1000)
            )
        slot = key_slot(keys.events("plain").encode())
        victim = cluster.owner(slot)
        waited = next(
            name
            for name in (f"waited{i}" for i in range(1000))
            if cluster.owner(key_slot(keys.events(name).encode())) == victim
        )

        def kill() -> int:
            cluster.kill(victim)
            return victim

        async def stored_ids(key: str) -> set[str]:
            client = cluster.client(cluster.owner(key_slot(key.encode())))
            try:
                return {i.decode() for i, _ in client.xrange(key)}
            finally:
                client.close()

        host, port = cluster.nodes[0] if cluster.nodes[0][1] != victim else cluster.nodes[1]
        url, extra = f"redis+cluster://{host}:{port}", {}
        if tls is not None:
            url, extra = tls.front_of[port].url, {"redis_cluster": True}
        failover, figures, messages = await run_failover(
            url,
            extra=extra,
            kill=kill,
            await_failover=lambda old: cluster.await_failover(old, slot),
            stored_ids=stored_ids,
            topics=("plain", waited),
        )
    plain, waited_figures = figures
    print(f"\nCluster failover: promoted after {failover:.2f}s")
    for figure in figures:
        print(f"Cluster {figure.line()}")
    print("503 messages:", *messages, sep="\n  ")
    assert waited_figures.lost == 0
    # Publishes resume soon after the promotion (not when something else happens to notice).
    for figure in figures:
        assert figure.outage_seconds < failover + 3.0 * TIME_SCALE, figure.line()
    assert plain.acked and waited_figures.acked

"""The three-master cluster fixture is a real cluster, a replica per master: redis-py's cluster
client routes keys to every master, runs Lua on hash-tagged keys and reads streams through it."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from tests.redis_cluster import SLOT_RANGES, RedisClusterProcesses


def _slot_owners(cluster: RedisClusterProcesses) -> dict[tuple[int, int], int]:
    """``CLUSTER NODES`` as each master sees it: slot range -> port, identical on all nodes."""
    views = []
    for _, port in cluster.nodes:
        client = cluster.client(port)
        nodes = client.cluster("NODES")
        client.close()
        views.append(
            {
                (int(first), int(last)): int(address.rsplit(":", 1)[1])
                for address, node in nodes.items()
                if "master" in node["flags"]
                for first, last in node["slots"]
            }
        )
    assert all(view == views[0] for view in views)
    return views[0]


def test_three_masters_own_the_configured_slot_ranges(
    redis_cluster: RedisClusterProcesses,
) -> None:
    owners = _slot_owners(redis_cluster)
    assert sorted(owners) == sorted(SLOT_RANGES)
    assert sorted(owners.values()) == sorted(port for _, port in redis_cluster.nodes)
    # One replica per master, following it (failover: tests/hub/test_redis_cluster_failover.py).
    client = redis_cluster.client(redis_cluster.nodes[0][1])
    nodes = client.cluster("NODES")
    client.close()
    ids = {int(address.rsplit(":", 1)[1]): node["node_id"] for address, node in nodes.items()}
    followed = sorted(node["master_id"] for node in nodes.values() if "slave" in node["flags"])
    assert followed == sorted(ids[port] for _, port in redis_cluster.nodes)


async def test_cluster_client_routes_runs_lua_and_streams(
    redis_cluster: RedisClusterProcesses,
) -> None:
    owners = _slot_owners(redis_cluster)
    client = RedisCluster.from_url(redis_cluster.url)
    try:
        await client.initialize()
        assert len(client.get_primaries()) == 3
        keys = [f"fixture:key:{i}" for i in range(24)]
        for key in keys:
            await client.set(key, key)
        landed: set[int] = set()
        probe = redis_cluster.client(redis_cluster.nodes[0][1])
        for key in keys:
            slot = int(probe.cluster("KEYSLOT", key))
            port = next(p for (lo, hi), p in owners.items() if lo <= slot <= hi)
            node = redis_cluster.client(port)
            assert node.get(key) == key.encode()  # really stored on the slot's owner
            node.close()
            landed.add(port)
        probe.close()
        assert landed == {port for _, port in redis_cluster.nodes}

        script = (
            "redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]);"
            " return redis.call('MGET', KEYS[1], KEYS[2])"
        )
        assert await client.eval(script, 2, "{lua}:a", "{lua}:b", "x") == [b"x", b"x"]
        with pytest.raises(RedisClusterException):  # no shared hash tag: different slots
            await client.eval(script, 2, "lua:a", "lua:b", "x")

        stream = "rshub:{fixture-topic}:events"
        first = await client.xadd(stream, {"loc": "http://example.org/a"})
        second = await client.xadd(stream, {"loc": "http://example.org/b"})
        read: Any = await client.xread({stream: "0-0"}, count=10)
        assert read == [
            [
                stream.encode(),
                [
                    (first, {b"loc": b"http://example.org/a"}),
                    (second, {b"loc": b"http://example.org/b"}),
                ],
            ]
        ]
        after_first: Any = await client.xread({stream: first}, count=10)
        assert [entry_id for entry_id, _ in after_first[0][1]] == [second]
    finally:
        await client.aclose()

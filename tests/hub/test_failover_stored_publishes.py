"""A publish that was stored is never answered 503, and one whose outcome is uncertain is
stored once when retried with its Idempotency-Key, answered with its ids.

A Redis Cluster of three masters (one replica each), a hub without ``WAIT``, publishers on
one topic per master, and the master of the first topic SIGKILLed mid-way. The hub's
script pipe sends one batch over a connection per master: a publish on a master that lives
ran there, whatever happened to the dead master's share of the same batch. Such a publish
retried and answered "replayed" had been refused though stored. On the dead master's topic
a publish in flight may or may not have run: retried with its key, it is stored once and
answered with the ids it was stored under.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from redis.crc import key_slot

from hub.core.settings import Settings
from hub.store import keys
from tests.conftest import start_hub
from tests.redis_cluster import RedisClusterProcesses
from tests.support import TIME_SCALE, free_port, notification, wait_for

PUBLISHERS = 3
#: Publishes acknowledged on each topic before the kill, and again after the promotion.
BEFORE, AFTER = 20, 10


@dataclass
class Publish:
    loc: str
    #: Attempts answered 503 (or cut off) before the 202.
    refused: int = 0
    ids: list[str] = field(default_factory=list)
    replayed: bool = False
    acked_at: float = 0.0


async def _publish_loop(
    session: aiohttp.ClientSession,
    url: str,
    topic: str,
    worker: int,
    done: dict[str, Publish],
    stop: asyncio.Event,
) -> None:
    n = 0
    while not stop.is_set():
        key = f"{topic}-{worker}-{n}"
        publish = Publish(f"http://example.org/{key}")
        body = notification([{"loc": publish.loc}])
        while not stop.is_set():  # the same publish again, with its key, until a 202
            try:
                async with session.post(
                    f"{url}/topics/{topic}",
                    data=body,
                    headers={"Content-Type": "application/xml", "Idempotency-Key": key},
                    timeout=aiohttp.ClientTimeout(total=15 * TIME_SCALE),
                ) as resp:
                    answer = await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                publish.refused += 1
            else:
                if resp.status == 202:
                    reply = json.loads(answer)
                    publish.ids, publish.replayed = reply["ids"], reply["replayed"]
                    publish.acked_at = time.monotonic()
                    done[key] = publish
                    break
                assert resp.status == 503, (resp.status, answer)
                publish.refused += 1
            await asyncio.sleep(0.02)  # a publisher's back-off, not a wait for a state
        n += 1


@pytest.mark.timeout(60)
async def test_no_stored_publish_is_refused_and_a_retried_one_is_stored_once(
    tmp_path: Path,
) -> None:
    with RedisClusterProcesses(tmp_path / "redis", replicas=1, node_timeout_ms=1000) as cluster:
        masters = [port for _, port in cluster.nodes]
        topics = [
            next(
                name
                for name in (f"p{i}" for i in range(1000))
                if cluster.owner(key_slot(keys.events(name).encode())) == master
            )
            for master in masters
        ]
        victim, slot = masters[0], key_slot(keys.events(topics[0]).encode())
        settings = Settings(
            host="127.0.0.1",
            port=free_port(),
            redis_url=f"redis+cluster://127.0.0.1:{masters[1]}",
            allow_private_callbacks=True,
        )
        runner, _app = await start_hub(settings, settings.redis_url or "")
        done: dict[str, dict[str, Publish]] = {topic: {} for topic in topics}
        stop = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []
        try:
            async with aiohttp.ClientSession() as session:
                for topic in topics:
                    for worker in range(PUBLISHERS):
                        tasks.append(
                            asyncio.create_task(
                                _publish_loop(
                                    session, settings.public_url, topic, worker, done[topic], stop
                                )
                            )
                        )
                await wait_for(lambda: min(map(len, done.values())) >= BEFORE, timeout=20)
                cluster.kill(victim)
                failover = await asyncio.to_thread(cluster.await_failover, victim, slot)
                promoted_at = time.monotonic()

                def acked_after() -> int:
                    return min(
                        sum(1 for p in publishes.values() if p.acked_at >= promoted_at)
                        for publishes in done.values()
                    )

                await wait_for(lambda: acked_after() >= AFTER, timeout=20)
                stop.set()
                await asyncio.wait_for(asyncio.gather(*tasks), timeout=20 * TIME_SCALE)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await runner.cleanup()

        stored: dict[str, dict[str, list[str]]] = {}  # topic -> loc -> ids
        for topic in topics:
            client = cluster.client(cluster.owner(key_slot(keys.events(topic).encode())))
            try:
                rows = keys.event_rows(client.xrange(keys.events(topic)))
            finally:
                client.close()
            by_loc = stored[topic] = {}
            for event_id, event in rows:
                by_loc.setdefault(json.loads(event)["loc"], []).append(event_id)

    print(f"\nCluster failover: promoted after {failover:.2f}s")
    for topic in topics:
        publishes = done[topic].values()
        refused = [p for p in publishes if p.refused]
        print(
            f"  {topic}{' (killed master)' if topic == topics[0] else ''}: "
            f"{len(publishes)} acknowledged, {len(refused)} after a 503, "
            f"{sum(p.replayed for p in refused)} of those had been stored (replayed)"
        )
    for topic in topics:
        for key, publish in done[topic].items():
            # Stored once, and answered with the ids it was stored under.
            assert stored[topic].get(publish.loc) == publish.ids, (key, publish)
    for topic in topics[1:]:  # the masters that lived ran every publish sent to them
        refused_though_stored = [k for k, p in done[topic].items() if p.refused and p.replayed]
        assert not refused_though_stored, (topic, refused_though_stored)

"""An exact Resource List read without holding Redis, against the stream folded by hand.

:meth:`ResourceSnapshots.exact` scans the live fold, then replays the events appended while
it scanned. Each read here is held to what every change appended up to the read's last id
gives when folded in order (the log this test keeps of its own appends), with publishes
slipped in between the scan's batches; retention trimming events before the replay read
them sends it to the copy in one step, which must be exact as well.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from hub.core import resource_states
from hub.core.events import Change, parse_id
from hub.store import keys, scripts, snapshots
from hub.store.event_store import EventStore, Retention
from hub.store.snapshots import Exact, ResourceSnapshots
from tests.redis_cluster import RedisClusterProcesses

LOCS = [f"http://example.org/r/{i}" for i in range(400)]


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Any]:
    redis = aioredis.Redis.from_url(redis_url)
    yield redis
    await redis.aclose()


class Topic:
    """One topic's store, its snapshots and the log of every change appended, by id."""

    def __init__(self, client: Any, retention: Retention | None = None) -> None:
        self.store = EventStore(client, retention=retention)
        self.snapshots = ResourceSnapshots(
            client, self.store.scripts, page_entries=50_000, reuse_seconds=60, ttl_seconds=60
        )
        self.log: list[tuple[str, str, str, bytes]] = []
        self.scripts_run: list[Any] = []
        run = self.store.scripts.run

        async def counted(script: Any, script_keys: Any, args: list[Any], **kw: Any) -> Any:
            self.scripts_run.append(script)
            return await run(script, script_keys, args, **kw)

        self.store.scripts.run = counted  # type: ignore[method-assign]

    async def append(self, changes: list[tuple[str, str]]) -> None:
        # Most with a lastmod, so packed; every third without: stored in the earlier form.
        n = len(self.log)
        stored = [
            Change(
                loc,
                kind,
                orjson.dumps(
                    {"loc": loc, "change": kind, "n": n}
                    | ({"lastmod": "2026-12-02T10:00:00Z"} if (n + i) % 3 else {})
                ),
            )
            for i, (loc, kind) in enumerate(changes)
        ]
        appended = await self.store.append("t", stored)
        for event_id, change in zip(appended.ids, stored, strict=True):
            self.log.append((event_id, change.loc, change.change, change.event))

    def folded(self, upto: str | None) -> dict[bytes, bytes]:
        """The fold after every logged change up to ``upto``, as the append script folds."""
        fold: dict[bytes, bytes] = {}
        for event_id, loc, kind, event in self.log:
            if upto is None or parse_id(event_id) > parse_id(upto):
                break
            if kind == "deleted":
                fold.pop(loc.encode(), None)
            else:
                fold[loc.encode()] = resource_states.encode(event_id, event)
        return fold

    def between_scan_batches(self, client: Any, changes: Any) -> None:
        """Append ``changes()`` before each HSCAN of the fold (publishes mid-scan)."""
        hscan = client.hscan

        async def interleaved(key: str, *args: Any, **kw: Any) -> Any:
            if key == keys.resources("t"):
                await self.append(changes())
            return await hscan(key, *args, **kw)

        client.hscan = interleaved

    async def close(self) -> None:
        await self.store.close()


@pytest.fixture
async def topic(client: Any, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Topic]:
    """A topic of 400 created locs, its fold scanned 25 at a time (several batches)."""
    monkeypatch.setattr(snapshots, "SCAN_BATCH", 25)
    made = Topic(client)
    try:
        await made.append([(loc, "created") for loc in LOCS])
        yield made
    finally:
        await made.close()


async def test_a_quiet_fold_is_read_by_scan_without_a_copy(client: Any, topic: Topic) -> None:
    await topic.append([(loc, "deleted") for loc in LOCS[::7]])
    exact = await topic.snapshots.exact("t")
    assert isinstance(exact, Exact)
    assert exact.last_id == topic.log[-1][0]
    assert exact.fold == topic.folded(exact.last_id) == await client.hgetall(keys.resources("t"))
    assert scripts.EXACT_RESOURCELIST not in topic.scripts_run
    # Both forms of a state, read alike: packed, and an earlier hub's (no lastmod here).
    assert {value[0] == resource_states.FORMAT for value in exact.fold.values()} == {True, False}


async def test_publishes_during_the_scan_are_replayed_into_the_read(
    client: Any, topic: Topic
) -> None:
    # Each batch of the scan sees three more changes: an update, a delete, a create.
    k = iter(range(10**6))

    def three() -> list[tuple[str, str]]:
        i = next(k)
        return [
            (LOCS[(i * 3) % 400], "updated"),
            (LOCS[(i * 5 + 1) % 400], "deleted"),
            (f"http://example.org/new/{i}", "created"),
        ]

    topic.between_scan_batches(client, three)
    exact = await topic.snapshots.exact("t")
    assert isinstance(exact, Exact)
    first_replayed = topic.log[len(LOCS)][0]
    assert parse_id(exact.last_id or "0-0") >= parse_id(first_replayed)
    assert exact.fold == topic.folded(exact.last_id)
    assert scripts.RANGE_TRIMMED in topic.scripts_run  # the replay ran
    assert scripts.EXACT_RESOURCELIST not in topic.scripts_run


@pytest.mark.parametrize("seed", range(6))
async def test_seeded_publishes_between_batches_never_make_a_read_inexact(
    client: Any, topic: Topic, seed: int
) -> None:
    rng = random.Random(seed)

    def some() -> list[tuple[str, str]]:
        return [
            (rng.choice(LOCS), rng.choice(["created", "updated", "deleted"]))
            for _ in range(rng.randrange(0, 5))
        ]

    topic.between_scan_batches(client, some)
    for _ in range(6):
        exact = await topic.snapshots.exact("t")
        assert isinstance(exact, Exact)
        assert exact.fold == topic.folded(exact.last_id)
    assert scripts.EXACT_RESOURCELIST not in topic.scripts_run


async def test_an_unreadable_event_sends_the_replay_to_the_copy(client: Any, topic: Topic) -> None:
    async def opaque() -> None:  # an event the replay cannot fold: no loc in its JSON
        appended = await topic.store.append("t", [Change(LOCS[0], "updated", b"{}")])
        topic.log.append((appended.ids[0], LOCS[0], "updated", b"{}"))

    hscan = client.hscan

    async def interleaved(key: str, *args: Any, **kw: Any) -> Any:
        await opaque()
        return await hscan(key, *args, **kw)

    client.hscan = interleaved
    exact = await topic.snapshots.exact("t")
    assert isinstance(exact, Exact)
    assert scripts.EXACT_RESOURCELIST in topic.scripts_run
    assert exact.fold == topic.folded(exact.last_id)


async def test_events_trimmed_before_the_replay_read_them_send_it_to_the_copy(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshots, "SCAN_BATCH", 25)
    topic = Topic(client, Retention(max_events=5))
    try:
        await topic.append([(loc, "created") for loc in LOCS])
        k = iter(range(10**6))
        # Ten changes between batches, five kept: what the replay needs is always gone.
        topic.between_scan_batches(
            client, lambda: [(LOCS[(next(k) * 7) % 400], "updated") for _ in range(10)]
        )
        exact = await topic.snapshots.exact("t")
        assert isinstance(exact, Exact)
        assert scripts.EXACT_RESOURCELIST in topic.scripts_run
        assert exact.fold == topic.folded(exact.last_id)
        assert exact.last_id == topic.log[-1][0]
    finally:
        await topic.close()


async def test_the_scan_and_replay_on_a_redis_cluster(
    redis_cluster: RedisClusterProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probes and the replay's reads are scripts on the topic's hash-tagged keys, the scan
    an ``HSCAN`` of one key: all routed to the topic's node by the cluster client."""
    for _, port in redis_cluster.nodes:
        node = redis_cluster.client(port)
        node.flushall()
        node.close()
    host, port = redis_cluster.nodes[0]
    client = RedisCluster(host=host, port=port)
    monkeypatch.setattr(snapshots, "SCAN_BATCH", 25)
    topic = Topic(client)
    try:
        await topic.append([(loc, "created") for loc in LOCS])
        k = iter(range(10**6))
        topic.between_scan_batches(
            client,
            lambda: [
                (LOCS[(next(k) * 11) % 400], "deleted"),
                (f"http://example.org/c/{next(k)}", "created"),
            ],
        )
        exact = await topic.snapshots.exact("t")
        assert isinstance(exact, Exact)
        assert exact.fold == topic.folded(exact.last_id)
        assert scripts.RANGE_TRIMMED in topic.scripts_run
        assert scripts.EXACT_RESOURCELIST not in topic.scripts_run
    finally:
        await topic.close()
        await client.aclose()

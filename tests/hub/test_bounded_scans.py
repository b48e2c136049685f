"""Scripts that read stream entries hold Redis for everyone (~2.7 us an entry into Lua): each
call reads at most ~1,000, the caller looping, and the answers stay what they were.

The bound is checked by what each call reads (its replies, or the ``COUNT`` of every
``XRANGE``/``XREVRANGE`` a script issues, seen by ``MONITOR``), never by timing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from hub.core.events import Change
from hub.store import keys, scripts, topic_admin
from hub.store.event_store import EventStore, Retention
from hub.store.stream_stats import StreamStats
from hub.store.subscriptions import SubscriptionStore
from hub.store.topic_admin import COUNT_AFTER, TopicAdmin
from tests.support import TIME_SCALE

#: Opens an :class:`EventStore` on the test's client, closed after the test.
OpenStore = Callable[..., EventStore]


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Any]:
    redis = aioredis.Redis.from_url(redis_url)
    yield redis
    await redis.aclose()


@pytest.fixture
async def open_store(client: Any) -> AsyncIterator[OpenStore]:
    opened: list[EventStore] = []

    def open_one(**kw: Any) -> EventStore:
        opened.append(EventStore(client, **kw))
        return opened[-1]

    yield open_one
    for store in reversed(opened):
        await store.close()


async def publish(store: EventStore, topic: str, n: int, batch: int = 500) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, batch):
        locs = [f"http://example.org/{i}" for i in range(start, min(n, start + batch))]
        done = await store.append(topic, [Change(loc, "updated", b"{}") for loc in locs])
        ids += done.ids
    return ids


def spy(
    store: EventStore, monkeypatch: pytest.MonkeyPatch, script: Any, sent: list[int] | None = None
) -> list[Any]:
    """The replies of every call of ``script`` through ``store.scripts`` (and into ``sent``,
    how many arguments each call had)."""
    replies: list[Any] = []
    run = store.scripts.run

    async def recorded(called: Any, script_keys: Any, args: list[Any], **kw: Any) -> Any:
        out = await run(called, script_keys, args, **kw)
        if called is script:
            replies.append(out)
            if sent is not None:
                sent.append(len(args))
        return out

    monkeypatch.setattr(store.scripts, "run", recorded)
    return replies


async def stream_reads(redis_url: str, action: Callable[[], Awaitable[None]]) -> list[int]:
    """The ``COUNT`` of every ``XRANGE``/``XREVRANGE`` scripts issued during ``action``."""
    client = aioredis.Redis.from_url(redis_url)
    marker = f"bounded-scans-done-{time.monotonic_ns()}"
    counts: list[int] = []
    try:
        async with client.monitor() as monitor:
            await action()
            await client.echo(marker)  # on another of the pool's connections

            async def read() -> None:
                while True:
                    seen = await monitor.next_command()
                    words = seen["command"].split()
                    if marker in seen["command"]:
                        return
                    if seen["client_type"] == "lua" and words[0] in ("XRANGE", "XREVRANGE"):
                        upper = [w.upper() for w in words]
                        counts.append(int(words[upper.index("COUNT") + 1]))

            await asyncio.wait_for(read(), timeout=30 * TIME_SCALE)
    finally:
        await client.aclose()
    return counts


async def test_a_backlog_scrape_reads_a_thousand_entries_per_call(
    client: Any, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 positions 10,000 behind were one call reading 200,000 entries (~0.5 s of Redis)."""
    store = open_store()
    ids = await publish(store, "b", 2_500)
    replies = spy(store, monkeypatch, scripts.BACKLOG)
    stats = StreamStats(client, store.scripts)
    positions = ["0-0", ids[0], ids[1_199], ids[-1], "0-0"]
    got = await stats.backlogs("b", positions, cap=2_400)
    per_call = [sum(int(row[0]) for row in reply) for reply in replies]
    assert max(per_call) <= 1_000
    assert sum(per_call) == 2_400 + 2_400 + 1_300 + 0 + 2_400
    assert [(b.events, b.capped, b.first_id) for b in got] == [
        (2_400, True, ids[0]),
        (2_400, True, ids[1]),
        (1_300, False, ids[1_200]),
        (0, False, None),
        (2_400, True, ids[0]),
    ]
    whole = await stats.backlogs("b", ["0-0", ids[999], ids[0]])
    assert [(b.events, b.capped, b.first_id) for b in whole] == [
        (2_500, False, ids[0]),
        (1_500, False, ids[1_000]),
        (2_499, False, ids[1]),
    ]
    assert await stats.backlogs("b", []) == []


async def test_a_scrape_of_many_positions_sends_two_hundred_a_call(
    client: Any, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """450 subscriptions of one topic: each call carries at most 200 positions (the budget
    reaches only some), not all of them again and again."""
    store = open_store()
    ids = await publish(store, "p", 300)
    sent: list[int] = []
    replies = spy(store, monkeypatch, scripts.BACKLOG, sent)
    positions = [ids[i % 300] for i in range(450)]
    got = await StreamStats(client, store.scripts).backlogs("p", positions, cap=100)
    assert max(sent) <= 1 + 2 * 200
    assert max(sum(int(row[0]) for row in reply) for reply in replies) <= 1_000
    expected = []
    for i in range(450):
        behind = 299 - i % 300
        first = ids[i % 300 + 1] if behind else None
        expected.append((min(behind, 100), behind >= 100, first))
    assert [(b.events, b.capped, b.first_id) for b in got] == expected


async def test_a_lag_is_counted_a_thousand_entries_per_call(
    client: Any, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's lag of 100,000 was one call reading them all (~0.3 s of Redis)."""
    store = open_store()
    ids = await publish(store, "l", 2_500)
    admin = TopicAdmin(client, store.scripts, SubscriptionStore(client))
    replies = spy(store, monkeypatch, COUNT_AFTER)
    assert await admin.count_after("l", ids[0]) == 2_499
    per_call = [int(r[0]) if isinstance(r, list) else int(r) for r in replies]
    assert per_call == [1_000, 1_000, 499]
    assert await admin.count_after("l", ids[1_499]) == 1_000
    assert await admin.count_after("l", ids[-1]) == 0
    assert await admin.count_after("l", None) == 2_500  # older than all: XLEN
    assert await admin.count_after("l", "0-0") == 2_500
    assert await admin.count_after("nothing", ids[0]) == 0
    monkeypatch.setattr(topic_admin, "LAG_CAP", 1_500)
    assert await admin.count_after("l", ids[0]) == 1_500


async def test_an_age_trim_reads_no_expired_entries(
    redis_url: str, client: Any, open_store: OpenStore
) -> None:
    """Expiring 5,000 events read 10,000 a publish to learn the newest one's id."""
    store = open_store(retention=Retention(seconds=3600))
    old = [f"{1_000 + i}-0" for i in range(5_000)]
    async with client.pipeline(transaction=False) as pipe:
        for eid in old:
            pipe.xadd(keys.events("a"), {keys.EVENT_FIELD: b"{}"}, id=eid)
        await pipe.execute()
    fresh: list[str] = []

    async def publish_one() -> None:
        done = await store.append("a", [Change("http://e.org/1", "updated", b"{}")])
        fresh.extend(done.ids)

    reads = await stream_reads(redis_url, publish_one)
    assert reads and max(reads) <= 1
    assert await store.trimmed_through("a") == old[-1]
    assert await store.length("a") == 1
    assert await store.first_id("a") == fresh[0]


async def test_a_length_trim_is_cut_a_thousand_a_call_to_the_same_end(
    redis_url: str, client: Any, open_store: OpenStore
) -> None:
    """A stream 4,000 beyond its bound was read whole in one publish to learn the id to
    trim through; now 1,000 a call, the rest by the next calls, to the same trimmed id."""
    store = open_store()
    bounded = open_store(retention=Retention(max_events=1_000))
    ids = await publish(store, "m", 5_000)
    appended: list[str] = []

    async def publish_one() -> None:
        done = await bounded.append("m", [Change("http://e.org/1", "updated", b"{}")])
        appended.extend(done.ids)
        await bounded.trim("m")

    reads = await stream_reads(redis_url, publish_one)
    every = ids + appended
    assert reads and max(reads) <= 1_000
    assert await bounded.length("m") == 1_000
    assert await bounded.trimmed_through("m") == every[-1_001]
    assert await bounded.first_id("m") == every[-1_000]
    # A publish bigger than the bound of a call still leaves the stream at its bound.
    more = await publish(bounded, "m", 3_000, batch=3_000)
    assert await bounded.length("m") == 1_000
    assert await bounded.trimmed_through("m") == more[-1_001]


async def test_one_publish_beyond_the_bound_is_trimmed_by_the_next_ones(
    open_store: OpenStore,
) -> None:
    """Each publish cuts 1,000 at most; the trimmed-through id is always the newest cut."""
    store = open_store()
    bounded = open_store(retention=Retention(max_events=100))
    every = await publish(store, "n", 2_300)
    lengths, trimmed = [], []
    for _ in range(3):
        every += (await bounded.append("n", [Change("http://e.org/x", "updated", b"{}")])).ids
        lengths.append(await bounded.length("n"))
        trimmed.append(await bounded.trimmed_through("n"))
    assert lengths == [1_301, 302, 100]
    cut = len(every) - 100
    assert trimmed == [every[999], every[1_999], every[cut - 1]]


async def test_a_released_hold_is_trimmed_a_thousand_a_call_by_the_sweep(
    redis_url: str, client: Any, open_store: OpenStore
) -> None:
    """A hold let go of 2,900 events: each call cuts 1,000 (was 2,000), and one
    ``EventStore.trim`` (the retention sweep) goes on until the bound holds."""
    store = open_store()
    held = open_store(
        retention=Retention(max_events=100, hold_max_events=10_000, hold_seconds=3600)
    )
    ids = await publish(store, "h", 3_000)
    newest_ms = int(ids[-1].split("-")[0])
    await client.hset(keys.cursors("h"), "http://cb.invalid/", ids[-1])
    await client.zadd(keys.holds("h"), {"http://cb.invalid/": newest_ms + 1})
    appended: list[str] = []

    async def publish_and_sweep() -> None:
        done = await held.append("h", [Change("http://e.org/1", "updated", b"{}")])
        appended.extend(done.ids)
        assert await held.length("h") == 3_001 - 1_000
        await held.trim("h")

    reads = await stream_reads(redis_url, publish_and_sweep)
    assert reads and max(reads) <= 1_000
    assert await held.length("h") == 100
    assert await held.trimmed_through("h") == [*ids, *appended][-101]

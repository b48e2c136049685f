"""Tail notices (hub.store.tail_notices): how a process's live feeds hear of the other
processes' appends, without being told back their own (the XREAD echo).

Real Redis, several "processes" in one loop: each an EventStore, a FeedHub and an Ingest of
its own, as ``rshub serve`` builds them. Named cases, then a seeded fuzz of appends from
every process and from outside, killed notice connections and feeds started and stopped,
under the watchdog; every live client must end with every event once, in stream order.
Each over TCP, a unix socket and TLS (``any_redis_url``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from hub.core.tasks import Tasks
from hub.live import feed as feed_module
from hub.live.feed import ClientStream, FeedHub, TopicFeed
from hub.live.ingest import Ingest
from hub.store import keys
from hub.store.event_store import EventStore
from hub.store.tail_notices import Notice
from tests.hub.test_feed_tail import Recorder, change
from tests.support import wait_for
from tests.watchdog import Watchdog


class Process:
    """One hub process's store, feeds and ingest, counting the notices it is told."""

    def __init__(self, url: str) -> None:
        self.client = aioredis.Redis.from_url(url)
        # Wired as hub.live.runtime wires them: the store reports uncertain appends.
        self.store = EventStore(self.client, uncertain=lambda topic: self.feeds.unsure(topic))
        self.feeds = FeedHub(self.store, Tasks("feeds", peers=True))
        self.ingest = Ingest(self.store, self.feeds)
        self.told: list[str] = []
        #: When a list, the notices go there instead, for the test to hand over in its order.
        self.held_back: list[Notice] | None = None
        #: The stream reads of this process's feeds (``EventStore.range``): gaps read.
        self.ranges = 0
        noticed = self.noticed = self.feeds._noticed
        store_range = self.store.range

        def counting(notice: Notice) -> None:
            self.told.extend(eid for eid, _ in notice.rows)
            if self.held_back is not None:
                self.held_back.append(notice)
            else:
                noticed(notice)

        async def counted_range(*args: Any, **kwargs: Any) -> Any:
            self.ranges += 1
            return await store_range(*args, **kwargs)

        self.store.range = counted_range  # type: ignore[method-assign]

        self.feeds._noticed = counting  # type: ignore[method-assign]

    async def close(self) -> None:
        await self.feeds.close()
        await self.store.close()
        await self.client.aclose()


async def live(process: Process, topic: str) -> tuple[TopicFeed, ClientStream, Recorder]:
    feed, client, recorder, _ = await live_from(process, topic)
    return feed, client, recorder


async def live_from(process: Process, topic: str) -> tuple[TopicFeed, ClientStream, Recorder, str]:
    """A live client of ``topic`` on ``process``, and the XRANGE start of what it gets."""
    feed = await process.feeds.acquire(topic)
    recorder = Recorder()
    start = feed.last_key
    client = ClientStream(feed, start, capacity=100_000, writer=recorder)
    assert await client.next(0.01) is None
    assert client.live and feed.by_notice
    return feed, client, recorder, f"({start[0]}-{start[1]}"


async def stream_ids(client: Any, topic: str, after: str = "-") -> list[str]:
    rows = await client.xrange(keys.events(topic), after, "+")
    return [eid.decode() for eid, _ in rows]


async def kill_notices(redis: Any, process: Process) -> int:
    """Close ``process``'s notices connection from Redis's side, found by its name."""
    name = f"{keys.TAIL_CHANNEL}{process.feeds.node}"
    ids = [c["id"] for c in await redis.client_list() if c.get("name") == name]
    killed = [await redis.client_kill_filter(_id=i) for i in ids]
    return sum(1 for k in killed if k)


@pytest.fixture
async def redis(any_redis_url: str) -> AsyncIterator[Any]:
    client = aioredis.Redis.from_url(any_redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def two(any_redis_url: str) -> AsyncIterator[tuple[Process, Process]]:
    a, b = Process(any_redis_url), Process(any_redis_url)
    yield a, b
    await a.close()
    await b.close()


async def test_a_process_is_told_of_the_others_appends_not_of_its_own(
    two: tuple[Process, Process], redis: Any
) -> None:
    a, b = two
    await a.ingest.append("t", change(0))
    _, _, seen_a = await live(a, "t")
    _, _, seen_b = await live(b, "t")
    mine = [(await a.ingest.append("t", change(i))).ids[0] for i in range(1, 4)]
    theirs = [(await b.ingest.append("t", change(i))).ids[0] for i in range(4, 7)]
    expected = await stream_ids(redis, "t", f"({mine[0]}")
    expected.insert(0, mine[0])
    await wait_for(lambda: seen_a.ids == expected and seen_b.ids == expected, 10)
    assert a.told == theirs and b.told == mine  # no echo


async def test_a_killed_notices_connection_loses_nothing_and_is_counted_once(
    two: tuple[Process, Process], redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = two
    _, _, seen = await live(a, "t")
    await b.ingest.append("t", change(0))
    await wait_for(lambda: len(seen.ids) == 1, 10)
    killed = a.feeds._notices._link
    assert await kill_notices(redis, a) == 1
    for i in range(1, 30):  # some while a subscribes again, the rest once it has
        await b.ingest.append("t", change(i))
        if i == 15:
            await wait_for(
                lambda: (link := a.feeds._notices._link) not in (None, killed) and link.alive(),
                10,
            )
    expected = await stream_ids(redis, "t")
    await wait_for(lambda: seen.ids == expected, 10)
    lost = [r for r in caplog.records if "tail notices: the connection" in r.getMessage()]
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING
    assert a.feeds.node.encode() in await redis.smembers(keys.tails("t"))


async def test_a_follower_nobody_hears_is_dropped_and_one_done_with_a_topic_leaves(
    two: tuple[Process, Process], redis: Any
) -> None:
    a, b = two
    feed, client, _ = await live(a, "t")
    await redis.sadd(keys.tails("t"), "gone")  # a process that died
    await b.ingest.append("t", change(0))
    members = await redis.smembers(keys.tails("t"))
    assert members == {a.feeds.node.encode()}
    client.close()
    await a.feeds.release(feed)
    assert await redis.smembers(keys.tails("t")) == set()
    # Told of a topic it follows no more (it was added back behind its back): it leaves.
    await redis.sadd(keys.tails("t"), a.feeds.node)
    told = len(a.told)  # change(0)'s notice, from when it followed
    await b.ingest.append("t", change(1))
    await wait_for(lambda: len(a.told) > told, 10)
    await wait_for(lambda: a.feeds._leaving == set(), 10)
    assert await redis.smembers(keys.tails("t")) == set()


async def watched(process: Process) -> tuple[TopicFeed, Recorder]:
    """A live client of ``t`` (one event in) on ``process``, whose notices are held back
    from now on."""
    await process.ingest.append("t", change(0))
    feed, _, seen = await live(process, "t")
    process.held_back = []
    return feed, seen


async def held(process: Process, count: int) -> list[Notice]:
    """The ``count`` notices held back from ``process``, which is handed them again after."""
    await wait_for(lambda: len(process.held_back or ()) >= count, 10)
    notices, process.held_back = process.held_back or [], None
    return notices


async def test_notices_read_out_of_order_wait_for_the_gap_to_close_without_a_read(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    feed, seen = await watched(a)
    ids = [(await b.ingest.append("t", change(i))).ids[0] for i in range(1, 4)]
    notices = await held(a, 3)
    a.noticed(notices[2])
    a.noticed(notices[1])
    assert len(feed._held) == 2 and feed._hold_timer is not None
    a.noticed(notices[0])
    await wait_for(lambda: seen.ids == ids, 10)
    assert feed._held == {} and feed._hold_timer is None
    assert a.ranges == 0 and feed._catching is None


async def test_an_own_append_answered_before_the_others_notice_waits_for_it(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    feed, seen_a = await watched(a)
    _, _, seen_b = await live(b, "t")
    theirs = (await b.ingest.append("t", change(1))).ids[0]
    notices = await held(a, 1)
    mine = (await a.ingest.append("t", change(2))).ids[0]
    assert len(feed._held) == 1 and seen_a.ids == []
    a.noticed(notices[0])
    await wait_for(lambda: seen_a.ids == [theirs, mine] and seen_b.ids == [theirs, mine], 10)
    assert a.ranges == 0 and feed._held == {}


async def test_a_notice_that_never_comes_the_gap_is_read_after_the_hold(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    feed, seen = await watched(a)
    lost = (await b.ingest.append("t", change(1))).ids[0]
    await held(a, 1)  # and never handed over
    mine = (await a.ingest.append("t", change(2))).ids[0]
    assert len(feed._held) == 1 and a.ranges == 0
    await wait_for(lambda: seen.ids == [lost, mine], 10)  # _HOLD_SECONDS, then one read
    assert a.ranges == 1 and feed._held == {} and feed._hold_timer is None


async def test_too_many_batches_held_the_gap_is_read_at_once(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    feed, seen = await watched(a)
    count = feed_module._HOLD_BATCHES + 2
    ids = [(await b.ingest.append("t", change(i))).ids[0] for i in range(1, count + 1)]
    notices = await held(a, count)
    for notice in notices[1 : feed_module._HOLD_BATCHES + 1]:  # the first one lost
        a.noticed(notice)
    assert len(feed._held) == feed_module._HOLD_BATCHES and a.ranges == 0
    a.noticed(notices[-1])  # one more than may wait: read now, not after the hold
    assert feed._held == {} and feed._hold_timer is None and feed._catching is not None
    await wait_for(lambda: seen.ids == ids, 10)
    assert a.ranges == 1


async def test_a_notice_partly_in_the_ring_adds_only_the_rest(
    two: tuple[Process, Process],
) -> None:
    a, b = two
    feed, seen = await watched(a)
    appended = await b.ingest.append("t", [*change(1), *change(2), *change(3)])
    whole = (await held(a, 1))[0]
    assert [eid for eid, _ in whole.rows] == appended.ids
    a.noticed(Notice("t", whole.previous_id, whole.rows[:2]))  # the first two, as if read
    a.noticed(whole)
    await wait_for(lambda: seen.ids == appended.ids, 10)
    assert a.ranges == 0 and feed._held == {}


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_seeded_fuzz_notices_handed_over_shuffled_duplicated_or_lost(
    two: tuple[Process, Process], redis: Any, seed: int
) -> None:
    """The notices of the other process's appends reach ``a`` in any order, twice, or never,
    between ``a``'s own appends: its live client still gets every event once, in order."""
    rng = random.Random(seed)
    a, b = two
    await a.ingest.append("t", change(0))
    feed, _, seen, start = await live_from(a, "t")
    # The connections used below are there before the watchdog counts sockets: the test's,
    # b's script pipe and a's pool (the gaps' reads).
    await redis.ping()
    await b.ingest.append("t", change(1))
    await a.store.range("t", "-", "+", 1)
    async with Watchdog() as dog:
        for round_ in range(6):
            a.held_back = []
            theirs = 0
            for i in range(rng.randrange(1, 12)):
                size = rng.randrange(1, 4)
                batch = [c for k in range(size) for c in change(100 * round_ + i + k)]
                if rng.random() < 0.3:
                    await a.ingest.append("t", batch)  # its own: held behind b's, or not
                else:
                    await b.ingest.append("t", batch)
                    theirs += 1
            notices = await held(a, theirs)
            rng.shuffle(notices)
            for notice in notices:
                roll = rng.random()
                if roll < 0.1:
                    continue  # lost: the next batch shows the gap, and the hold reads it
                a.noticed(notice)
                if roll > 0.9:
                    a.noticed(notice)  # twice
                if rng.random() < 0.2:
                    await a.ingest.append("t", change(10_000 + round_))
            # A lost notice is a gap once something follows it (or its connection ends).
            await a.ingest.append("t", change(20_000 + round_))
            expected = await stream_ids(redis, "t", start)
            await wait_for(lambda e=expected: len(seen.ids) >= len(e), 15)
            assert seen.ids == expected, (seed, round_)
            assert feed._held == {} and feed._hold_timer is None
    await dog.sockets_back()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_seeded_fuzz_every_live_client_gets_every_event_once_in_order(
    any_redis_url: str, redis: Any, seed: int
) -> None:
    rng = random.Random(seed)
    processes = [Process(any_redis_url) for _ in range(3)]
    topics = ["t0", "t1"]
    clients: list[tuple[str, str, ClientStream, Recorder, Process, TopicFeed]] = []
    counter = 0
    await redis.ping()  # its connection is there before the watchdog counts sockets
    try:
        async with Watchdog() as dog:
            for step in range(150):
                op = rng.random()
                process = rng.choice(processes)
                topic = rng.choice(topics)
                counter += 1
                if op < 0.45:
                    await process.ingest.append(topic, change(counter))
                elif op < 0.6:  # from outside any process's feeds (a tool, a test)
                    await process.store.append(topic, change(counter))
                elif op < 0.7 and process.feeds._notices._link is not None:
                    await kill_notices(redis, process)
                elif op < 0.9 or not clients:
                    feed, client, seen, start = await live_from(process, topic)
                    clients.append((topic, start, client, seen, process, feed))
                else:
                    gone = clients.pop(rng.randrange(len(clients)))
                    gone[2].close()
                    await gone[4].feeds.release(gone[5])
                if step % 7 == 0:
                    await asyncio.sleep(0)
            for topic, start, _, seen, _, _ in clients:
                expected = await stream_ids(redis, topic, start)
                await wait_for(lambda s=seen, e=expected: len(s.ids) >= len(e), 15)
                assert seen.ids == expected, (seed, topic)
    finally:
        for _, _, client, _, process, feed in clients:
            client.close()
            await process.feeds.release(feed)
        for process in processes:
            await process.close()
    await dog.sockets_back()

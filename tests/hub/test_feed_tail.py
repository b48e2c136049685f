"""The live feed's read of Redis (:mod:`hub.store.stream_tail`) beside the local hand-over.

A real hub on a real Redis: events this process appends are handed to its feed at once
(``take_local``) and also answered to the feed's blocked ``XREAD``; events another process
appends reach the feed only through that read. Either way a live client gets each event
once, in stream order, also after Redis dropped the read's connection.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from hub.core.events import Change, Event, EventKey
from hub.live.feed import ClientStream, TopicFeed
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.hub.scrape import scrape, value
from tests.support import wait_for


class Recorder:
    def __init__(self) -> None:
        self.ids: list[str] = []

    def __call__(self, batch: list[Event]) -> bool:
        self.ids.extend(e.id for e in batch)
        return True


def change(i: int) -> list[Change]:
    loc = f"http://example.org/r{i}"
    return [Change(loc, "updated", orjson.dumps({"loc": loc, "change": "updated"}))]


async def live(hub: Hub, topic: str) -> tuple[TopicFeed, ClientStream, Recorder]:
    feed = await hub.app[RUNTIME].feeds.acquire(topic)
    recorder = Recorder()
    client = ClientStream(feed, feed.last_key, capacity=1000, writer=recorder)
    assert await client.next(0.01) is None  # caught up: now live, following the feed
    assert client.live
    return feed, client, recorder


def key(event_id: str) -> EventKey:
    ms, seq = event_id.split("-")
    return int(ms), int(seq)


async def test_local_and_redis_events_reach_a_live_client_once_and_in_order(hub: Hub) -> None:
    runtime = hub.app[RUNTIME]
    await runtime.ingest.append("t", change(-1))  # the topic exists before the feed starts
    feed, client, recorder = await live(hub, "t")
    try:

        async def append(i: int) -> list[str]:
            if i % 3 == 0:  # as another process would: only the feed's XREAD sees it
                return (await runtime.store.append("t", change(i))).ids
            return (await runtime.ingest.append("t", change(i))).ids  # handed over too

        stored: list[str] = []
        for first in range(0, 90, 9):  # some one by one, some concurrently
            for ids in await asyncio.gather(*(append(i) for i in range(first, first + 9))):
                stored += ids
            stored += await append(1000 + first)
        expected = sorted(stored, key=key)
        await wait_for(lambda: len(recorder.ids) >= len(expected), 10)
        await asyncio.sleep(0)  # a duplicate would be written in the same fan-out
        assert recorder.ids == expected
    finally:
        client.close()
        await runtime.feeds.release(feed)


async def test_the_feed_reads_on_after_redis_drops_its_connection(hub: Hub) -> None:
    runtime = hub.app[RUNTIME]
    await runtime.ingest.append("t", change(0))
    feed, client, recorder = await live(hub, "t")
    try:
        before = (await runtime.store.append("t", change(1))).ids
        await wait_for(lambda: recorder.ids == before, 10)
        redis = hub.redis
        killed = 0
        for entry in await redis.client_list():
            if entry.get("cmd") == "xread":  # the feed's blocked read (and ownership's)
                killed += int(await redis.execute_command("CLIENT", "KILL", "ID", entry["id"]))
        assert killed >= 1
        after = (await runtime.store.append("t", change(2))).ids  # only XREAD brings it
        await wait_for(lambda: recorder.ids == before + after, 10)
    finally:
        client.close()
        await runtime.feeds.release(feed)


async def test_a_failed_read_is_counted_and_logged_once_and_the_feed_reads_on(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """The feed reads without the retrying loop until a read fails; that first failure is
    still counted (``rshub_redis_errors``) and logged like any other, then read again."""
    runtime = hub.app[RUNTIME]
    runtime.feeds.follow_by_xread()  # where the store has no connection of its own
    await runtime.ingest.append("f", change(0))
    feed, client, recorder = await live(hub, "f")
    try:
        errors = value(await scrape(hub), "rshub_redis_errors_total")
        redis = hub.redis
        killed = 0
        for entry in await redis.client_list():
            if entry.get("cmd") == "xread":  # the feed's blocked read (and ownership's)
                killed += int(await redis.execute_command("CLIENT", "KILL", "ID", entry["id"]))
        assert killed >= 1
        after = (await runtime.store.append("f", change(1))).ids
        await wait_for(lambda: recorder.ids == after, 10)
        warned = [r for r in caplog.records if "feed f: XREAD failed" in r.getMessage()]
        assert len(warned) == 1 and warned[0].levelno == logging.WARNING
        assert value(await scrape(hub), "rshub_redis_errors_total") >= errors + 1
    finally:
        client.close()
        await runtime.feeds.release(feed)

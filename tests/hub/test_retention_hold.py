"""Retention holds what WebSub subscribers have yet to receive; past the hold's cap, the
subscriber's next delivery says, signed, which events it lost (``X-RSHub-Gap``).

The scenario of the bug: topic retention 5 events, a callback answering 503 while r1-r8
are published, then recovering. The hub is restarted in between (same Redis), so the
in-memory ring of the first process, which would still hold r1-r8, does not hide what
Redis kept: as for a subscriber that fell behind the ring.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from hub.core.events import Change
from hub.core.settings import Settings
from hub.store import keys
from hub.store.event_store import EventStore, Retention
from hub.store.subscriptions import Subscription, SubscriptionStore
from hub.web.app import RUNTIME
from resourcesync import parse
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.scrape import scrape, value
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for

SECRET = "hold-secret"
GAP_ATTRIBUTE = "{urn:rshub:1}trimmed-through"


def _settings(**overrides: Any) -> Settings:
    return Settings(
        host="127.0.0.1",
        port=free_port(),
        allow_private_callbacks=True,
        retention_max_events=0,
        topic_retention_max_events={"short": 5},
        retry_base_seconds=0.05,
        retry_max_seconds=0.2,
        ownership_lease_seconds=0.5,
        **overrides,
    )


async def _subscribe(hub: Hub, cb: CallbackServer) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/short",
        "hub.callback": cb.url,
        "hub.secret": SECRET,
    }
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 202, await resp.text()

    async def active() -> bool:
        return await SubscriptionStore(hub.redis).get("short", cb.url) is not None

    await wait_for(active)


async def _down_while_published(
    redis_url: str, settings: Settings, session: aiohttp.ClientSession, cb: CallbackServer
) -> list[str]:
    """Hub A: subscribe; r1-r8 published (one request each) while the callback answers
    503; hub A stops. Returns the ids of r1-r8."""
    runner, app = await start_hub(settings, redis_url)
    hub = Hub(settings.public_url, app, settings, session)
    try:
        await _subscribe(hub, cb)
        ids = []
        for i in range(8):
            ids += (await (await hub.publish("short", notification(changes(1, start=i)))).json())[
                "ids"
            ]
        await wait_for(lambda: cb.refused >= 2)  # it tried, and was refused, more than once
        assert cb.deliveries == []
    finally:
        await runner.cleanup()
    return ids


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer(statuses=[503] * 100_000).start()
    yield server
    await server.stop()


async def test_within_the_hold_a_recovering_subscriber_gets_every_change(
    redis_url: str, callback: CallbackServer
) -> None:
    settings = _settings()
    async with aiohttp.ClientSession() as session:
        ids = await _down_while_published(redis_url, settings, session, callback)
        runner, app = await start_hub(settings, redis_url)
        try:
            hub = Hub(settings.public_url, app, settings, session)
            store = app[RUNTIME].store
            # Held: retention (5) would have trimmed r1-r3.
            assert await store.length("short") == 8
            assert await store.trimmed_through("short") is None
            callback.statuses.clear()  # the callback recovers
            await wait_for(lambda: len(callback.ids) >= 8)
            assert callback.ids == ids
            assert all("X-RSHub-Gap" not in d.headers for d in callback.deliveries)
            assert all(callback.signature_ok(SECRET))

            # Delivered: the cursor write moved the hold, so retention applies again.
            async def held_at_r8() -> bool:
                score = await hub.redis.zscore(keys.holds("short"), callback.url)
                return score == int(ids[-1].split("-")[0])

            await wait_for(held_at_r8)
            more = (await (await hub.publish("short", notification(changes(1, start=8)))).json())[
                "ids"
            ]
            assert await store.length("short") < 9
            await wait_for(lambda: callback.ids[-1:] == more)
        finally:
            await runner.cleanup()


async def test_past_the_hold_cap_the_next_delivery_carries_a_signed_gap_notice(
    redis_url: str, callback: CallbackServer
) -> None:
    settings = _settings(retention_hold_max_events=1)
    async with aiohttp.ClientSession() as session:
        ids = await _down_while_published(redis_url, settings, session, callback)
        runner, app = await start_hub(settings, redis_url)
        try:
            hub = Hub(settings.public_url, app, settings, session)
            before = await scrape(hub)
            store = app[RUNTIME].store
            assert await store.length("short") == 6  # 5 + the hold's cap of 1
            assert await store.trimmed_through("short") == ids[1]
            callback.statuses.clear()
            await wait_for(lambda: len(callback.ids) >= 6)
            assert callback.ids == ids[2:]
            first = callback.deliveries[0]
            assert first.headers["X-RSHub-Gap"] == f"trimmed-through={ids[1]}"
            resourcelist = f"{hub.url}/topics/short/resourcelist.xml"
            assert f'<{resourcelist}>; rel="resourcelist"' in first.headers["Link"]
            assert 'rel="hub"' in first.headers["Link"]  # the discovery links stay
            # The body says the same, under the signature.
            doc = parse(first.body)
            assert doc.md.extra[GAP_ATTRIBUTE] == ids[1]
            assert [ln.href for ln in doc.links if ln.rel == "resourcelist"] == [resourcelist]
            assert all(callback.signature_ok(SECRET))
            # Told once: the next delivery follows on.
            more = (await (await hub.publish("short", notification(changes(1, start=8)))).json())[
                "ids"
            ]
            await wait_for(lambda: callback.ids[-1:] == more)
            assert all("X-RSHub-Gap" not in d.headers for d in callback.deliveries[1:])
            assert GAP_ATTRIBUTE.split("}")[1].encode() not in callback.deliveries[-1].body
            after = await scrape(hub)
            gaps = "rshub_delivery_gaps_total"
            assert value(after, gaps, topic="short") - value(before, gaps, topic="short") == 1
            rows = await (await session.get(f"{hub.url}/topics/short/subscriptions")).json()
            [row] = rows["subscriptions"]
            assert (row["gaps"], row["last_gap"]) == (1, ids[1])
            admin = await (await session.get(f"{hub.url}/admin/subscriptions")).json()
            [row] = admin["subscriptions"]
            assert (row["gaps"], row["last_gap"]) == (1, ids[1])
            overview = await (await session.get(f"{hub.url}/admin/overview.json")).json()
            [row] = overview["subscriptions"]
            assert row["gaps"] == 1
        finally:
            await runner.cleanup()


# -- the hold itself, on the store ---------------------------------------------------------


def _sub(callback: str = "http://cb.invalid/x") -> Subscription:
    return Subscription(
        topic="t",
        topic_url="http://hub.invalid/topics/t",
        callback=callback,
        lease_seconds=3600,
        expires_at=time.time() + 3600,
    )


async def _append_each(store: EventStore, n: int, start: int = 0) -> list[str]:
    """``n`` single-change publishes, each in a millisecond of its own (the hold is kept
    at millisecond precision)."""
    ids: list[str] = []
    for i in range(start, start + n):
        loc = f"http://example.org/r{i}"
        event = orjson.dumps({"loc": loc, "lastmod": "2026-01-01T00:00:00Z", "change": "updated"})
        ids += (await store.append("t", [Change(loc, "updated", event)])).ids
        await asyncio.sleep(0.002)  # the next id is in a later millisecond
    return ids


@pytest.fixture
async def stores(redis_url: str) -> AsyncIterator[tuple[Any, Any]]:
    import redis.asyncio as redis

    client = redis.Redis.from_url(redis_url)
    yield client, SubscriptionStore(client)
    await client.aclose()


async def test_the_hold_follows_the_lowest_cursor_up_to_its_cap(stores: tuple[Any, Any]) -> None:
    client, subs = stores
    retention = Retention(topic_max_events={"t": 5}, hold_max_events=3, hold_seconds=3600)
    store = EventStore(client, retention=retention)
    try:
        await subs.activate(_sub(), "0-0")
        ids = await _append_each(store, 8)
        assert await store.length("t") == 8  # 5 + 3 held
        assert await store.trimmed_through("t") is None
        ids += await _append_each(store, 2, start=8)
        assert await store.length("t") == 8  # past the cap: the oldest go
        assert await store.trimmed_through("t") == ids[1]
        # The subscriber moves on: what it no longer needs is trimmed to the retention.
        await subs.activate(_sub(), ids[6])
        await store.trim("t")
        assert await store.first_id("t") == ids[5]
        assert await store.trimmed_through("t") == ids[4]
        # The subscription ends: its hold with it.
        await subs.delete("t", _sub().callback)
        assert await client.zcard(keys.holds("t")) == 0
        await _append_each(store, 3, start=10)
        assert await store.length("t") == 5
    finally:
        await store.close()


async def test_hold_turned_off_trims_as_before(stores: tuple[Any, Any]) -> None:
    client, subs = stores
    store = EventStore(
        client, retention=Retention(topic_max_events={"t": 5}, hold_max_events=0, hold_seconds=60)
    )
    try:
        await subs.activate(_sub(), "0-0")
        ids = await _append_each(store, 8)
        assert await store.length("t") == 5
        assert await store.trimmed_through("t") == ids[2]
    finally:
        await store.close()


async def test_cursors_without_holds_are_indexed_on_the_next_publish(
    stores: tuple[Any, Any],
) -> None:
    """Cursors written by a hub that kept no holds (an upgrade) are held all the same."""
    client, subs = stores
    retention = Retention(topic_max_events={"t": 5}, hold_max_events=100, hold_seconds=3600)
    store = EventStore(client, retention=retention)
    try:
        await subs.activate(_sub(), "0-0")
        await client.delete(keys.holds("t"))
        await _append_each(store, 8)
        assert await store.length("t") == 8
        assert await client.zscore(keys.holds("t"), _sub().callback) == 0
    finally:
        await store.close()


async def test_held_events_older_than_the_hold_seconds_are_trimmed(
    stores: tuple[Any, Any],
) -> None:
    client, subs = stores
    hold_seconds = 3
    retention = Retention(topic_seconds={"t": 1}, hold_max_events=100, hold_seconds=hold_seconds)
    store = EventStore(client, retention=retention)
    try:
        await subs.activate(_sub(), "0-0")
        ids = await _append_each(store, 3)
        published = int(ids[-1].split("-")[0]) / 1000
        # Past the retention's age (1 s), not the hold's.
        await asyncio.sleep(max(0.0, published + 1.2 - time.time()))
        await store.trim("t")
        if time.time() < published + hold_seconds:  # else the machine stalled for seconds
            assert await store.length("t") == 3
        trimmed = 0

        async def emptied() -> bool:
            nonlocal trimmed
            await store.trim("t")
            trimmed = await store.length("t")
            return trimmed == 0

        await wait_for(emptied, timeout=hold_seconds + 5, interval=0.1)
        assert time.time() >= published + hold_seconds - 0.01 * TIME_SCALE
        assert await store.trimmed_through("t") == ids[-1]
    finally:
        await store.close()

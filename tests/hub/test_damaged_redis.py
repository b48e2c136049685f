"""Redis holding what the hub did not write: a restored backup of another shape, another
program's keys, an operator's edit. Each named case damages one topic's keys (or a hub-wide
set) under a hub with subscriptions and streams, and the hub must:

* keep serving every other topic: publishes, streams, documents, WebSub deliveries;
* keep its hub-wide jobs running (retention, the page scan, ownership), and its listings
  (``/metrics``, the admin API, the Source Description) answering for the other topics;
* answer a request that needs the damaged data with a 500 that names it, in one warning
  line, never a traceback, never a 503 that sends clients into retries;
* say each damaged thing once, not every round of the job that meets it.

Before, one such key stopped the page scan and the retention sweep for good (a member of
the topic set that is not UTF-8), ended the ownership task (a subscription record that is
not JSON: no more WebSub deliveries at all), or failed ``/metrics`` and the Source
Description for everyone (a non-numeric counter). A seeded fuzz then writes random damage
of these kinds to random keys of several topics, under the watchdog.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from hub.live.feed import TopicFeed
from hub.store import keys
from hub.web.app import RUNTIME
from resourcesync import parse
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_dropped_clients import _to_redis, established
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

Damage = Callable[[Any, str], Awaitable[object]]


async def _replace_with_string(redis: Any, key: str) -> None:
    await redis.delete(key)
    await redis.set(key, "not what the hub wrote")


#: One topic's keys (or a hub-wide set) damaged in one way each.
DAMAGES: dict[str, Damage] = {
    "events key of another type": lambda r, t: _replace_with_string(r, keys.events(t)),
    "meta counters not numbers": lambda r, t: r.hset(
        keys.topic_meta(t),
        mapping={"published": "x", "created_ms": "y", "last_publish_ms": "nan", "last_id": "z"},
    ),
    "meta key of another type": lambda r, t: _replace_with_string(r, keys.topic_meta(t)),
    "subscription record not JSON": lambda r, t: r.hset(
        keys.subscriptions(t), "http://127.0.0.1:9/cb", "not json"
    ),
    "subscription record a list": lambda r, t: r.hset(
        keys.subscriptions(t), "http://127.0.0.1:9/cb", "[1, 2]"
    ),
    "subscription record missing fields": lambda r, t: r.hset(
        keys.subscriptions(t), "http://127.0.0.1:9/cb", '{"topic": 5}'
    ),
    "subscription record of wrong types": lambda r, t: r.hset(
        keys.subscriptions(t),
        "http://127.0.0.1:9/cb",
        '{"topic": "t", "topic_url": "u", "callback": "c", "lease_seconds": "x",'
        ' "expires_at": null}',
    ),
    # Each field of the right JSON type, but not what the hub writes (a fractional lease,
    # a count as text): it reads as a record, and only the answers' models refuse it.
    "subscription record of unwritten values": lambda r, t: r.hset(
        keys.subscriptions(t),
        "http://127.0.0.1:9/cb",
        '{"topic": "bad", "topic_url": "u", "callback": "http://127.0.0.1:9/cb",'
        ' "lease_seconds": 1.5, "expires_at": 4102444800, "failures": "many",'
        ' "state": "active"}',
    ),
    "stream entry without the change": lambda r, t: r.xadd(keys.events(t), {"x": "1"}),
    "stream entry not JSON": lambda r, t: r.xadd(keys.events(t), {"e": b"\xff{not json"}),
    "stream entry without loc": lambda r, t: r.xadd(keys.events(t), {"e": '{"lastmod": 5}'}),
    "page set member garbage": lambda r, t: r.zadd(keys.pages(t), {"garbage": 1}),
    "page head fields garbage": lambda r, t: r.hset(
        keys.pages_head(t), mapping={"n": "x", "from": "y", "first": "z", "scanned": "q"}
    ),
    "resource value garbage": lambda r, t: r.hset(
        keys.resources(t), "http://example.org/x", "garbage"
    ),
    "resource value packed, cut short": lambda r, t: r.hset(
        keys.resources(t), "http://example.org/x", b"\x01\x00\x00\x01"
    ),
    "topic set member not UTF-8": lambda r, t: r.sadd(keys.TOPICS, b"\xff\xfe"),
    "topic set member not a name": lambda r, t: r.sadd(keys.TOPICS, "../evil", ""),
    "subscribed set member not UTF-8": lambda r, t: r.sadd(keys.SUBSCRIBED_TOPICS, b"\xff"),
    "subscribed set member not a name": lambda r, t: r.sadd(keys.SUBSCRIBED_TOPICS, "a b"),
}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # Every hub-wide job runs several rounds within a test.
    return {
        "ownership_reconcile_seconds": 0.1,
        "retention_sweep_seconds": 0.1,
        "changelist_scan_seconds": 0.05,
        "retry_base_seconds": 0.05,
        "retry_max_seconds": 0.2,
    }


async def _subscribe(hub: Hub, callback: CallbackServer, topic: str) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/{topic}",
        "hub.callback": callback.url,
    }
    before = len(callback.verifications)
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 202, await resp.text()
    await wait_for(lambda: len(callback.verifications) > before)
    await wait_for(lambda: (topic, callback.url) in hub.app[RUNTIME].delivery.workers)


async def _get(hub: Hub, path: str) -> tuple[int, bytes]:
    async with hub.session.get(hub.url + path) as resp:
        return resp.status, await resp.read()


async def _all_served(hub: Hub, callback: CallbackServer, topic: str, n: int) -> None:
    """``topic`` works end to end: a publish reaches the callback and an SSE replay, and
    its documents list it."""
    loc = f"http://example.org/{topic}/{n}"
    body = notification([{"loc": loc, "change": "updated"}])
    assert (await hub.publish(topic, body)).status == 202
    await wait_for(lambda: loc in callback.locs)
    async with hub.session.get(
        f"{hub.url}/topics/{topic}/events?since=0", headers={"Accept": "text/event-stream"}
    ) as stream:
        await _read_until(stream, loc.encode())
    for document in ("changelist.xml", "resourcelist.xml"):
        status, text = await _get(hub, f"/topics/{topic}/{document}")
        assert status == 200
    status, text = await _get(hub, f"/topics/{topic}/resourcelist.xml")
    assert loc.encode() in text


async def _pages(hub: Hub, topic: str) -> list[str]:
    """The paths of ``topic``'s Change List pages, if its index answers."""
    status, body = await _get(hub, f"/topics/{topic}/changelist.xml")
    if status != 200 or b"<sitemapindex" not in body:
        return []
    index = parse(body)
    return [entry.loc.removeprefix(hub.url) for entry in index.entries]


async def _read_until(stream: aiohttp.ClientResponse, marker: bytes) -> bytes:
    """What an SSE stream sends until ``marker`` (fails if it ends or takes too long)."""
    seen = b""
    async with asyncio.timeout(10 * TIME_SCALE):
        while marker not in seen:
            chunk = await stream.content.readany()
            assert chunk, f"the stream ended after {seen[-200:]!r}"
            seen += chunk
    return seen


async def _live_feed(hub: Hub, topic: str) -> TopicFeed:
    """The feed a stream of ``topic`` follows (acquired and given back at once)."""
    feeds = hub.app[RUNTIME].feeds
    await wait_for(lambda: feeds.acquire_nowait(topic) is not None)
    feed = feeds.acquire_nowait(topic)
    assert feed is not None
    feeds.release_soon(feed)
    return feed


def _pooled(hub: Hub, callback: CallbackServer) -> int:
    """Sockets the hub keeps open by design: to Redis, and to the callback (with the
    callback server's side of each, in this process too)."""
    return _to_redis(hub) + 2 * established(None, {callback.port})


def _problems(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Records a damaged key may cause: warnings; never an error, never a traceback."""
    for record in caplog.records:
        assert record.levelno < logging.ERROR, record.getMessage()
        assert record.exc_info is None, record.getMessage()
    return [r for r in caplog.records if r.levelno == logging.WARNING]


def _recurring(hub: Hub) -> list[str]:
    """The hub's background jobs that run as long as it does."""
    return [n for n in hub.app[RUNTIME].background.names() if not n.endswith("/after-start")]


@pytest.mark.parametrize("damage", sorted(DAMAGES))
async def test_one_damaged_topic_leaves_the_hub_serving(
    hub: Hub, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    callback = await CallbackServer().start()
    try:
        for topic in ("good", "bad"):
            await _subscribe(hub, callback, topic)
            assert (await hub.publish(topic, notification(changes(2)))).status == 202
        pooled = _pooled(hub, callback)
        async with Watchdog() as dog:
            await DAMAGES[damage](hub.redis, "bad")
            # The damaged topic: whatever needs the damage is a 500 naming it, never a 503.
            answers = [
                (await hub.publish("bad", notification(changes(1, start=9)))).status,
                *[
                    (await _get(hub, f"/topics/bad/{path}"))[0]
                    for path in ("changelist.xml", "resourcelist.xml")
                ],
                (await _get(hub, "/admin/topics/bad"))[0],
                (await _get(hub, "/topics/bad/subscriptions"))[0],
                (await _get(hub, "/admin/subscriptions?topic=bad"))[0],
            ]
            for page in await _pages(hub, "bad"):
                answers.append((await _get(hub, page))[0])
            assert set(answers) <= {200, 202, 500}, answers
            # Hub-wide: listings answer, and every job goes on for the others.
            for path in ("/metrics", "/admin/topics", "/.well-known/resourcesync", "/healthz"):
                status, body = await _get(hub, path)
                assert status == 200, (path, body[:300])
            # The recurring jobs: ``after-start`` runs once, a moment after the start, and
            # may end during the test on a slow machine, which is no job ending by damage.
            scans = _recurring(hub)
            for n in range(3):
                await _all_served(hub, callback, "good", n)
            assert _recurring(hub) == scans  # no job ended
            ownership = [n for n in hub.app[RUNTIME].tasks.names() if "ownership" in n]
            assert any(n.endswith("/ownership") for n in ownership), ownership
        await dog.sockets_back(slack=max(0, _pooled(hub, callback) - pooled))
        # Said once: a job meeting the damage every round does not say it every round.
        warned = [r.getMessage() for r in _problems(caplog)]
        repeated = {m for m in warned if "left out until repaired" in m and warned.count(m) > 1}
        assert not repeated, repeated
    finally:
        await callback.stop()


async def test_a_damaged_answer_names_the_damage(hub: Hub) -> None:
    assert (await hub.publish("bad", notification(changes(2)))).status == 202
    await _replace_with_string(hub.redis, keys.events("bad"))
    async with hub.session.get(f"{hub.url}/topics/bad/changelist.xml") as resp:
        assert resp.status == 500
        answer = await resp.json()
    assert "stored data is damaged" in answer["error"] and "WRONGTYPE" in answer["error"]
    assert "DELETE /admin/topics" in answer["error"]
    health = await _get(hub, "/healthz")
    assert health[0] == 200  # damage is no outage: the hub stays in its load balancer


async def test_a_damaged_subscription_is_repaired_by_subscribing_again(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    callback = await CallbackServer().start()
    try:
        # A record no hub wrote, for a callback that then subscribes: never delivered...
        await hub.redis.hset(keys.subscriptions("t"), callback.url, "not json")
        await hub.redis.sadd(keys.SUBSCRIBED_TOPICS, "t")
        await wait_for(
            lambda: any("left out until repaired" in r.getMessage() for r in caplog.records)
        )
        assert ("t", callback.url) not in hub.app[RUNTIME].delivery.workers
        # ...until its subscription replaces the record.
        await _subscribe(hub, callback, "t")
        assert (await hub.publish("t", notification(changes(1)))).status == 202
        await wait_for(lambda: "http://example.org/r0" in callback.locs)
        assert any("replaces a damaged record" in r.getMessage() for r in caplog.records)
    finally:
        await callback.stop()


async def test_deleting_a_damaged_topic_repairs_it(hub: Hub) -> None:
    assert (await hub.publish("bad", notification(changes(2)))).status == 202
    await _replace_with_string(hub.redis, keys.events("bad"))
    assert (await hub.publish("bad", notification(changes(1)))).status == 500
    async with hub.session.delete(f"{hub.url}/admin/topics/bad") as resp:
        assert resp.status == 200, await resp.text()
    assert (await hub.publish("bad", notification(changes(1)))).status == 202
    status, text = await _get(hub, "/topics/bad/resourcelist.xml")
    assert status == 200 and b"http://example.org/r0" in text


async def test_seeded_damage_to_random_keys_of_random_topics(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """Random damage of the named kinds to several topics at once, one clean topic beside."""
    caplog.set_level(logging.INFO)
    rng = random.Random(2213)
    callback = await CallbackServer().start()
    try:
        topics = [f"f{i}" for i in range(6)]
        for topic in ["clean", *topics]:
            await _subscribe(hub, callback, topic)
            assert (await hub.publish(topic, notification(changes(3)))).status == 202
        pooled = _pooled(hub, callback)
        async with Watchdog() as dog:
            for _ in range(25):
                await DAMAGES[rng.choice(sorted(DAMAGES))](hub.redis, rng.choice(topics))
            for topic in topics:
                assert (await hub.publish(topic, notification(changes(1, start=5)))).status in {
                    202,
                    500,
                }
                for path in ("changelist.xml", "resourcelist.xml", "events?since=0"):
                    async with hub.session.get(
                        f"{hub.url}/topics/{topic}/{path}",
                        timeout=aiohttp.ClientTimeout(sock_read=0.5),
                    ) as resp:
                        assert resp.status in {200, 500}, (topic, path)
            for path in ("/metrics", "/admin/topics", "/.well-known/resourcesync"):
                assert (await _get(hub, path))[0] == 200, path
            for n in range(3):
                await _all_served(hub, callback, "clean", n)
        await dog.sockets_back(slack=max(0, _pooled(hub, callback) - pooled))
        _problems(caplog)
    finally:
        await callback.stop()


async def test_a_replay_goes_past_a_damaged_entry_saying_so(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """A replay read from Redis that meets an entry another program added gets the changes
    around it, and the entry is said once, naming it: the replay ended there, silently. A
    Change List page holding it answers 500 naming it (a document is not shown in part)."""
    assert (await hub.publish("t", notification(changes(2)))).status == 202
    await hub.redis.xadd(keys.events("t"), {"x": "1"})
    assert (await hub.publish("t", notification(changes(1, start=5)))).status == 202
    async with Watchdog():
        for _ in range(2):
            async with hub.session.get(
                f"{hub.url}/topics/t/events?since=0", headers={"Accept": "text/event-stream"}
            ) as stream:
                seen = await _read_until(stream, b"example.org/r5")
            assert b"example.org/r1" in seen
    said = [r.getMessage() for r in _problems(caplog)]
    assert sum("holds no change" in m for m in said) == 1, said
    status, page = await _get(hub, (await _pages(hub, "t"))[0])
    assert status == 500 and b"holds no change" in page


@pytest.mark.parametrize(
    "entry,said",
    [
        ({"x": "1"}, "holds no change"),
        ({"e": b"\xff{not json"}, "stored change is not JSON"),
        ({"e": b'{"loc": 5}'}, "stored change lacks loc"),
    ],
)
async def test_a_delivery_goes_past_a_damaged_entry_said_once(
    hub: Hub, caplog: pytest.LogCaptureFixture, entry: dict[str, Any], said: str
) -> None:
    """A subscription whose catch-up reads through an entry another program added gets the
    changes around it, said once: its worker failed there at every ownership round, an
    ERROR each time, and delivered nothing more."""
    callback = await CallbackServer().start()
    try:
        assert (await hub.publish("t", notification(changes(2)))).status == 202
        await hub.redis.xadd(keys.events("t"), entry)
        assert (await hub.publish("t", notification(changes(1, start=5)))).status == 202
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/t",
            "hub.callback": callback.url,
            "hub.since": "0",
        }
        async with hub.session.post(hub.url + "/", data=form) as resp:
            assert resp.status == 202, await resp.text()
        await _subscribe(hub, callback, "other")
        async with Watchdog():
            await wait_for(lambda: any(said in r.getMessage() for r in caplog.records))
            for n in range(3):  # many ownership rounds (0.1 s) meanwhile
                await _all_served(hub, callback, "other", n)
            # ...and its catch-up took the changes around the entry.
            await wait_for(lambda: "http://example.org/r5" in callback.locs)
        warned = [r.getMessage() for r in _problems(caplog)]
        assert sum(said in m for m in warned) == 1, warned
    finally:
        await callback.stop()


async def test_a_live_feed_catching_up_goes_past_a_damaged_entry(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """A feed that reads a gap (after a lost notice) through an entry another program
    added takes the changes around it and says it once: it failed its catch-up task at every
    gap (an ERROR each time) and stalled every live client of the topic."""
    assert (await hub.publish("t", notification(changes(1)))).status == 202
    async with hub.session.get(
        f"{hub.url}/topics/t/events", headers={"Accept": "text/event-stream"}
    ) as stream:
        feed = await _live_feed(hub, "t")
        # Changes the feed has not seen, around an entry no hub wrote.
        await hub.redis.xadd(
            keys.events("t"),
            {
                "e": b'{"loc":"http://example.org/before",'
                b'"lastmod":"2026-01-01T00:00:00Z","change":"updated"}'
            },
        )
        await hub.redis.xadd(keys.events("t"), {"x": "1"})
        await hub.redis.xadd(
            keys.events("t"),
            {
                "e": b'{"loc":"http://example.org/after",'
                b'"lastmod":"2026-01-01T00:00:00Z","change":"updated"}'
            },
        )
        async with Watchdog():
            for _ in range(3):  # every gap read meets it again
                feed.catch_up()
                await wait_for(lambda: feed._catching is None or feed._catching.done())
            seen = await _read_until(stream, b"example.org/after")
        assert b"example.org/before" in seen
        said = [r.getMessage() for r in _problems(caplog)]
        assert sum("holds no change" in m for m in said) == 1, said


async def test_a_feed_following_by_xread_goes_past_a_damaged_entry(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """The same where the feed follows the stream by a blocked XREAD (no notices): its
    read met the entry and ended the feed for good."""
    hub.app[RUNTIME].feeds.follow_by_xread()
    assert (await hub.publish("x", notification(changes(1)))).status == 202
    async with hub.session.get(
        f"{hub.url}/topics/x/events", headers={"Accept": "text/event-stream"}
    ) as stream:
        feed = await _live_feed(hub, "x")
        assert not feed.by_notice
        await hub.redis.xadd(keys.events("x"), {"x": "1"})
        async with Watchdog():
            for n in range(3):
                body = notification([{"loc": f"http://example.org/after{n}"}])
                assert (await hub.publish("x", body)).status == 202
            seen = await _read_until(stream, b"example.org/after2")
        assert b"example.org/after0" in seen and b"example.org/after1" in seen
        said = [r.getMessage() for r in _problems(caplog)]
        assert sum("holds no change" in m for m in said) == 1, said

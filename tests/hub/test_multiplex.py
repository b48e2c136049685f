"""Streams of several topics on one connection (``/events``, ``/ws``): which topics, what each
event says, exact resumes, the checks before a stream starts, private topics, and how it ends.

A thousand topics with a drop mid-way: tests/hub/test_multiplex_thousand.py; hostile
parameters and ids: tests/hub/test_multiplex_hostile.py.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest

from hub.core.read_tokens import mint
from hub.core.settings import Settings
from hub.core.stream_positions import MARK, encode
from hub.web.streams import STREAMING
from tests.conftest import Hub, start_hub
from tests.hub.topic_streams import Reader, follow_sse, follow_ws, resume_topics
from tests.redis_cluster import RedisClusterProcesses
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for

KEY = "k" * 32


async def publish(hub: Hub, topic: str, n: int = 1, start: int = 0) -> list[str]:
    resp = await hub.publish(topic, notification(changes(n, start=start)))
    assert resp.status == 202, await resp.text()
    ids: list[str] = (await resp.json())["ids"]
    return ids


def _followers(hub: Hub) -> int:
    return len(hub.app[STREAMING].closing._streams)


async def test_sse_follows_named_topics_each_event_naming_its_topic(hub: Hub) -> None:
    a = await publish(hub, "a", 2)
    b = await publish(hub, "b", 1)
    await publish(hub, "c", 1)  # not asked for
    async with hub.session.get(f"{hub.url}/events?topic=a,b&since=0") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        reader = Reader()
        await reader.sse(resp, reader.count(3))
        assert reader.ids[0].startswith(MARK)  # the opening id, before any event
        assert sorted(reader.pairs()) == sorted([("a", a[0]), ("a", a[1]), ("b", b[0])])
        assert reader.events[0] == {
            "id": reader.events[0]["id"],
            "topic": reader.events[0]["topic"],
            "loc": "http://example.org/r0",
            "lastmod": "2026-01-01T00:00:00Z",
            "change": "updated",
        }
        b2 = await publish(hub, "b", 1, start=5)
        await reader.sse(resp, reader.count(4))
        assert reader.pairs()[-1] == ("b", b2[0])
        # Each id names the topics sent past its base, at their positions.
        assert resume_topics(reader.last_id or "").get("b", (0, 0)) <= tuple(
            int(p) for p in b2[0].split("-")
        )


class TestHeartbeats:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"heartbeat_seconds": 0.2}

    async def test_an_idle_sse_stream_of_several_topics_gets_heartbeats(self, hub: Hub) -> None:
        async with hub.session.get(f"{hub.url}/events?topic=a&topic=b") as resp:
            lines: list[bytes] = []
            async with asyncio.timeout(5 * TIME_SCALE):
                while lines.count(b": heartbeat\n") < 2:
                    lines.append(await resp.content.readline())
            # The reconnection time, where the stream starts, then heartbeats while idle.
            assert lines[:2] == [b"retry: 1000\n", b"\n"]
            assert lines[2].startswith(b"id: " + MARK.encode()) and lines[3] == b"\n"
            assert set(lines[4:]) == {b": heartbeat\n", b"\n"}


async def test_websocket_messages_carry_the_id_after_their_events(hub: Hub) -> None:
    await publish(hub, "a")
    async with hub.session.ws_connect(f"{hub.url}/ws?topic=a&topic=b") as ws:
        opening = await ws.receive_json(timeout=10 * TIME_SCALE)
        assert opening["events"] == [] and opening["id"].startswith(MARK)
        ids = await publish(hub, "b", 2)
        message = await ws.receive_json(timeout=10 * TIME_SCALE)
        assert [(e["topic"], e["id"]) for e in message["events"]] == [("b", i) for i in ids]
        assert resume_topics(message["id"]) == {"b": tuple(int(p) for p in ids[-1].split("-"))}


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_a_prefix_follows_the_topics_under_it_those_published_later_too(
    hub: Hub, transport: str
) -> None:
    await publish(hub, "repo-a")
    await publish(hub, "other")
    path = "events" if transport == "sse" else "ws"
    reader = Reader()
    done = asyncio.Event()

    async def read() -> None:
        if transport == "sse":
            async with hub.session.get(f"{hub.url}/{path}?topic_prefix=repo-") as resp:
                await reader.sse(resp, lambda: done.is_set() or len(reader.events) >= 3)
        else:
            async with hub.session.ws_connect(f"{hub.url}/{path}?topic_prefix=repo-") as ws:
                await reader.ws(ws, lambda: done.is_set() or len(reader.events) >= 3)

    async with asyncio.timeout(20 * TIME_SCALE):
        reading = asyncio.create_task(read())
        await reader.opened.wait()
        expected = [("repo-a", i) for i in await publish(hub, "repo-a")]
        await publish(hub, "other")
        expected += [("repo-new", i) for i in await publish(hub, "repo-new", 2)]  # first event
        await reading
    assert sorted(reader.pairs()) == sorted(expected)


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_resuming_from_a_composite_id_loses_and_repeats_nothing(
    hub: Hub, transport: str
) -> None:
    topics = [f"r-{i}" for i in range(6)]
    published = []
    for round_ in range(3):
        for topic in topics:
            published += [(topic, i) for i in await publish(hub, topic, 2, start=round_ * 2)]
    url = f"{hub.url}/{'events' if transport == 'sse' else 'ws'}?topic_prefix=r-&since=0"
    follow = follow_sse if transport == "sse" else follow_ws
    first = await follow(hub.session, url, 15)
    assert first.last_id is not None
    for topic in topics:  # more while away, and a topic first published then
        published += [(topic, i) for i in await publish(hub, topic, 1, start=9)]
    published += [("r-late", i) for i in await publish(hub, "r-late", 3)]
    rest = len(published) - len(first.events)
    if transport == "sse":
        second = await follow_sse(hub.session, url, rest, headers={"Last-Event-ID": first.last_id})
    else:
        resumed = f"{hub.url}/ws?topic_prefix=r-&since={first.last_id}"
        second = await follow_ws(hub.session, resumed, rest)
    got = first.pairs() + second.pairs()
    assert len(got) == len(set(got)) and set(got) == set(published)
    for topic in [*topics, "r-late"]:  # in order within each topic
        theirs = [i for t, i in got if t == topic]
        assert theirs == sorted(theirs, key=lambda i: tuple(map(int, i.split("-"))))


async def test_without_since_a_stream_starts_at_every_topics_end(hub: Hub) -> None:
    await publish(hub, "a", 3)
    async with hub.session.ws_connect(f"{hub.url}/ws?topic=a,b") as ws:
        await ws.receive_json(timeout=10 * TIME_SCALE)
        ids = await publish(hub, "a")
        message = await ws.receive_json(timeout=10 * TIME_SCALE)
        assert [e["id"] for e in message["events"]] == ids


async def test_since_a_time_takes_every_topic_from_that_moment(hub: Hub) -> None:
    await publish(hub, "a", 2)
    await publish(hub, "b", 1)
    await asyncio.sleep(0.01)  # a millisecond boundary between the two halves
    moment = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    await asyncio.sleep(0.01)
    later = [("a", i) for i in await publish(hub, "a", 1, start=5)]
    later += [("b", i) for i in await publish(hub, "b", 2, start=5)]
    reader = await follow_sse(hub.session, f"{hub.url}/events?topic=a,b&since={moment}", 3)
    assert sorted(reader.pairs()) == sorted(later)


async def test_the_filters_of_one_topic_apply(hub: Hub) -> None:
    rows = [
        {"loc": "http://a.example/1", "change": "created"},
        {"loc": "http://b.example/2", "change": "created"},
        {"loc": "http://a.example/3", "change": "deleted"},
    ]
    ids = (await (await hub.publish("x", notification(rows))).json())["ids"]
    url = f"{hub.url}/events?topic=x&since=0&change=created&prefix=http://a.example/"
    async with hub.session.get(url) as resp:
        reader = Reader()
        await reader.sse(resp, reader.count(1))
        more = (await (await hub.publish("x", notification(rows[:1]))).json())["ids"]
        await reader.sse(resp, reader.count(2))
    assert [e["id"] for e in reader.events] == [ids[0], more[0]]


@pytest.mark.parametrize(
    ("query", "status", "says"),
    [
        ("", 400, "name the topics"),
        ("topic=a/b", 400, "topic="),
        ("topic_prefix=-x", 400, "topic_prefix"),
        ("topic=a&since=yesterday", 400, "invalid event id or time in since"),
        ("topic=a&since=m1.!!", 400, "invalid resume id in since"),
        ("topic=a&since=99999999999999-0", 400, "beyond the last event id of every topic"),
        ("topic=a&change=exploded", 400, "change filter"),
    ],
)
async def test_bad_requests_are_400_naming_the_problem(
    hub: Hub, query: str, status: int, says: str
) -> None:
    await publish(hub, "a")
    for path in ("events", "ws"):
        async with hub.session.get(f"{hub.url}/{path}?{query}") as resp:
            assert resp.status == status, (path, query, await resp.text())
            assert says in (await resp.json())["error"]
    assert _followers(hub) == 0


async def test_a_composite_position_beyond_its_topic_is_400_naming_it(hub: Hub) -> None:
    ids = await publish(hub, "a")
    ms, seq = map(int, ids[0].split("-"))
    beyond = encode((0, 0), {"a": (ms + 1000, 0)})
    async with hub.session.get(f"{hub.url}/events?topic=a&since={beyond}") as resp:
        assert resp.status == 400
        answer = await resp.json()
        assert answer["topic"] == "a" and "beyond its last event id" in answer["error"]
    fine = encode((0, 0), {"a": (ms, seq), "never-published": (ms + 1000, 0)})
    async with hub.session.get(f"{hub.url}/events?topic=a,never-published&since={fine}") as resp:
        assert resp.status == 200


class TestLimits:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"stream_max_topics": 3, "stream_max_id_bytes": 300}

    async def test_more_topics_than_the_limit_is_400_naming_it(self, hub: Hub) -> None:
        for topic in ("p-1", "p-2", "p-3", "p-4"):
            await publish(hub, topic)
        for query in ("topic=a,b,c,d", "topic_prefix=p-", "topic=a&topic_prefix=p-"):
            async with hub.session.get(f"{hub.url}/events?{query}") as resp:
                assert resp.status == 400, query
                answer = await resp.json()
                assert "stream_max_topics" in answer["error"] and "3" in answer["error"]

    async def test_a_longer_id_than_the_limit_is_400_naming_it(self, hub: Hub) -> None:
        listed = {f"t{i:03d}": (10**12 + i, 0) for i in range(1, 80)}
        long_id = encode((10**12, 0), listed)
        assert len(long_id) > 300
        headers = {"Last-Event-ID": long_id}
        async with hub.session.get(f"{hub.url}/events?topic=a", headers=headers) as resp:
            assert resp.status == 400
            assert (await resp.json())["limit"] == "stream_max_id_bytes"

    async def test_a_prefix_that_comes_to_match_too_many_ends_the_stream(self, hub: Hub) -> None:
        await publish(hub, "p-1")
        async with hub.session.get(f"{hub.url}/events?topic_prefix=p-") as resp:
            reader = Reader()
            async with asyncio.timeout(20 * TIME_SCALE):
                reading = asyncio.create_task(reader.sse(resp))
                await reader.opened.wait()
                for topic in ("p-2", "p-3", "p-4"):
                    await publish(hub, topic)
                await reading
        kind, data, _id = reader.named[-1]
        assert kind == "error" and "stream_max_topics" in data


class TestShortIds:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"stream_max_id_bytes": 256}

    async def test_ids_stay_within_the_limit_and_resume_exactly(self, hub: Hub) -> None:
        """Forty topics changing at once: every id the hub gives out fits; where one could
        not, the stream ends with its resume point, and resuming loses nothing."""
        topics = [f"burst-topic-{i:02d}" for i in range(40)]
        for topic in topics:
            await publish(hub, topic)
        published: list[tuple[str, str]] = []
        readers: list[Reader] = []
        resume: str | None = None
        async with asyncio.timeout(60 * TIME_SCALE):
            while sum(len(r.events) for r in readers) < 200:
                headers = {"Last-Event-ID": resume} if resume else {}
                async with hub.session.get(
                    f"{hub.url}/events?topic_prefix=burst-", headers=headers
                ) as resp:
                    assert resp.status == 200, await resp.text()
                    reader = Reader()
                    readers.append(reader)
                    reading = asyncio.create_task(
                        reader.sse(resp, lambda: sum(len(r.events) for r in readers) >= 200)
                    )
                    await reader.opened.wait()
                    if not published:
                        for _round in range(5):
                            for topic in topics:
                                published += [(topic, i) for i in await publish(hub, topic)]
                    await reading
                resume = reader.last_id
        got = [pair for r in readers for pair in r.pairs()]
        ids = [i for r in readers for i in r.ids]
        assert max(len(i) for i in ids) <= 256
        assert len(got) == len(set(got)) and set(got) == set(published)


class TestPrivateTopics:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {
            "topic_read_tokens": {"pri*": ["rp"], "secret": ["rs"]},
            "jwt_key": KEY,
        }

    async def test_a_named_private_topic_needs_its_token(self, hub: Hub) -> None:
        for path in ("events", "ws"):
            async with hub.session.get(f"{hub.url}/{path}?topic=open,secret") as resp:
                assert resp.status == 401
            headers = {"Authorization": "Bearer rp"}
            async with hub.session.get(f"{hub.url}/{path}?topic=secret", headers=headers) as resp:
                assert resp.status == 403
        async with hub.session.get(f"{hub.url}/events?topic=p&access_token=nope") as resp:
            assert resp.status == 403 and "reads no topic" in (await resp.json())["error"]

    async def test_a_prefix_streams_only_the_topics_the_token_reads(self, hub: Hub) -> None:
        """Open topics, and the private ones the token grants: the others are neither
        streamed nor named in an id, with no token, a static one or a signed one."""
        for topic in ("pub-1", "pri-1", "pri-2", "secret"):
            await publish(hub, topic)
        jwt = mint(KEY, ["pri-1"], 300)
        cases = [
            (None, {"pub-1"}),
            ("rp", {"pub-1", "pri-1", "pri-2"}),
            ("rs", {"pub-1", "secret"}),
            (jwt, {"pub-1", "pri-1"}),
            (mint(KEY, ["pri*"], 300), {"pub-1", "pri-1", "pri-2"}),
        ]
        for token, readable in cases:
            query = "topic_prefix=p&topic_prefix=s&since=0"
            if token is not None:
                query += f"&access_token={token}"
            reader = await follow_sse(hub.session, f"{hub.url}/events?{query}", len(readable))
            assert {t for t, _i in reader.pairs()} == readable, token
            for resume_id in reader.ids:
                assert set(resume_topics(resume_id)) <= readable
            # Live: every topic gets one more; only the readable ones come through.
            url = f"{hub.url}/ws?topic_prefix=p&topic_prefix=s"
            if token is not None:
                url += f"&access_token={token}"
            async with hub.session.ws_connect(url) as ws:
                live = Reader()
                async with asyncio.timeout(20 * TIME_SCALE):
                    reading = asyncio.create_task(live.ws(ws, live.count(len(readable))))
                    await live.opened.wait()
                    for topic in ("secret", "pri-2", "pri-1", "pub-1"):
                        await publish(hub, topic, start=7)
                    await reading
            assert {t for t, _i in live.pairs()} == readable, token

    async def test_a_renewed_token_on_a_websocket_must_read_every_topic_followed(
        self, hub: Hub
    ) -> None:
        await publish(hub, "pri-1")
        url = f"{hub.url}/ws?topic_prefix=pri-&access_token=rp"
        async with hub.session.ws_connect(url) as ws:
            await ws.receive_json(timeout=10 * TIME_SCALE)
            await ws.send_json({"access_token": mint(KEY, ["pri-*"], 300)})
            ids = await publish(hub, "pri-1", start=3)  # still streaming after the renewal
            message = await ws.receive_json(timeout=10 * TIME_SCALE)
            assert [e["id"] for e in message["events"]] == ids
            await ws.send_json({"access_token": mint(KEY, ["other"], 300)})
            msg = await ws.receive(timeout=10 * TIME_SCALE)
            assert msg.type == aiohttp.WSMsgType.CLOSE and ws.close_code == 4403


async def test_shutdown_ends_with_the_resume_point_and_resuming_loses_nothing(
    hub: Hub, redis_url: str
) -> None:
    """As a rolling restart: the stream ends with its id, and its client resumes on another
    hub process of the same Redis."""
    await publish(hub, "s-1")
    async with hub.session.get(f"{hub.url}/events?topic_prefix=s-") as resp:
        reader = Reader()
        async with asyncio.timeout(20 * TIME_SCALE):
            reading = asyncio.create_task(reader.sse(resp))
            await reader.opened.wait()
            before = [("s-1", i) for i in await publish(hub, "s-1", 2)]
            await wait_for(lambda: len(reader.events) == 2)
            await hub.app[STREAMING].closing.close_all(5)
            await reading
    kind, data, resume = reader.named[-1]
    assert kind == "shutdown" and resume == reader.last_id and resume in data
    assert reader.pairs() == before
    after = [("s-2", i) for i in await publish(hub, "s-2")]
    settings = Settings(host="127.0.0.1", port=free_port())
    runner, _app = await start_hub(settings, redis_url)
    try:
        resumed = await follow_sse(
            hub.session,
            f"{settings.public_url}/events?topic_prefix=s-",
            1,
            headers={"Last-Event-ID": resume},
        )
    finally:
        await runner.cleanup()
    assert resumed.pairs() == after


async def test_a_deleted_topic_ends_the_stream_with_its_resume_point(hub: Hub) -> None:
    await publish(hub, "d-1")
    async with hub.session.ws_connect(f"{hub.url}/ws?topic_prefix=d-") as ws:
        reader = Reader()
        async with asyncio.timeout(20 * TIME_SCALE):
            reading = asyncio.create_task(reader.ws(ws))
            await reader.opened.wait()
            await hub.app[STREAMING].feeds.end("d-1")
            await reading
    assert reader.closed is not None
    code, reason = reader.closed
    assert code == 1000 and reason.startswith("topic deleted: d-1; resume with since=m1.")
    await wait_for(lambda: _followers(hub) == 0)


async def test_a_stream_of_several_topics_counts_once_as_a_connection_and_per_topic(
    hub: Hub,
) -> None:
    async with hub.session.get(f"{hub.url}/events?topic=a,b") as resp:
        reader = Reader()
        reading = asyncio.create_task(reader.sse(resp))
        await asyncio.wait_for(reader.opened.wait(), 10 * TIME_SCALE)
        presence = hub.app[STREAMING].presence
        assert presence.snapshot() == {("a", "sse"): 1, ("b", "sse"): 1}
        reading.cancel()
    await publish(hub, "a")  # aiohttp's path learns the client left when it writes
    await wait_for(lambda: not hub.app[STREAMING].presence.snapshot())


async def test_a_time_in_the_future_waits_for_it(hub: Hub) -> None:
    await publish(hub, "a")
    soon = datetime.fromtimestamp(time.time() + 0.3, UTC).isoformat().replace("+00:00", "Z")
    async with hub.session.ws_connect(f"{hub.url}/ws?topic=a&since={soon}") as ws:
        await ws.receive_json(timeout=10 * TIME_SCALE)
        await asyncio.sleep(0.5)  # past the moment: what comes now is after it
        ids = await publish(hub, "a", start=4)
        message = await ws.receive_json(timeout=10 * TIME_SCALE)
        assert [e["id"] for e in message["events"]] == ids


class TestBrowsers:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"cors_origins": ["https://app.example"]}

    async def test_a_listed_page_may_follow_and_another_may_not_open_a_websocket(
        self, hub: Hub
    ) -> None:
        await publish(hub, "a")
        headers = {"Origin": "https://app.example"}
        async with hub.session.get(f"{hub.url}/events?topic=a", headers=headers) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == "https://app.example"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await hub.session.ws_connect(
                f"{hub.url}/ws?topic=a", headers={"Origin": "https://evil.example"}
            )
        assert refused.value.status == 403
        async with hub.session.ws_connect(f"{hub.url}/ws?topic=a", headers=headers) as ws:
            assert (await ws.receive_json(timeout=10 * TIME_SCALE))["events"] == []


async def test_several_topics_on_a_redis_cluster_resume_exactly(
    redis_cluster: RedisClusterProcesses,
) -> None:
    """On a Cluster each topic's feed reads its own node (XREAD), each node makes ids from
    its own clock, and the topic names live on one of them: a prefix stream still resumes
    every topic exactly, one first published while its client was away included."""
    for _, port in redis_cluster.nodes:
        node = redis_cluster.client(port)
        node.flushall()
        node.close()
    host, port = redis_cluster.nodes[0]
    settings = Settings(host="127.0.0.1", port=free_port(), stream_topic_scan_seconds=0.1)
    runner, _app = await start_hub(settings, f"redis+cluster://{host}:{port}")
    base = settings.public_url
    try:
        async with aiohttp.ClientSession() as session:

            async def publish_to(topic: str, n: int, start: int = 0) -> list[tuple[str, str]]:
                body = notification(changes(n, start=start))
                headers = {"Content-Type": "application/xml"}
                async with session.post(f"{base}/topics/{topic}", data=body, headers=headers) as r:
                    assert r.status == 202, await r.text()
                    return [(topic, i) for i in (await r.json())["ids"]]

            topics = [f"c-{i:02d}" for i in range(12)]  # over the three masters' slots
            published: list[tuple[str, str]] = []
            for topic in topics:
                published += await publish_to(topic, 2)
            first = await follow_sse(session, f"{base}/events?topic_prefix=c-&since=0", 10)
            for topic in [*topics, "c-new"]:
                published += await publish_to(topic, 1, start=5)
            assert first.last_id is not None
            second = await follow_sse(
                session,
                f"{base}/events?topic_prefix=c-",
                len(published) - len(first.events),
                headers={"Last-Event-ID": first.last_id},
            )
    finally:
        await runner.cleanup()
    got = first.pairs() + second.pairs()
    assert len(got) == len(set(got)) and set(got) == set(published)


async def test_publishes_to_another_process_reach_a_stream_of_several_topics(
    hub: Hub, redis_url: str
) -> None:
    """Followed on one hub process, published on another (tail notices, and topics first
    published there found by the topic names): exact across a resume to the first."""
    settings = Settings(host="127.0.0.1", port=free_port(), stream_topic_scan_seconds=0.1)
    runner, _app = await start_hub(settings, redis_url)
    other = settings.public_url
    try:
        published = [("x-1", i) for i in await publish(hub, "x-1")]
        async with hub.session.get(f"{other}/events?topic_prefix=x-") as resp:
            reader = Reader()
            async with asyncio.timeout(20 * TIME_SCALE):
                reading = asyncio.create_task(reader.sse(resp, reader.count(6)))
                await reader.opened.wait()
                published = []
                for topic in ("x-1", "x-2", "x-3"):  # x-2, x-3: first published now
                    published += [(topic, i) for i in await publish(hub, topic, 2)]
                await reading
        assert sorted(reader.pairs()) == sorted(published)
        more = [("x-4", i) for i in await publish(hub, "x-4")]
        resumed = await follow_sse(
            hub.session,
            f"{hub.url}/events?topic_prefix=x-",
            1,
            headers={"Last-Event-ID": reader.last_id or ""},
        )
        assert resumed.pairs() == more
    finally:
        await runner.cleanup()


async def test_a_list_or_a_star_in_a_topics_path_points_to_the_stream_of_several(
    hub: Hub,
) -> None:
    for path, route in (("topics/a,b/events", "/events?topic="), ("topics/*/ws", "/ws?topic=")):
        async with hub.session.get(f"{hub.url}/{path}") as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
            assert route in error and "topic_prefix=" in error

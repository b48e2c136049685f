"""Change List pages and index: rollover, closure, contiguity, caching, retention, restarts."""

from __future__ import annotations

import asyncio
import gzip
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.core.events import Change
from hub.core.settings import Settings
from hub.store import keys, scripts
from hub.store.event_store import EventStore
from hub.store.pages import PageChain
from resourcesync import ChangeList, parse
from tests.conftest import Hub, start_hub
from tests.hub.documents_support import Poller, crawl, event_id, get_doc, id_key
from tests.support import changes, free_port, notification, wait_for

PAGE = 5


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"changelist_page_entries": PAGE, "changelist_scan_seconds": 0.05}


@asynccontextmanager
async def own_hub(redis_url: str, **overrides: Any) -> AsyncIterator[Hub]:
    """A hub with its own settings (the ``hub`` fixture's are fixed for this module)."""
    settings = Settings(host="127.0.0.1", port=free_port(), **overrides)
    runner, app = await start_hub(settings, redis_url)
    try:
        async with aiohttp.ClientSession() as session:
            yield Hub(settings.public_url, app, settings, session)
    finally:
        await runner.cleanup()


async def publish(hub: Hub, topic: str, items: list[dict[str, Any]]) -> list[str]:
    resp = await hub.session.post(
        f"{hub.url}/topics/{topic}",
        data=io.BytesIO(notification(items)),
        headers={"Content-Type": "application/xml"},
    )
    body = await resp.json()
    assert resp.status == 202, body
    return list(body["ids"])


async def test_pages_roll_over_at_max_entries(hub: Hub) -> None:
    ids = []
    for start in range(0, 23, 4):
        ids += await publish(hub, "t", changes(min(4, 23 - start), start=start))
    result = await crawl(hub.session, hub.url, "t")
    sizes = [len(result.pages[e.loc].entries) for e in result.index.entries]
    assert sizes == [5, 5, 5, 5, 3]
    assert [event_id(e) for e in result.entries] == ids
    assert [e.loc for e in result.entries] == [f"http://example.org/r{i}" for i in range(23)]
    # publisher's lastmod kept, hub receipt time as rs:md datetime
    first = result.entries[0]
    assert first.lastmod is not None and first.lastmod.year == 2026
    assert first.md.datetime is not None


async def test_topic_uri_serves_open_page_with_discovery_links(hub: Hub) -> None:
    await publish(hub, "news", changes(7))
    resp, doc, body = await get_doc(hub.session, f"{hub.url}/topics/news", hub.url, "news")
    assert isinstance(doc, ChangeList) and doc.md.until is None
    assert len(doc.entries) == 2
    link = resp.headers["Link"]
    assert f'<{hub.url}/>; rel="hub"' in link and f'<{hub.url}/topics/news>; rel="self"' in link
    same = await hub.session.get(resp.headers["Content-Location"])
    assert await same.read() == body
    async with hub.session.head(f"{hub.url}/topics/news") as head:
        assert head.status == 200 and head.headers["Link"] == link
        assert await head.read() == b""


async def test_page_closes_when_its_window_ends(redis_url: str) -> None:
    async with own_hub(redis_url, changelist_page_seconds=1) as hub:
        await _window_closure(hub)


async def _window_closure(hub: Hub) -> None:
    await publish(hub, "w", changes(2))
    index_url = f"{hub.url}/topics/w/changelist.xml"

    async def closed() -> bool:
        _, index, _ = await get_doc(hub.session, index_url, hub.url, "w")
        return len(index.entries) == 2

    await wait_for(closed, timeout=10)
    before = await crawl(hub.session, hub.url, "w")
    first, second = before.index.entries
    assert first.md.until is not None and second.md.from_ == first.md.until
    assert len(before.pages[second.loc].entries) == 0
    await publish(hub, "w", changes(1, start=2))
    after = await crawl(hub.session, hub.url, "w")
    assert after.bodies[first.loc] == before.bodies[first.loc]
    assert len(after.pages[second.loc].entries) == 1


async def test_http_caching_and_gzip(hub: Hub) -> None:
    await publish(hub, "c", changes(7))
    url = f"{hub.url}/topics/c/changelist/00000001.xml"
    resp, _, body = await get_doc(hub.session, url, hub.url, "c")
    assert resp.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    etag, modified = resp.headers["ETag"], resp.headers["Last-Modified"]
    async with hub.session.get(url, headers={"If-None-Match": etag}) as again:
        assert again.status == 304
    async with hub.session.get(url, headers={"If-Modified-Since": modified}) as again:
        assert again.status == 304
    cached, _, cached_body = await get_doc(hub.session, url, hub.url, "c")
    assert cached_body == body and cached.headers["ETag"] == etag
    async with aiohttp.ClientSession(auto_decompress=False) as raw:
        for _ in range(2):  # rendered, then cached
            async with raw.get(url, headers={"Accept-Encoding": "gzip"}) as zipped:
                assert zipped.headers["Content-Encoding"] == "gzip"
                assert gzip.decompress(await zipped.read()) == body
        async with raw.get(url, headers={"Accept-Encoding": "identity"}) as plain:
            assert "Content-Encoding" not in plain.headers
            assert await plain.read() == body
    open_url = f"{hub.url}/topics/c/changelist/00000002.xml"
    resp, _, _ = await get_doc(hub.session, open_url, hub.url, "c")
    assert resp.headers["Cache-Control"] == "no-cache"
    etag = resp.headers["ETag"]
    async with hub.session.get(open_url, headers={"If-None-Match": etag}) as again:
        assert again.status == 304
    await publish(hub, "c", changes(1, start=7))
    async with hub.session.get(open_url, headers={"If-None-Match": etag}) as again:
        assert again.status == 200


async def test_unknown_topic_and_page(hub: Hub) -> None:
    for path in ("/topics/nope", "/topics/nope/changelist.xml", "/topics/nope/changelist/1.xml"):
        async with hub.session.get(hub.url + path) as resp:
            assert resp.status == 404
            assert "unknown topic 'nope'" in (await resp.json())["error"]
    await publish(hub, "t", changes(1))
    for page in ("2", "0", "x1"):
        async with hub.session.get(f"{hub.url}/topics/t/changelist/{page}.xml") as resp:
            assert resp.status == 404
            assert "no Change List page" in (await resp.json())["error"]


async def test_retention_withdraws_whole_pages(hub: Hub, redis_url: str) -> None:
    ids = await publish(hub, "r", changes(12))  # pages 1, 2 closed; 3 open with 2
    await crawl(hub.session, hub.url, "r")
    client = aioredis.Redis.from_url(redis_url)
    try:
        # Retention trims into page 2: pages 1 and 2 are withdrawn, never half-served.
        await client.xtrim(keys.events("r"), minid=ids[7], approximate=False)
        result = await crawl(hub.session, hub.url, "r")
        assert [e.loc.rsplit("/", 1)[1] for e in result.index.entries] == ["00000003.xml"]
        assert [event_id(e) for e in result.entries] == ids[10:]
        for n in (1, 2):
            async with hub.session.get(f"{hub.url}/topics/r/changelist/{n}.xml") as resp:
                assert resp.status == 404
                assert "withdrawn" in (await resp.json())["error"]
        # Retention trims into the open page: it is withdrawn, a new page restarts.
        await client.xtrim(keys.events("r"), minid=ids[11], approximate=False)
        result = await crawl(hub.session, hub.url, "r")
        assert [event_id(e) for e in result.entries] == ids[11:]
        assert result.index.entries[0].loc.endswith("00000004.xml")
        more = await publish(hub, "r", changes(6, start=12))
        result = await crawl(hub.session, hub.url, "r")
        assert [event_id(e) for e in result.entries] == ids[11:] + more
    finally:
        await client.aclose()


async def test_restart_keeps_pages(redis_url: str) -> None:
    settings = Settings(host="127.0.0.1", port=free_port(), changelist_page_entries=PAGE)
    async with aiohttp.ClientSession() as session:
        runner, app = await start_hub(settings, redis_url)
        hub = Hub(settings.public_url, app, settings, session)
        ids = await publish(hub, "s", changes(8))
        before = await crawl(session, hub.url, "s")
        await runner.cleanup()
        runner, app = await start_hub(settings, redis_url)
        try:
            hub = Hub(settings.public_url, app, settings, session)
            after = await crawl(session, hub.url, "s")
            assert after.bodies == before.bodies
            ids += await publish(hub, "s", changes(9, start=8))
            final = await crawl(session, hub.url, "s")
            assert [event_id(e) for e in final.entries] == ids
            first = before.index.entries[0].loc
            assert final.bodies[first] == before.bodies[first]
        finally:
            await runner.cleanup()


async def test_full_page_of_50000_entries(redis_url: str) -> None:
    async with own_hub(redis_url, changelist_scan_seconds=0) as hub:
        for start in range(0, 50_001, 25_000):
            await publish(hub, "big", changes(min(25_000, 50_001 - start), start=start))
        result = await crawl(hub.session, hub.url, "big")
        sizes = [len(result.pages[e.loc].entries) for e in result.index.entries]
        assert sizes == [50_000, 1]


async def test_a_backlog_is_scanned_a_thousand_events_per_script_call(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``advance_pages`` call blocks Redis for everyone: it reads at most 1,000 events
    (~3 ms), and the chain loops until caught up. At 100,000 a call held Redis 60-260 ms."""
    client = aioredis.Redis.from_url(redis_url)
    store = EventStore(client)
    try:
        for start in range(0, 2_500, 500):
            batch = [f"http://example.org/{i}" for i in range(start, start + 500)]
            await store.append("t", [Change(loc, "updated", b"{}") for loc in batch])
        scanned: list[int] = []
        run = store.scripts.run

        async def counted(script: Any, script_keys: Any, args: list[Any], **kw: Any) -> Any:
            out = await run(script, script_keys, args, **kw)
            if script is scripts.ADVANCE_PAGES:
                scanned.append(int(out[4]))  # the open page's count after this call
            return out

        monkeypatch.setattr(store.scripts, "run", counted)
        chain = await PageChain(store.scripts, window_seconds=3600, max_entries=50_000).advance("t")
        assert scanned == [1_000, 2_000, 2_500]
        assert (chain.open.n, chain.open.count, chain.closed) == (1, 2_500, ())
    finally:
        await store.close()
        await client.aclose()


# -- the poller never misses a change ---------------------------------------------------

_lastmods = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2035, 1, 1)).map(
    lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")
)
# One notification is itself in forward chronological order (ingest checks it); lastmods
# are late and out of order across notifications and publishers.
_batch = st.lists(
    st.tuples(_lastmods, st.sampled_from(["created", "updated", "deleted"])),
    min_size=1,
    max_size=7,
).map(sorted)
_publishers = st.lists(st.lists(_batch, min_size=1, max_size=5), min_size=1, max_size=4)

_example = iter(range(10**9))


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(publishers=_publishers, polls=st.integers(min_value=1, max_value=6))
def test_poller_never_misses_a_change(
    redis_url: str, publishers: list[list[list[tuple[str, str]]]], polls: int
) -> None:
    """Publishers with late and out-of-order lastmods race a poller that remembers only
    (page, entries consumed): it sees every acknowledged change once, in event-id order.

    (A synchronous test running its own loop per example: hypothesis examples and
    pytest-asyncio's per-test loop do not mix.)
    """
    asyncio.run(_race(redis_url, publishers, polls))


async def _race(redis_url: str, publishers: list[list[list[tuple[str, str]]]], polls: int) -> None:
    topic = f"p{next(_example)}"
    async with own_hub(redis_url, changelist_page_entries=3, changelist_scan_seconds=0.01) as hub:
        acknowledged = await publish(hub, topic, changes(1, prefix=f"http://example.org/{topic}/"))
        poller = Poller(hub.session, hub.url, topic)
        done = asyncio.Event()

        async def publisher(k: int, batches: list[list[tuple[str, str]]]) -> None:
            for b, batch in enumerate(batches):
                items = [
                    {"loc": f"http://example.org/{topic}/{k}/{b}/{i}", "lastmod": lm, "change": ch}
                    for i, (lm, ch) in enumerate(batch)
                ]
                acknowledged.extend(await publish(hub, topic, items))

        async def follow() -> None:
            while not done.is_set():
                await poller.poll()
                await asyncio.sleep(0)

        follower = asyncio.create_task(follow())
        await asyncio.gather(*(publisher(k, b) for k, b in enumerate(publishers)))
        done.set()
        await follower

        async def caught_up() -> bool:
            await poller.poll()
            return len(poller.seen) >= len(acknowledged)

        await wait_for(caught_up, timeout=20)
        assert sorted(poller.seen, key=id_key) == sorted(acknowledged, key=id_key)
        assert poller.seen == sorted(poller.seen, key=id_key)
        for _ in range(polls):  # polling again finds nothing new
            await poller.poll()
        assert len(poller.seen) == len(acknowledged)
        index = await hub.session.get(f"{hub.url}/topics/{topic}/changelist.xml")
        parse(await index.read(), validate=True)


async def test_events_trimmed_before_the_chain_saw_them_are_not_papered_over(
    redis_url: str,
) -> None:
    """A burst larger than the length bound between two scans: the trimmed events were
    never paged, so the empty open page must not carry on as if nothing was lost."""
    async with own_hub(
        redis_url,
        changelist_page_entries=3,
        changelist_scan_seconds=0,
        topic_retention_max_events={"b": 5},
    ) as hub:
        first = await publish(hub, "b", changes(3))  # page 1 closes at its 3rd entry
        before = await crawl(hub.session, hub.url, "b")
        open_page = before.index.entries[-1].loc
        burst = await publish(hub, "b", changes(10, start=3))  # keeps the last 5 only
        after = await crawl(hub.session, hub.url, "b")
        assert [event_id(e) for e in after.entries] == burst[5:]
        # The page that was open before the burst is gone, not silently continued ...
        async with hub.session.get(open_page) as resp:
            assert resp.status == 404
        # ... and nothing served claims to cover the lost events.
        served_from = min(parse_w3c(e.md.from_) for e in after.index.entries)  # type: ignore[union-attr]
        assert served_from >= datetime.fromtimestamp(int(burst[5].split("-")[0]) / 1000, UTC)
        assert first  # (page 1 itself was withdrawn with its trimmed events)


def parse_w3c(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))

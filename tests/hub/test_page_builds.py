"""Change List pages built off the serving path (hub.web.page_builds): what a reader gets,
cold, from a build under way, from the cache, from Redis (another process's build), or
from a version that went on from an earlier one, is byte for byte the page rendered whole
from the stream; the open page
holds a change published just before it is read; each entry is read once however the page
grows; the open pages kept stay within their bound."""

from __future__ import annotations

import asyncio
import gzip
import io
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from hub.core import rendering
from hub.core.settings import Settings
from hub.store import keys
from hub.store.pages import Page
from hub.store.rendered_pages import KEPT_SECONDS
from hub.web.app import RUNTIME
from hub.web.documents import READING
from resourcesync import ChangeList, parse
from tests.conftest import Hub, start_hub
from tests.support import changes, free_port, notification, wait_for
from tests.watchdog import Watchdog

#: Entries per page: three batches of a build (a first small one, a full one, the rest).
PAGE = 6000


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"changelist_page_entries": PAGE, "changelist_scan_seconds": 0.05}


async def publish(hub: Hub, topic: str, n: int, start: int = 0) -> None:
    for first in range(start, start + n, 5000):
        body = notification(changes(min(5000, start + n - first), start=first))
        async with hub.session.post(
            f"{hub.url}/topics/{topic}",
            data=io.BytesIO(body),
            headers={"Content-Type": "application/xml"},
        ) as resp:
            assert resp.status == 202, await resp.text()


async def reference(hub: Hub, topic: str, n: int) -> tuple[Page, bytes]:
    """Page ``n`` as it is now, and its bytes rendered whole from the stream here."""
    reading = hub.app[READING]
    _, page = await reading.pages.page(topic, n)
    assert page is not None
    u = reading.urls
    links = [("up", u.capabilitylist(topic)), ("index", u.changelist_index(topic))]
    head = rendering.RSHUB_URLSET_OPEN + rendering.root(
        "changelist", links, from_=page.from_ms, until=page.until_ms
    )
    rows = []
    if page.first is not None and page.last is not None:
        rows = await hub.app[RUNTIME].store.range(topic, page.first, page.last, page.count)
    assert len(rows) == page.count
    body = rendering.change_rows(head, rows, page.from_ms) + rendering.URLSET_CLOSE.encode()
    return page, body


async def get(hub: Hub, url: str, *, gz: bool = False) -> tuple[bytes, CIMultiDict[str]]:
    headers = {"Accept-Encoding": "gzip" if gz else "identity"}
    async with hub.session.get(url, headers=headers, auto_decompress=False) as resp:
        body = await resp.read()
        assert resp.status == 200, body[:300]
        if resp.headers.get("Content-Encoding") == "gzip":
            assert gz
            body = gzip.decompress(body)
        return body, CIMultiDict(resp.headers)


async def forget(hub: Hub, topic: str = "t") -> None:
    """Empty every cache of rendered pages: the next read builds from the stream."""
    reading = hub.app[READING]
    reading.doc_cache.clear()
    reading.page_builds.clear()
    for n in (1, 2):
        await hub.redis.delete(keys.rendered_page(topic, n))


async def test_closed_page_cold_cached_and_gzipped_equal_the_page_rendered_whole(
    hub: Hub,
) -> None:
    await publish(hub, "t", PAGE + 1)
    page, expected = await reference(hub, "t", 1)
    assert page.closed and page.count == PAGE
    builds = hub.app[READING].page_builds
    url = f"{hub.url}/topics/t/changelist/1.xml"
    cold, headers = await get(hub, url)
    assert cold == expected and builds.started == 1
    assert "Content-Length" not in headers  # sent as it was built
    cached, again = await get(hub, url)
    assert cached == expected and builds.started == 1  # from the cache of closed pages
    assert again["Content-Length"] == str(len(expected)) and again["ETag"] == headers["ETag"]
    assert "immutable" in again["Cache-Control"]
    await forget(hub)
    zipped, gz_headers = await get(hub, url, gz=True)
    assert zipped == expected and builds.started == 2
    assert gz_headers["Content-Encoding"] == "gzip" and gz_headers["ETag"] == headers["ETag"]
    zipped, _ = await get(hub, url, gz=True)
    assert zipped == expected and builds.started == 2
    doc = parse(cold)
    assert isinstance(doc, ChangeList) and len(doc.entries) == PAGE
    assert doc.md.until is not None


async def test_concurrent_cold_readers_share_one_build(hub: Hub) -> None:
    await publish(hub, "t", PAGE + 1)
    _, expected = await reference(hub, "t", 1)
    url = f"{hub.url}/topics/t/changelist/1.xml"
    bodies = await asyncio.gather(*(get(hub, url, gz=i % 2 == 0) for i in range(8)))
    assert {body for body, _ in bodies} == {expected}
    assert len({headers["ETag"] for _, headers in bodies}) == 1
    assert hub.app[READING].page_builds.started == 1


async def test_open_page_goes_on_from_its_last_version_until_it_closes(hub: Hub) -> None:
    builds = hub.app[READING].page_builds
    await publish(hub, "t", PAGE // 2)
    url = f"{hub.url}/topics/t/changelist/1.xml"
    body, first = await get(hub, url)
    page, expected = await reference(hub, "t", 1)
    assert not page.closed and body == expected
    assert builds.events_read == PAGE // 2
    # a change published just before the read is in it; only that change is read
    await publish(hub, "t", 1, start=PAGE // 2)
    body, headers = await get(hub, url, gz=True)
    _, expected = await reference(hub, "t", 1)
    assert body == expected and b"http://example.org/r3000<" in body
    assert headers["ETag"] != first["ETag"]
    assert builds.events_read == PAGE // 2 + 1
    # the topic URI is the same open page, from the same build
    topic_body, _ = await get(hub, f"{hub.url}/topics/t")
    assert topic_body == expected and builds.events_read == PAGE // 2 + 1
    # the page closes: its closed version reuses the entries rendered so far
    await publish(hub, "t", PAGE // 2, start=PAGE // 2 + 1)
    body, headers = await get(hub, url)
    page, expected = await reference(hub, "t", 1)
    assert page.closed and body == expected
    assert "immutable" in headers["Cache-Control"]
    assert builds.events_read == PAGE
    # and equals the page built from nothing
    await forget(hub)
    rebuilt, rebuilt_zipped = (await get(hub, url))[0], (await get(hub, url, gz=True))[0]
    assert rebuilt == rebuilt_zipped == expected
    assert builds.events_read == 2 * PAGE


async def test_a_newer_reader_follows_the_build_from_nothing_under_way(hub: Hub) -> None:
    """While an open page is built from nothing, a reader of a newer version gets the
    version under way (its validators say which) rather than start a second build."""
    reading = hub.app[READING]
    await publish(hub, "t", 100)
    _, older = await reading.pages.page("t", 1)
    await publish(hub, "t", 1, start=100)
    _, newer = await reading.pages.page("t", 1)
    assert older is not None and newer is not None and newer.count == older.count + 1
    head = b"<urlset>"
    key = "cl test t"
    under_way = await reading.page_builds.get(key, "t", older, head, "tag-older")
    followed = await reading.page_builds.get(key, "t", newer, head, "tag-newer")
    assert followed is under_way and followed.page == older
    assert reading.page_builds.started == 1
    pieces = [bytes(piece) async for piece in followed.pieces(gz=False)]
    assert b"".join(pieces).count(b"<url>") == older.count
    # once built, the newer version goes on from it: one more event read
    read = reading.page_builds.events_read
    later = await reading.page_builds.get(key, "t", newer, head, "tag-newer")
    assert later is not under_way and later.page == newer
    text = b"".join([bytes(piece) async for piece in later.pieces(gz=True)])
    assert gzip.decompress(text).count(b"<url>") == newer.count
    assert reading.page_builds.events_read == read + 1


@pytest.mark.parametrize(
    "hub_settings",
    [{"changelist_page_entries": PAGE, "built_document_cache_bytes": 1_000_000}],
)
async def test_open_pages_kept_stay_within_their_bound(hub: Hub) -> None:
    builds = hub.app[READING].page_builds
    for k in range(6):
        await publish(hub, f"t{k}", 500)
        body, _ = await get(hub, f"{hub.url}/topics/t{k}/changelist/1.xml")
        _, expected = await reference(hub, f"t{k}", 1)
        assert body == expected
        assert 0 < builds.kept_bytes <= 1_000_000
    # the least recently read went first; it is built again, whole, when read
    started = builds.started
    body, _ = await get(hub, f"{hub.url}/topics/t0/changelist/1.xml")
    assert body == (await reference(hub, "t0", 1))[1] and builds.started == started + 1
    assert builds.kept_bytes <= 1_000_000


async def test_a_page_that_fails_after_its_first_bytes_is_cut_never_ended(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry no hub wrote, past the first batch: the reader has the first bytes when the
    build meets it, so its connection is cut (a chunked body without its end), said in one
    warning line without a traceback; never a page that ends as if whole. One in the first
    batch is answered 500 as before, naming it."""
    await publish(hub, "t", 1000)
    await hub.redis.xadd(keys.events("t"), {"x": "1"})
    await publish(hub, "t", 10, start=1000)
    url = f"{hub.url}/topics/t/changelist/1.xml"
    for gz in (False, True):
        await forget(hub)
        headers = {"Accept-Encoding": "gzip" if gz else "identity"}
        async with Watchdog():
            async with hub.session.get(url, headers=headers) as resp:
                assert resp.status == 200
                with pytest.raises(aiohttp.ClientPayloadError):
                    await resp.read()
    said = [r for r in caplog.records if "cut after its first bytes" in r.getMessage()]
    assert len(said) == 2 and all(r.levelname == "WARNING" for r in said)
    assert "holds no change" in said[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]
    # the hub answers on, and a damaged entry in the first batch is a 500 before any byte
    await hub.redis.delete(keys.events("u"))
    await hub.redis.xadd(keys.events("u"), {"x": "1"})
    await publish(hub, "u", 3)
    async with hub.session.get(f"{hub.url}/topics/u/changelist/1.xml") as resp:
        assert resp.status == 500 and "holds no change" in await resp.text()


async def test_a_closed_page_built_once_is_served_by_every_process_from_redis(
    hub: Hub, redis_url: str
) -> None:
    await publish(hub, "t", PAGE + 1)
    _, expected = await reference(hub, "t", 1)
    url = "/topics/t/changelist/1.xml"
    key = keys.rendered_page("t", 1)
    body, headers = await get(hub, hub.url + url)
    assert body == expected
    tag = headers["ETag"].removeprefix('W/"').removesuffix('"').encode()

    async def stored() -> bool:  # the build keeps it in Redis right after its readers' end
        value = await hub.redis.get(key)
        return value is not None and value.startswith(tag + b"\n")

    await wait_for(stored)
    assert 0 < await hub.redis.ttl(key) <= KEPT_SECONDS
    # another process of the same hub: the same public base URL, its own port
    port = free_port()
    settings = Settings(host="127.0.0.1", port=port, changelist_page_entries=PAGE, base_url=hub.url)
    runner, app = await start_hub(settings, redis_url)
    try:
        other = Hub(f"http://127.0.0.1:{port}", app, settings, hub.session)
        for gz in (False, True):
            body, headers = await get(other, other.url + url, gz=gz)
            assert body == expected and headers["Content-Length"]
        assert app[READING].page_builds.started == 0
        assert app[READING].page_builds.events_read == 0
        # what Redis holds for that key but is not that page's (another version, damaged
        # bytes) is not sent: the page is built again, and stored again
        for value in (
            b"another-version\n" + gzip.compress(b"<urlset/>"),
            b"no newline",
            tag + b"\nnot gzip",
        ):
            app[READING].doc_cache.clear()
            await hub.redis.set(key, value)
            assert (await get(other, other.url + url))[0] == expected
            await wait_for(stored)
        assert app[READING].page_builds.started == 3
    finally:
        await runner.cleanup()


async def test_a_closed_page_never_waits_for_its_open_version_built_from_nothing(
    hub: Hub,
) -> None:
    """The page closed while its open version is built from nothing (a fresh process): a
    reader of the closed page gets a build of its own at once, the page rendered whole."""
    reading = hub.app[READING]
    await publish(hub, "t", 100)
    _, opened = await reading.pages.page("t", 1)
    await publish(hub, "t", PAGE - 100 + 1, start=100)
    closed, expected = await reference(hub, "t", 1)
    assert opened is not None and not opened.closed and closed.closed
    key = "cl test t"
    open_build = await reading.page_builds.get(key, "t", opened, b"<urlset>", "tag-open")
    head = expected.partition(b"<url>")[0]
    closed_build = await reading.page_builds.get(key, "t", closed, head, "tag-closed")
    assert closed_build is not open_build and closed_build.page == closed
    assert not open_build.done  # it did not wait for it
    body = b"".join([bytes(piece) async for piece in closed_build.pieces(gz=False)])
    assert body == expected
    assert reading.page_builds.started == 2

"""No Resource List (or ``changes.xml``) reader waits for a build: the last snapshot is
served while the next is taken, and a topic with none yet answers 503 with ``Retry-After``
instead of hanging.

The topics are big enough (20,000 URIs in pages of 100) that a snapshot takes far longer
than a plain request; every time is compared with a request measured beside it (the
Capability List: no build), never with a fixed bound.
"""

from __future__ import annotations

import io
import time
from datetime import datetime
from typing import Any

import aiohttp
import orjson
import pytest

from hub.core.settings import Settings
from resourcesync import ResourceList, ResourceListIndex, parse
from tests.conftest import Hub, start_hub
from tests.hub.documents_support import get_doc
from tests.support import changes, free_port, notification, wait_for

URIS = 20_000
PAGE = 100
BATCH = 10_000
#: What a request may take beyond the request measured beside it: far less than a build.
SLACK = 1.0


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"resourcelist_page_entries": PAGE, "resourcelist_snapshot_seconds": 0}


async def fill(hub: Hub, topic: str, n: int = URIS) -> None:
    for start in range(0, n, BATCH):
        body = io.BytesIO(notification(changes(min(BATCH, n - start), start=start)))
        async with hub.session.post(
            f"{hub.url}/topics/{topic}", data=body, headers={"Content-Type": "application/xml"}
        ) as resp:
            assert resp.status == 202, await resp.text()


async def timed_get(session: aiohttp.ClientSession, url: str) -> tuple[float, int, bytes, Any]:
    t0 = time.perf_counter()
    async with session.get(url) as resp:
        body = await resp.read()
        return time.perf_counter() - t0, resp.status, body, resp.headers


async def baseline(hub: Hub, topic: str) -> float:
    took, status, _, _ = await timed_get(
        hub.session, f"{hub.url}/topics/{topic}/capabilitylist.xml"
    )
    assert status == 200
    return took


async def built_index(hub: Hub, topic: str, newer_than: datetime | None = None) -> Any:
    """The index, once a snapshot (newer than ``newer_than``) is served (bounded wait)."""
    url = f"{hub.url}/topics/{topic}/resourcelist.xml"
    found: list[ResourceListIndex] = []

    async def served() -> bool:
        async with hub.session.get(url) as resp:
            if resp.status == 503:
                return False
            body = await resp.read()
            assert resp.status == 200, body[:300]
        doc = parse(body, validate=True)
        assert isinstance(doc, ResourceListIndex)
        assert doc.md.at is not None
        if newer_than is not None and doc.md.at <= newer_than:
            return False
        found.append(doc)
        return True

    await wait_for(served, timeout=60, interval=0.05)
    return found[-1]


async def listed(hub: Hub, topic: str, index: ResourceListIndex) -> set[str]:
    locs: set[str] = set()
    for entry in index.entries:
        _, page, _ = await get_doc(hub.session, entry.loc, hub.url, topic)
        assert isinstance(page, ResourceList) and page.md.at == index.md.at
        locs.update(e.loc for e in page.entries)
    return locs


async def test_a_reader_during_a_rebuild_gets_the_last_snapshot_at_once(hub: Hub) -> None:
    await fill(hub, "big")
    first = await built_index(hub, "big")
    assert len(first.entries) == URIS // PAGE
    new = "http://example.org/new"
    resp = await hub.publish("big", notification([{"loc": new, "change": "created"}]))
    assert resp.status == 202
    # The topic changed and its snapshot is no longer current: the reader gets the last
    # one, with its `at`, while the next is taken in the background.
    base = await baseline(hub, "big")
    took, status, body, _ = await timed_get(hub.session, f"{hub.url}/topics/big/resourcelist.xml")
    assert status == 200, body[:300]
    during = parse(body, validate=True)
    assert isinstance(during, ResourceListIndex)
    assert during.md.at == first.md.at and during.md.completed == first.md.completed
    assert took < base + SLACK, (took, base)
    # ... and once it is taken, the new snapshot, holding the change, is served.
    after = await built_index(hub, "big", newer_than=first.md.at)
    assert after.md.at is not None and first.md.at is not None and after.md.at > first.md.at
    assert new in await listed(hub, "big", after)


@pytest.mark.parametrize(
    "hub_settings",
    [{"resourcelist_page_entries": PAGE, "document_wait_seconds": 0.0}],
)
async def test_the_first_request_on_an_unbuilt_big_topic_gets_503_not_a_hang(hub: Hub) -> None:
    await fill(hub, "unbuilt")
    base = await baseline(hub, "unbuilt")
    took, status, body, headers = await timed_get(
        hub.session, f"{hub.url}/topics/unbuilt/resourcelist.xml"
    )
    assert status == 503, body[:300]
    assert int(headers["Retry-After"]) >= 1
    assert "being built" in orjson.loads(body)["error"]
    assert took < base + SLACK, (took, base)
    # the build went on without the reader: its snapshot is served once taken, whole
    index = await built_index(hub, "unbuilt")
    assert await listed(hub, "unbuilt", index) == {c["loc"] for c in changes(URIS)}


@pytest.mark.parametrize("hub_settings", [{"document_wait_seconds": 0.0}])
@pytest.mark.parametrize("document", ["resourcelist.xml", "changes.xml"])
async def test_a_whole_document_reader_gets_the_earlier_version_past_the_wait(
    hub: Hub, document: str
) -> None:
    """Below ``resourcelist_page_entries`` the Resource List is one document, built per
    version, as ``changes.xml`` is; a reader waits for the build at most
    ``document_wait_seconds`` (here 0), then gets the version built before (and 503 when
    there is none)."""
    url = f"{hub.url}/topics/whole/{document}"
    await fill(hub, "whole", 2_000)
    _, status, body, headers = await timed_get(hub.session, url)
    assert status == 503 and int(headers["Retry-After"]) >= 1, body[:300]
    etags: list[str] = []

    async def served(other_than: str | None = None) -> bool:
        async with hub.session.get(url) as resp:
            if resp.status != 200 or resp.headers["ETag"] == other_than:
                return False
            etags.append(resp.headers["ETag"])
            return True

    await wait_for(served, timeout=60, interval=0.05)
    first = etags[-1]
    resp = await hub.publish("whole", notification([{"loc": "http://example.org/x"}]))
    assert resp.status == 202
    _, status, body, headers = await timed_get(hub.session, url)
    assert status == 200 and headers["ETag"] == first, body[:300]
    assert b"http://example.org/x" not in body
    # the new version is served once built
    await wait_for(lambda: served(other_than=first), timeout=60, interval=0.05)
    _, status, body, _ = await timed_get(hub.session, url)
    assert status == 200 and b"http://example.org/x" in body


async def test_two_processes_serve_the_last_snapshot_and_take_the_next_once(
    hub: Hub, redis_url: str
) -> None:
    """Two hubs on one Redis: both serve the last snapshot at once while the next is taken,
    and the next is taken by one of them (the other waits for its record)."""
    settings = Settings(
        host="127.0.0.1",
        port=free_port(),
        **hub.settings.model_dump(
            include={"resourcelist_page_entries", "resourcelist_snapshot_seconds"}
        ),
    )
    runner, _app = await start_hub(settings, redis_url)
    try:
        other = settings.public_url
        await fill(hub, "shared")
        first = await built_index(hub, "shared")
        resp = await hub.publish("shared", notification([{"loc": "http://example.org/n"}]))
        assert resp.status == 202
        for base in (hub.url, other, hub.url):  # each starts (or finds) the next snapshot
            _, status, body, _ = await timed_get(
                hub.session, f"{base}/topics/shared/resourcelist.xml"
            )
            doc = parse(body, validate=True)
            assert status == 200 and doc.md.at == first.md.at, body[:300]
        after = await built_index(hub, "shared", newer_than=first.md.at)
        async with hub.session.get(f"{other}/topics/shared/resourcelist.xml") as resp:
            again = parse(await resp.read(), validate=True)
        assert again.md.at == after.md.at  # the other serves the same one
        taken = [k async for k in hub.redis.scan_iter(match="rshub:{shared}:rl:*:0")]
        assert len(taken) == 2, taken  # the first and the next: not one per process
    finally:
        await runner.cleanup()

"""The Resource List: folded latest state, exact snapshot times, paging into an index."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from hub.core import resource_states
from hub.store import keys
from resourcesync import ResourceList, ResourceListIndex, parse
from tests.conftest import Hub
from tests.hub.documents_support import get_doc, links
from tests.support import changes, notification

LIMIT = 4


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"resourcelist_page_entries": LIMIT, "resourcelist_snapshot_seconds": 3600}


async def publish(hub: Hub, topic: str, items: list[dict[str, Any]]) -> list[str]:
    resp = await hub.publish(topic, notification(items))
    assert resp.status == 202
    return list((await resp.json())["ids"])


async def test_latest_state_of_each_uri(hub: Hub) -> None:
    r = "http://example.org/"
    sha = "md5:" + "a" * 32
    await publish(
        hub,
        "f",
        [
            {"loc": r + "a", "lastmod": "2026-01-01T00:00:00Z", "change": "created"},
            {"loc": r + "b", "lastmod": "2026-01-01T00:00:01Z", "change": "created"},
            {"loc": r + "c", "lastmod": "2026-01-01T00:00:02Z", "change": "created"},
        ],
    )
    ids = await publish(
        hub,
        "f",
        [
            {
                "loc": r + "a",
                "lastmod": "2026-01-02T00:00:00Z",
                "change": "updated",
                "hash": sha,
                "length": 12,
                "type": "text/plain",
            },
            {"loc": r + "b", "lastmod": "2026-01-02T00:00:01Z", "change": "deleted"},
        ],
    )
    resp, doc, _ = await get_doc(hub.session, f"{hub.url}/topics/f/resourcelist.xml", hub.url, "f")
    assert isinstance(doc, ResourceList)
    by_loc = {e.loc: e for e in doc.entries}
    assert sorted(by_loc) == [r + "a", r + "c"]
    a = by_loc[r + "a"]
    # lastmod: when the hub received the change (its clock, as in the Change Lists); the
    # publisher's own value is rshub:lastmod
    assert a.lastmod == datetime.fromtimestamp(int(ids[0].split("-")[0]) / 1000, UTC)
    assert a.md is not None
    assert a.md.extra["{urn:rshub:1}lastmod"] == "2026-01-02T00:00:00Z"
    assert (a.md.hash, a.md.length, a.md.type) == (sha, 12, "text/plain")
    # `at` is the snapshot's Redis time: never before the last change it contains.
    last_ms = int(ids[-1].split("-")[0])
    assert doc.md.at is not None and doc.md.at.timestamp() * 1000 >= last_ms
    assert doc.md.completed == doc.md.at
    etag = resp.headers["ETag"]
    async with hub.session.get(
        f"{hub.url}/topics/f/resourcelist.xml", headers={"If-None-Match": etag}
    ) as again:
        assert again.status == 304
    await publish(hub, "f", [{"loc": r + "d", "change": "created"}])
    async with hub.session.get(
        f"{hub.url}/topics/f/resourcelist.xml", headers={"If-None-Match": etag}
    ) as again:
        assert again.status == 200


async def test_index_and_pages_beyond_the_limit(hub: Hub) -> None:
    await publish(hub, "big", changes(10))
    await publish(hub, "big", [{"loc": "http://example.org/r3", "change": "deleted"}])
    url = f"{hub.url}/topics/big/resourcelist.xml"
    resp, index, _ = await get_doc(hub.session, url, hub.url, "big")
    assert isinstance(index, ResourceListIndex)
    assert index.md.completed is not None and index.md.completed >= index.md.at
    assert len(index.entries) == 3
    seen: list[str] = []
    for entry in index.entries:
        assert entry.md.at == index.md.at
        page_resp, page, _ = await get_doc(hub.session, entry.loc, hub.url, "big")
        assert isinstance(page, ResourceList)
        assert links(page)["index"] == url
        assert page.md.at == index.md.at and len(page.entries) <= LIMIT
        assert "immutable" in page_resp.headers["Cache-Control"]
        seen += [e.loc for e in page.entries]
    assert sorted(seen) == sorted(f"http://example.org/r{i}" for i in range(10) if i != 3)
    # the snapshot is reused within resourcelist_snapshot_seconds
    again, same, _ = await get_doc(hub.session, url, hub.url, "big")
    assert [e.loc for e in same.entries] == [e.loc for e in index.entries]
    assert again.headers["ETag"] == resp.headers["ETag"]


async def test_unknown_topic_and_page(hub: Hub) -> None:
    async with hub.session.get(f"{hub.url}/topics/none/resourcelist.xml") as resp:
        assert resp.status == 404
        assert "unknown topic" in (await resp.json())["error"]
    await publish(hub, "t", changes(1))
    async with hub.session.get(f"{hub.url}/topics/t/resourcelist/123-00000.xml") as resp:
        assert resp.status == 404
        assert "snapshots expire" in (await resp.json())["error"]


async def test_served_from_the_fold_only(hub: Hub) -> None:
    """A topic whose every resource was deleted has an empty, valid Resource List."""
    await publish(hub, "gone", [{"loc": "http://example.org/x", "change": "created"}])
    await publish(hub, "gone", [{"loc": "http://example.org/x", "change": "deleted"}])
    _, doc, body = await get_doc(
        hub.session, f"{hub.url}/topics/gone/resourcelist.xml", hub.url, "gone"
    )
    assert isinstance(doc, ResourceList) and doc.entries == ()
    assert parse(body, validate=True) == doc


def _earlier_state(event_id: str, loc: str, n: int) -> bytes:
    """A fold value as an earlier hub wrote it: ``"<event-id> <event-json>"``."""
    event = {
        "loc": loc,
        "lastmod": f"2025-11-24T00:00:0{n}Z",
        "change": "created",
        "hash": f"md5:{n:032x}",
        "length": n,
        "type": "text/plain",
    }
    return event_id.encode() + b" " + orjson.dumps(event)


@pytest.mark.parametrize("earlier", [2, 4], ids=["exact", "paged"])
async def test_an_earlier_hubs_fold_is_still_served(hub: Hub, earlier: int) -> None:
    """States an earlier hub wrote (event JSON, not packed) are read beside packed ones,
    exact and paged; each moves to the packed form when its URI next changes."""
    r = "http://example.org/"
    await publish(hub, "old", [{"loc": r + "new", "change": "created"}])
    ids = [f"17639{n}0000000-{n}" for n in range(earlier)]
    for n, event_id in enumerate(ids):
        await hub.redis.hset(
            keys.resources("old"), r + f"e{n}", _earlier_state(event_id, r + f"e{n}", n)
        )
    await publish(hub, "old", [{"loc": r + "e0", "change": "updated", "length": 7}])
    url = f"{hub.url}/topics/old/resourcelist.xml"
    _, doc, _ = await get_doc(hub.session, url, hub.url, "old")
    pages = [doc]
    if isinstance(doc, ResourceListIndex):
        pages = [(await get_doc(hub.session, e.loc, hub.url, "old"))[1] for e in doc.entries]
    assert earlier + 1 > LIMIT or isinstance(doc, ResourceList)
    by_loc = {e.loc: e for page in pages for e in page.entries}
    assert sorted(by_loc) == sorted([r + "new"] + [r + f"e{n}" for n in range(earlier)])
    assert by_loc[r + "e0"].md is not None and by_loc[r + "e0"].md.length == 7
    for n in range(1, earlier):
        entry = by_loc[r + f"e{n}"]
        assert entry.lastmod == datetime.fromtimestamp(int(ids[n].split("-")[0]) / 1000, UTC)
        assert entry.md is not None
        assert entry.md.extra["{urn:rshub:1}lastmod"] == f"2025-11-24T00:00:0{n}Z"
        assert (entry.md.hash, entry.md.length, entry.md.type) == (
            f"md5:{n:032x}",
            n,
            "text/plain",
        )
    stored = await hub.redis.hgetall(keys.resources("old"))
    assert stored[(r + "e0").encode()][0] == resource_states.FORMAT  # rewritten, packed
    assert stored[(r + "e1").encode()] == _earlier_state(ids[1], r + "e1", 1)  # as it was


@pytest.mark.parametrize(
    "state",
    [b"\x01\x00\x00\x01", b"\x01" + bytes(7) + b"\x07", b"garbage", b"1-0 {not json"],
    ids=["packed, cut short", "packed, no such change", "neither form", "earlier, not JSON"],
)
async def test_a_damaged_state_is_a_500_naming_it(hub: Hub, state: bytes) -> None:
    """A fold value the hub did not write: the Resource List answers 500 naming it (never
    a traceback or a 503), and the next publish of its URI repairs it."""
    loc = "http://example.org/x"
    await publish(hub, "bad", [{"loc": loc, "change": "created"}])
    await hub.redis.hset(keys.resources("bad"), loc, state)
    url = f"{hub.url}/topics/bad/resourcelist.xml"
    async with hub.session.get(url) as resp:
        assert resp.status == 500
        error = (await resp.json())["error"]
    assert "stored data is damaged" in error and "Resource List state" in error
    await publish(hub, "bad", [{"loc": loc, "change": "updated"}])
    _, doc, _ = await get_doc(hub.session, url, hub.url, "bad")
    assert [e.loc for e in doc.entries] == [loc]

"""``changes.xml`` (the latest change of every URI) and ``changes-lost`` on a real hub.

What it lists and in what order, the hub's clock in ``lastmod`` and ``datetime`` with the
publisher's in ``rshub:lastmod``, caching (ETag, 304, gzip, HEAD), access (a private
topic's read token), the marker once retention trimmed changes and the 410 its URL answers,
the 50,000-entry limit, and a 50,000-change topic read by ten clients at once without
stalling the loop, each version built once and only new events read.
"""

from __future__ import annotations

import gzip
import io
from datetime import UTC, datetime
from typing import Any

import pytest
from multidict import CIMultiDict

from hub.core.latest_changes import MAX_ENTRIES
from hub.core.rendering import w3c_ms
from hub.store import keys
from hub.web.cache import IMMUTABLE
from hub.web.documents import READING
from hub.web.latest_changes import LATEST
from resourcesync import ChangeList, parse
from tests.conftest import Hub
from tests.hub.test_reader_load import one_body, ten_readers
from tests.support import changes, notification

NS = "{urn:rshub:1}"
R = "http://example.org/"


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "retention_max_events": 0,
        "topic_retention_max_events": {"short": 3},
        "topic_read_tokens": {"secret": ["r1"]},
    }


def received(event_id: str) -> datetime:
    return datetime.fromtimestamp(int(event_id.split("-")[0]) / 1000, UTC)


async def publish(hub: Hub, topic: str, items: list[dict[str, Any]]) -> list[str]:
    resp = await hub.publish(topic, notification(items))
    assert resp.status == 202, await resp.text()
    return list((await resp.json())["ids"])


async def changes_xml(hub: Hub, topic: str, **headers: str) -> tuple[ChangeList, CIMultiDict[str]]:
    async with hub.session.get(f"{hub.url}/topics/{topic}/changes.xml", headers=headers) as resp:
        body = await resp.read()
        assert resp.status == 200, body[:300]
        doc = parse(body, validate=True)
        assert isinstance(doc, ChangeList)
        return doc, resp.headers.copy()


async def test_the_latest_change_of_each_uri_in_receipt_order(hub: Hub) -> None:
    ids = []
    for item in (  # publishers' clocks disagree: the hub lists by receipt
        {"loc": R + "a", "change": "created", "lastmod": "2030-01-01T00:00:00Z"},
        {"loc": R + "b", "change": "created", "lastmod": "2020-01-01T00:00:00Z"},
        {"loc": R + "a", "change": "updated", "lastmod": "2030-01-01T00:00:01Z"},
        {"loc": R + "c", "change": "created", "lastmod": "2026-01-01T00:00:00Z"},
        {"loc": R + "c", "change": "deleted", "lastmod": "2026-01-01T00:00:00Z"},
    ):
        ids += await publish(hub, "t", [item])
    doc, headers = await changes_xml(hub, "t")
    assert [(e.loc, str(e.md.change)) for e in doc.entries if e.md] == [
        (R + "b", "created"),
        (R + "a", "updated"),
        (R + "c", "deleted"),
    ]
    b, a, c = doc.entries
    for entry, event_id in ((b, ids[1]), (a, ids[2]), (c, ids[4])):
        assert entry.md is not None
        assert entry.lastmod == entry.md.datetime == received(event_id)  # the hub's clock
        assert entry.md.extra[f"{NS}id"] == event_id
    assert a.md is not None and a.md.extra[f"{NS}lastmod"] == "2030-01-01T00:00:01Z"
    assert doc.md.from_ == received(ids[1]) and doc.md.until is None
    assert {ln.rel: ln.href for ln in doc.links} == {"up": f"{hub.url}/topics/t/capabilitylist.xml"}
    # caching: the same version is a 304; gzip on request; HEAD has the headers only
    assert headers["Cache-Control"] != IMMUTABLE
    async with hub.session.get(
        f"{hub.url}/topics/t/changes.xml", headers={"If-None-Match": headers["ETag"]}
    ) as resp:
        assert resp.status == 304
    async with hub.session.get(
        f"{hub.url}/topics/t/changes.xml",
        headers={"Accept-Encoding": "gzip"},
        auto_decompress=False,
    ) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert parse(gzip.decompress(await resp.read())).entries == doc.entries
    async with hub.session.head(f"{hub.url}/topics/t/changes.xml") as resp:
        assert resp.status == 200 and resp.headers["ETag"] == headers["ETag"]
        assert await resp.read() == b""
    # a new change makes a new version, listing the URI once, at the end
    [later] = await publish(hub, "t", [{"loc": R + "b", "change": "updated"}])
    doc, newer = await changes_xml(hub, "t", **{"If-None-Match": headers["ETag"]})
    assert newer["ETag"] != headers["ETag"]
    assert [e.loc for e in doc.entries] == [R + "a", R + "c", R + "b"]
    assert doc.entries[-1].md is not None and doc.entries[-1].md.extra[f"{NS}id"] == later


async def test_unknown_topics_bad_names_and_private_topics(hub: Hub) -> None:
    for path in ("changes.xml", "changes-lost"):
        async with hub.session.get(f"{hub.url}/topics/nothing/{path}") as resp:
            assert resp.status == 404 and "nothing was ever published" in await resp.text()
        async with hub.session.get(f"{hub.url}/topics/bad%20name/{path}") as resp:
            assert resp.status == 400
    await publish(hub, "secret", [{"loc": R + "s", "change": "created"}])
    url = f"{hub.url}/topics/secret/changes.xml"
    async with hub.session.get(url) as resp:
        assert resp.status == 401
    async with hub.session.get(url, headers={"Authorization": "Bearer nope"}) as resp:
        assert resp.status == 403
    async with hub.session.get(f"{hub.url}/topics/secret/changes-lost") as resp:
        assert resp.status == 401
    doc, headers = await changes_xml(hub, "secret", Authorization="Bearer r1")
    assert [e.loc for e in doc.entries] == [R + "s"]
    assert "private" in headers["Cache-Control"]


async def test_a_trim_puts_the_marker_first_and_its_url_answers_410(hub: Hub) -> None:
    async with hub.session.get(f"{hub.url}/topics/t/changes-lost") as resp:
        assert resp.status == 404  # no topic yet
    await publish(hub, "t", [{"loc": R + "a", "change": "created"}])
    async with hub.session.get(f"{hub.url}/topics/t/changes-lost") as resp:
        assert resp.status == 410
        body = await resp.json()
    assert "lost_through" not in body and "from" not in body and "lists every" in body["error"]
    doc, _ = await changes_xml(hub, "t")
    assert [e.loc for e in doc.entries] == [R + "a"]  # nothing lost: no marker

    ids = []
    for n in range(5):  # retention keeps 3 events of "short"
        ids += await publish(hub, "short", [{"loc": f"{R}{n}", "change": "created"}])
    trimmed = await hub.redis.hget(keys.topic_meta("short"), keys.TRIMMED_THROUGH)
    assert keys.text(trimmed) == ids[1]
    doc, _ = await changes_xml(hub, "short")
    marker, *listed = doc.entries
    lost_url = f"{hub.url}/topics/short/changes-lost"
    assert marker.loc == lost_url and marker.md is not None
    assert str(marker.md.change) == "updated"
    assert marker.md.extra[f"{NS}lost-through"] == ids[1]
    one_ms_before = datetime.fromtimestamp((int(ids[1].split("-")[0]) - 1) / 1000, UTC)
    assert marker.md.datetime == marker.lastmod == one_ms_before
    assert doc.md.from_ == one_ms_before
    assert [e.loc for e in listed] == [f"{R}{n}" for n in (2, 3, 4)]

    async with hub.session.get(lost_url) as resp:
        assert resp.status == 410
        body = await resp.json()
    assert body["lost_through"] == ids[1]
    assert body["from"] == w3c_ms(int(ids[1].split("-")[0]))  # --from after a baseline
    assert "new baseline" in body["error"] and body["resourcelist"].endswith("resourcelist.xml")
    async with hub.session.head(lost_url) as resp:
        assert resp.status == 410


# The ten readers share the one build of a version nobody built yet: a hub that lets them
# wait for it (by default a reader waits 1 s, then is told to come back: 503).
@pytest.mark.parametrize("hub_settings", [{"retention_max_events": 0, "document_wait_seconds": 30}])
async def test_at_most_50000_entries_the_newest_and_the_marker(hub: Hub) -> None:
    """More URIs changed than one document lists: the newest 49,999 and the marker naming
    the newest change left out; ten readers at once never stall the loop (Watchdog, 100 ms)
    nor /healthz, the document is built once and only new events are read afterwards."""
    total = MAX_ENTRIES + 10
    ids: list[str] = []
    for start in range(0, total, 10_000):
        body = io.BytesIO(notification(changes(min(10_000, total - start), start=start)))
        async with hub.session.post(
            f"{hub.url}/topics/big", data=body, headers={"Content-Type": "application/xml"}
        ) as resp:
            assert resp.status == 202, await resp.text()
            ids += (await resp.json())["ids"]
    builds = hub.app[READING].builds.built
    url = f"{hub.url}/topics/big/changes.xml"
    results = await ten_readers(hub, url, "a 50,000-entry changes.xml")
    doc = parse(one_body(results))
    assert isinstance(doc, ChangeList) and len(doc.entries) == MAX_ENTRIES
    marker = doc.entries[0]
    assert marker.md is not None and marker.md.extra[f"{NS}lost-through"] == ids[10]
    listed = [e.md.extra[f"{NS}id"] for e in doc.entries[1:] if e.md]
    assert listed == ids[11:]
    assert hub.app[READING].builds.built == builds + 1  # one build for ten readers
    views = hub.app[LATEST]
    read = views.events_read
    assert read == total
    await publish(hub, "big", [{"loc": f"{R}new", "change": "created"}])
    doc2, _ = await changes_xml(hub, "big")
    assert views.events_read == read + 1  # only what is new
    assert doc2.entries[-1].loc == f"{R}new"
    assert doc2.entries[0].md is not None
    assert doc2.entries[0].md.extra[f"{NS}lost-through"] == ids[11]

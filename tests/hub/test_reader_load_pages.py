"""Readers can't stall the hub: ten concurrent GETs of a ~4 MB Resource List page.

A topic larger than ``resourcelist_page_entries`` is served as an index and pages, kept in
Redis per snapshot. Ten readers (half gzipped) fetch one ~4 MB page at once while a thread
times ``/healthz`` over its own connection (:func:`tests.hub.test_reader_load.ten_readers`:
the Watchdog on the loop's own CPU time, the probe's p90 in wall time); every reader gets
the same page, byte for byte.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from resourcesync import ResourceList, parse
from tests.conftest import Hub
from tests.hub.test_reader_load import one_body, ten_readers
from tests.support import changes, notification

PAGE = 30_000
BATCH = 10_000
#: Long enough locs that a page of PAGE entries is ~4 MB.
PREFIX = "http://example.org/collections/2026/a-rather-long-path/to/each/resource/item-"


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # the first index read waits for the first snapshot (by default, 1 s, then 503)
    return {"resourcelist_page_entries": PAGE, "document_wait_seconds": 30}


async def test_ten_gets_of_a_4_mb_resource_list_page_keep_healthz_fast(hub: Hub) -> None:
    for start in range(0, 2 * PAGE, BATCH):
        body = io.BytesIO(notification(changes(BATCH, start=start, prefix=PREFIX)))
        async with hub.session.post(
            f"{hub.url}/topics/paged", data=body, headers={"Content-Type": "application/xml"}
        ) as resp:
            assert resp.status == 202, await resp.text()
    async with hub.session.get(f"{hub.url}/topics/paged/resourcelist.xml") as resp:
        index = await resp.read()
        assert resp.status == 200, index[:300]
    pages = [p.decode() for p in index.split(b"<loc>")[1:]]
    pages = [p[: p.index("</loc>")] for p in pages]
    assert len(pages) == 2, index[:500]
    results = await ten_readers(hub, pages[0], "a ~4 MB Resource List page")
    body = one_body(results)
    assert len(body) > 4_000_000, len(body)
    doc = parse(body)
    assert isinstance(doc, ResourceList) and len(doc.entries) == PAGE

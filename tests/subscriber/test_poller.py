"""The poller against a standard ResourceSync Source (1.0 and 1.1, index or single list)."""

from __future__ import annotations

from datetime import timedelta

import aiohttp
import pytest

from subscriber.exceptions import DiscoveryError
from subscriber.poller import Poller
from subscriber.position import EventCursor

from .source import TestSource


@pytest.mark.parametrize(("spec", "index"), [("1.0", True), ("1.1", True), ("1.1", False)])
async def test_poller_follows_source_description_to_pages(
    session: aiohttp.ClientSession, spec: str, index: bool
) -> None:
    src = TestSource(spec=spec, index=index, page_size=3)
    await src.start()
    try:
        for i in range(7):
            src.put(f"r{i}", b"x" * i)
        src.delete("r2")
        poller = Poller(
            session, f"{src.url}/.well-known/resourcesync", overlap=timedelta(seconds=0)
        )
        pos = EventCursor()
        first = [e for e in await poller.poll(pos.watermark) if pos.accept(e)]
        assert [(e.loc.rsplit("/", 1)[1], e.change) for e in first] == [
            *[(f"r{i}", "created") for i in range(7)],
            ("r2", "deleted"),
        ]
        assert first[3].length == 3 and first[3].hash is not None
        found = await poller.discover()
        assert found.resourcelist == f"{src.url}/resourcelist.xml"
        # Nothing new: every document answers 304 and nothing is returned.
        src.requests.clear()
        assert [e for e in await poller.poll(pos.watermark) if pos.accept(e)] == []
        assert all(status == 304 for _, status in src.requests)
        src.put("r3", b"new")
        again = [e for e in await poller.poll(pos.watermark) if pos.accept(e)]
        assert [(e.loc.rsplit("/", 1)[1], e.change) for e in again] == [("r3", "updated")]
        if index:  # closed pages are not downloaded again (skipped, or 304)
            assert ("/changelist/0.xml", 200) not in src.requests
        resources = [e.loc async for e, _ in poller.resources()]
        assert len(resources) == 6
    finally:
        await src.stop()


async def test_poller_starts_from_any_document(session: aiohttp.ClientSession) -> None:
    src = TestSource()
    await src.start()
    try:
        src.put("a", b"1")
        for start in ("/capabilitylist.xml", "/changelist.xml", "/changelist/0.xml"):
            poller = Poller(session, src.url + start)
            assert [e.loc for e in await poller.poll(None)] == [src.loc("a")]
            assert (await poller.discover()).resourcelist == f"{src.url}/resourcelist.xml"
        with pytest.raises(DiscoveryError):
            await Poller(session, src.url + "/resourcelist.xml").poll(None)
    finally:
        await src.stop()

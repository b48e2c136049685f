"""Helpers for the materialized-document tests: fetch, validate, crawl and follow Change Lists.

Every body fetched through :func:`get_doc` is parsed with ``resourcesync.parse(...,
validate=True)`` and then checked against the rules the parser leaves to the caller: root
links (``up``, ``index``), entry times inside ``[from, until]``, index contiguity.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime

import aiohttp

from resourcesync import (
    CapabilityList,
    ChangeList,
    ChangeListIndex,
    Document,
    ResourceList,
    ResourceListIndex,
    parse,
)

RSHUB_NS = "urn:rshub:1"


def links(doc: Document) -> dict[str, str]:
    return {ln.rel: ln.href for ln in doc.links}


def event_id(entry: object) -> str:
    md = entry.md  # type: ignore[attr-defined]
    return md.extra[f"{{{RSHUB_NS}}}id"]


def check_document(doc: Document, url: str, hub_url: str, topic: str) -> None:
    """Rules of Sections 9-12 that ``validate`` does not enforce itself."""
    caplist = f"{hub_url}/topics/{topic}/capabilitylist.xml"
    if isinstance(doc, CapabilityList):
        assert links(doc)["up"] == f"{hub_url}/.well-known/resourcesync"
        return
    if isinstance(doc, ChangeList | ChangeListIndex | ResourceList | ResourceListIndex):
        assert links(doc)["up"] == caplist, f"{url}: rs:ln up"
    if isinstance(doc, ChangeList):
        assert links(doc)["index"] == f"{hub_url}/topics/{topic}/changelist.xml"
        start, end = doc.md.from_, doc.md.until
        assert start is not None
        for entry in doc.entries:
            when = entry.change_time
            assert when is not None and when >= start, f"{url}: entry before from"
            if end is not None:
                assert when <= end, f"{url}: entry after until"
    if isinstance(doc, ChangeListIndex):
        check_index(doc, url)
    if isinstance(doc, ResourceList | ResourceListIndex):
        assert doc.md.at is not None
        if doc.md.completed is not None:
            assert doc.md.completed >= doc.md.at


def check_index(doc: ChangeListIndex, url: str) -> None:
    """Forward chronological, contiguous, only the last entry open (Section 12.2)."""
    entries = doc.entries
    assert entries, f"{url}: empty index"
    assert doc.md.from_ == entries[0].md.from_  # type: ignore[union-attr]
    for prev, nxt in itertools.pairwise(entries):
        assert prev.md.until is not None, f"{url}: an open page before the last"  # type: ignore[union-attr]
        assert nxt.md.from_ == prev.md.until, f"{url}: pages not contiguous"  # type: ignore[union-attr]
    assert entries[-1].md.until is None, f"{url}: last page is closed"  # type: ignore[union-attr]
    locs = [e.loc for e in entries]
    assert locs == sorted(locs), f"{url}: page URLs do not sort in page order"


async def get_doc(
    session: aiohttp.ClientSession, url: str, hub_url: str, topic: str, **headers: str
) -> tuple[aiohttp.ClientResponse, Document, bytes]:
    async with session.get(url, headers=headers) as resp:
        body = await resp.read()
        assert resp.status == 200, f"{url}: {resp.status} {body[:300]!r}"
        assert resp.content_type == "application/xml"
    doc = parse(body, validate=True)
    check_document(doc, url, hub_url, topic)
    return resp, doc, body


@dataclass
class Crawl:
    index: ChangeListIndex
    pages: dict[str, ChangeList]
    bodies: dict[str, bytes]

    @property
    def entries(self) -> list:
        out: list = []
        for entry in self.index.entries:
            out.extend(self.pages[entry.loc].entries)
        return out


async def crawl(session: aiohttp.ClientSession, hub_url: str, topic: str) -> Crawl:
    """Read the Change List Index and every page it lists; check them together."""
    index_url = f"{hub_url}/topics/{topic}/changelist.xml"
    _, index, _ = await get_doc(session, index_url, hub_url, topic)
    assert isinstance(index, ChangeListIndex)
    pages: dict[str, ChangeList] = {}
    bodies: dict[str, bytes] = {}
    for entry in index.entries:
        resp, page, body = await get_doc(session, entry.loc, hub_url, topic)
        assert isinstance(page, ChangeList)
        # A page may have closed between the index and the page read, never the reverse.
        assert page.md.from_ == entry.md.from_  # type: ignore[union-attr]
        if entry.md.until is not None:  # type: ignore[union-attr]
            assert page.md.until == entry.md.until  # type: ignore[union-attr]
            assert "immutable" in resp.headers["Cache-Control"]
        pages[entry.loc], bodies[entry.loc] = page, body
    ids = [event_id(e) for p in (pages[e.loc] for e in index.entries) for e in p.entries]
    assert ids == sorted(ids, key=id_key), "entries out of event-id order across pages"
    times: list[datetime] = [
        e.change_time for p in (pages[x.loc] for x in index.entries) for e in p.entries
    ]
    assert times == sorted(times), "entries not forward chronological across pages"
    return Crawl(index, pages, bodies)


def id_key(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq)


@dataclass
class Poller:
    """A Destination that remembers only (page URL, entries consumed) between polls."""

    session: aiohttp.ClientSession
    hub_url: str
    topic: str
    page_url: str | None = None
    consumed: int = 0
    seen: list[str] = field(default_factory=list)
    docs_checked: int = 0

    async def poll(self) -> None:
        """Consume every entry available now, moving to the next page past closed ones."""
        if self.page_url is None:
            _, index, _ = await get_doc(
                self.session,
                f"{self.hub_url}/topics/{self.topic}/changelist.xml",
                self.hub_url,
                self.topic,
            )
            self.page_url = index.entries[0].loc
            self.docs_checked += 1
        while True:
            _, page, _ = await get_doc(self.session, self.page_url, self.hub_url, self.topic)
            self.docs_checked += 1
            assert isinstance(page, ChangeList)
            assert len(page.entries) >= self.consumed, "a page lost entries"
            self.seen.extend(event_id(e) for e in page.entries[self.consumed :])
            self.consumed = len(page.entries)
            if page.md.until is None:
                return
            _, index, _ = await get_doc(
                self.session, links(page)["index"], self.hub_url, self.topic
            )
            self.docs_checked += 1
            locs = [e.loc for e in index.entries]
            assert self.page_url in locs, "the poller's page left the index"
            nxt = index.entries[locs.index(self.page_url) + 1]
            assert nxt.md.from_ == page.md.until  # type: ignore[union-attr]
            self.page_url, self.consumed = nxt.loc, 0

"""Polling ResourceSync Change Lists: the hub's, or any standard Source's (1.0 or 1.1).

Discovery (:meth:`Poller.discover`) starts from any of: a Source Description, a Capability
List, a Change List Index, a Change List, a Resource List (Index). It follows Source
Description → Capability List → Change List (Index) → pages, as Z39.99-2014 Sections 8,
9 and 12 lay out; a Source Description with several Capability Lists needs ``topic`` (the
one whose URL contains ``/topics/{topic}/`` wins) unless it lists only one.

Each :meth:`Poller.poll` returns the changes whose change time (``rs:md/@datetime`` if
present, else ``lastmod``) is at or after ``watermark - overlap``, in document order.
Pages entirely before that (``until`` earlier) are not fetched; unchanged pages (304) are
skipped, since their entries were returned before. The result is not de-duplicated: the
overlap deliberately re-reads the recent past, and :class:`~subscriber.position.Position`
drops what was already delivered. ``overlap`` is the clock skew tolerated between a
Source's change times and the watermark.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import aiohttp

from resourcesync import (
    Capability,
    CapabilityList,
    ChangeList,
    ChangeListIndex,
    Document,
    Entry,
    ResourceList,
    ResourceListIndex,
    SourceDescription,
)

from .documents import DocumentClient
from .events import ChangeEvent
from .exceptions import DiscoveryError, SourceError

__all__ = ["Discovery", "Poller"]

log = logging.getLogger(__name__)


class Discovery:
    """What discovery found: the Change List (Index), the Resource List, the push hub."""

    def __init__(self) -> None:
        self.capability_list: str | None = None
        self.changelist: str | None = None
        self.resourcelist: str | None = None
        #: ``changelist-notification`` entry: topic URI and its ``rs:ln rel="hub"``.
        self.topic_uri: str | None = None
        self.hub: str | None = None


class Poller:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        start: str,
        *,
        topic: str | None = None,
        overlap: timedelta = timedelta(seconds=30),
    ) -> None:
        self.start = start
        self.topic = topic
        self.overlap = overlap
        self.documents = DocumentClient(session)
        self._found: Discovery | None = None
        #: Change Lists whose current version was returned by a poll.
        self._consumed: set[str] = set()

    async def discover(self) -> Discovery:
        if self._found is None:
            found = Discovery()
            doc = await self.documents.fetch(self.start)
            await self._walk(self.start, doc, found, depth=0)
            self._found = found
        return self._found

    async def _walk(self, url: str, doc: Document, found: Discovery, depth: int) -> None:
        if depth > 3:
            raise DiscoveryError(f"{self.start}: discovery went too deep")
        if isinstance(doc, SourceDescription):
            caps = [e.loc for e in doc.entries]
            if self.topic is not None:
                mine = [c for c in caps if f"/topics/{self.topic}/" in c]
                caps = mine or caps
            if len(caps) != 1:
                raise DiscoveryError(
                    f"{url}: {len(caps)} Capability Lists; say which with --topic or "
                    "give the Capability List URL"
                )
            await self._walk(caps[0], await self.documents.fetch(caps[0]), found, depth + 1)
        elif isinstance(doc, CapabilityList):
            found.capability_list = url
            for entry in doc.entries:
                capability = entry.md.capability if entry.md else None
                if capability == Capability.CHANGELIST:
                    found.changelist = entry.loc
                elif capability == Capability.RESOURCELIST:
                    found.resourcelist = entry.loc
                elif capability == Capability.CHANGELIST_NOTIFICATION:
                    found.topic_uri = entry.loc
                    found.hub = next((ln.href for ln in entry.links if ln.rel == "hub"), None)
        elif isinstance(doc, ChangeList | ChangeListIndex):
            found.changelist = url
            await self._walk_up(doc, found, depth)
        elif isinstance(doc, ResourceList | ResourceListIndex):
            found.resourcelist = url
            await self._walk_up(doc, found, depth)
        else:
            raise DiscoveryError(f"{url}: a {doc.md.capability} document leads to no changes")

    async def _walk_up(self, doc: Document, found: Discovery, depth: int) -> None:
        up = doc.up
        if up is None or found.capability_list is not None:
            return
        try:
            capabilities = await self.documents.fetch(up)
        except SourceError as exc:
            log.info("cannot follow rel=up %s: %s", up, exc)
            return
        if isinstance(capabilities, CapabilityList):
            known = (found.changelist, found.resourcelist)
            await self._walk(up, capabilities, found, depth + 1)
            found.changelist = known[0] or found.changelist
            found.resourcelist = known[1] or found.resourcelist

    async def poll(self, watermark: datetime | None) -> list[ChangeEvent]:
        """Changes at or after ``watermark - overlap`` (all retained ones if ``None``)."""
        found = await self.discover()
        if found.changelist is None:
            raise DiscoveryError(f"{self.start}: no Change List found")
        threshold = None if watermark is None else watermark - self.overlap
        result = await self.documents.get(found.changelist, keep=True)
        doc = result.doc
        assert doc is not None
        if isinstance(doc, ChangeListIndex):
            out: list[ChangeEvent] = []
            for page in doc.entries:
                until = page.md.until if page.md else None
                if threshold is not None and until is not None and until < threshold:
                    continue
                fetched = await self.documents.get(page.loc)
                if fetched.changed and fetched.doc is not None:
                    out.extend(_changes(fetched.doc, threshold))
            return out
        if not result.changed and found.changelist in self._consumed:
            return []
        self._consumed.add(found.changelist)
        return _changes(doc, threshold)

    async def resources(self) -> AsyncIterator[tuple[Entry, datetime | None]]:
        """Every entry of the Resource List (all pages of an index), with its ``at``."""
        found = await self.discover()
        if found.resourcelist is None:
            raise DiscoveryError(f"{self.start}: no Resource List found")
        doc = await self.documents.fetch(found.resourcelist)
        self.documents.forget(found.resourcelist)
        if isinstance(doc, ResourceListIndex):
            at = doc.md.at
            for page in doc.entries:
                part = await self.documents.fetch(page.loc)
                self.documents.forget(page.loc)
                for entry in part.entries:
                    yield entry, part.md.at or at
        else:
            for entry in doc.entries:
                yield entry, doc.md.at


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _changes(doc: Document, threshold: datetime | None) -> list[ChangeEvent]:
    # An entry without any time breaks Z39.99 (lastmod is mandatory in 1.0 Change Lists),
    # yet resync-simulator writes such "deleted" entries. Forward chronological order puts
    # the change at or after the entry before it, so it takes that entry's time: stable
    # across polls, hence usable for (loc, lastmod) de-duplication.
    previous = doc.md.from_ or _EPOCH
    out = []
    for entry in doc.entries:
        when = entry.change_time or previous
        previous = when
        if threshold is not None and when < threshold:
            continue
        try:
            out.append(ChangeEvent.from_entry(entry, default_time=when))
        except ValueError as exc:
            log.warning("skipped a Change List entry: %s", exc)
    return out

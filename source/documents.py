"""The Source's ResourceSync documents, built from what it knows. No I/O.

Where each document is (under the Source's base URL) and what it holds:

- ``/.well-known/resourcesync``: the Source Description (Section 8), naming the one
  Capability List.
- ``/capabilitylist.xml``: the Capability List (Section 9): ``resourcelist``,
  ``changelist`` and, when the Source pushes, ``changelist-notification`` with the topic's
  URI and ``rs:ln rel="hub"`` (the Change Notification specification's advertisement).
- ``/resourcelist.xml``: the Resource List (Section 10.1), or, past ``resourcelist_entries``
  resources (50,000, the Sitemaps limit), a Resource List Index (10.2) of the pages
  ``/resourcelist/NNNNNNNN.xml``. Entries give ``lastmod`` (the file's modification time),
  ``hash`` (md5 and sha-256), ``length`` and ``type``.
- ``/changelist.xml``: a Change List Index (12.2) of the pages ``/changelist/NNNNNNNN.xml``,
  each ``changelist_entries`` changes. A full page is closed (``until``: its last change's
  time) and never changes again; the last page is open (no ``until``). A page's ``from`` is
  the ``until`` of the page before (the Source's first start, for the first page).

- ``/changes.xml``: one Change List of the latest change of each resource (at most 50,000,
  the newest; its ``from`` then moves up to the oldest change kept), for clients that read
  no Change List Index (``resync-sync --incremental --changelist-uri``).

Page numbers are zero-padded: the reference client reads an index's pages in the order of
their URIs, which must then be their chronological order.

A Resource List spans pages served one by one, each as the Source knows it when asked; a
Destination that reads them while files change applies the Change Lists from the index's
``at`` (Section 10.1), which covers whatever changed between two pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from resourcesync import (
    Capability,
    CapabilityList,
    ChangeList,
    ChangeListIndex,
    Document,
    Entry,
    Link,
    Metadata,
    ResourceList,
    ResourceListIndex,
    SourceDescription,
    serialize,
)
from resourcesync.models import construct
from resourcesync.namespaces import MAX_ENTRIES

from .inventory import ChangeRecord
from .tree import FileFacts, media_type

__all__ = ["Site", "change_entry", "page_name"]

#: Where the files are served, below the base URL (documents and files never share a name).
FILES_PREFIX = "/files/"


def page_name(n: int) -> str:
    """A page's file name: zero-padded, so that the order of names is the order of pages."""
    return f"{n:08d}.xml"


def _at(when: datetime | None) -> datetime:
    return datetime.now(UTC) if when is None else when


@dataclass(frozen=True, slots=True)
class Site:
    """The Source's addresses and page sizes."""

    #: The Source's base URL, e.g. ``http://127.0.0.1:8088`` (no trailing slash).
    base_url: str
    #: The hub's base URL, when the Source pushes.
    hub: str | None = None
    #: The hub topic the Source pushes to.
    topic: str | None = None
    #: Resources in one Resource List (page); more make a Resource List Index.
    resourcelist_entries: int = 50_000
    #: Changes in one Change List page.
    changelist_entries: int = 1000

    @property
    def description_url(self) -> str:
        return f"{self.base_url}/.well-known/resourcesync"

    @property
    def capabilitylist_url(self) -> str:
        return f"{self.base_url}/capabilitylist.xml"

    @property
    def resourcelist_url(self) -> str:
        return f"{self.base_url}/resourcelist.xml"

    @property
    def changelist_url(self) -> str:
        return f"{self.base_url}/changelist.xml"

    @property
    def topic_url(self) -> str | None:
        if self.hub is None or self.topic is None:
            return None
        return f"{self.hub.rstrip('/')}/topics/{self.topic}"

    def file_url(self, key: str) -> str:
        return f"{self.base_url}{FILES_PREFIX}{key}"

    def resourcelist_page_url(self, n: int) -> str:
        return f"{self.base_url}/resourcelist/{page_name(n)}"

    def changelist_page_url(self, n: int) -> str:
        return f"{self.base_url}/changelist/{page_name(n)}"

    # -- discovery ---------------------------------------------------------------------

    def source_description(self) -> bytes:
        entry = Entry(
            loc=self.capabilitylist_url, md=Metadata(capability=Capability.CAPABILITYLIST)
        )
        return serialize(SourceDescription(entries=(entry,)))

    def capability_list(self, *, dumps: bool = False) -> bytes:
        """The Capability List; with ``dumps``, the Resource Dump and Change Dump too."""
        entries = [
            Entry(loc=self.resourcelist_url, md=Metadata(capability=Capability.RESOURCELIST)),
            Entry(loc=self.changelist_url, md=Metadata(capability=Capability.CHANGELIST)),
        ]
        if dumps:
            entries += [
                Entry(
                    loc=f"{self.base_url}/resourcedump.xml",
                    md=Metadata(capability=Capability.RESOURCEDUMP),
                ),
                Entry(
                    loc=f"{self.base_url}/changedump.xml",
                    md=Metadata(capability=Capability.CHANGEDUMP),
                ),
            ]
        topic, hub = self.topic_url, self.hub
        if topic is not None and hub is not None:
            entries.append(
                Entry(
                    loc=topic,
                    md=Metadata(capability=Capability.CHANGELIST_NOTIFICATION),
                    links=(Link(rel="hub", href=hub),),
                )
            )
        links = (Link(rel="up", href=self.description_url),)
        return serialize(CapabilityList(links=links, entries=tuple(entries)))

    # -- Resource List -----------------------------------------------------------------

    def resourcelist_pages(self, count: int) -> int:
        """Pages of a Resource List of ``count`` resources (1: no index)."""
        return max(1, -(-count // self.resourcelist_entries))

    def resource_list(
        self, files: Sequence[tuple[str, FileFacts]], at: datetime | None = None
    ) -> bytes:
        """``/resourcelist.xml``: the Resource List, or its index past one page.
        ``files`` are the resources, sorted by key."""
        at = _at(at)
        pages = self.resourcelist_pages(len(files))
        if pages == 1:
            return self.resource_list_page(files, 0, at)
        entries = tuple(
            construct(Entry, {"loc": self.resourcelist_page_url(n)}) for n in range(pages)
        )
        md = Metadata(capability=Capability.RESOURCELIST, at=at)
        links = (Link(rel="up", href=self.capabilitylist_url),)
        return serialize(ResourceListIndex(md=md, links=links, entries=entries))

    def resource_list_page(
        self, files: Sequence[tuple[str, FileFacts]], n: int, at: datetime | None = None
    ) -> bytes:
        """Page ``n`` of the Resource List of ``files`` (the whole list when it has one
        page)."""
        size = self.resourcelist_entries
        page = files[n * size : (n + 1) * size]
        links = [Link(rel="up", href=self.capabilitylist_url)]
        if self.resourcelist_pages(len(files)) > 1:
            links.append(Link(rel="index", href=self.resourcelist_url))
        md = Metadata(capability=Capability.RESOURCELIST, at=_at(at))
        entries = tuple(self.resource_entry(key, facts) for key, facts in page)
        return serialize(_document(ResourceList, md, links, entries))

    def resource_entry(self, key: str, facts: FileFacts) -> Entry:
        md = construct(
            Metadata,
            {
                "hash": facts.hash,
                "length": facts.length,
                "type": media_type(key),
            },
        )
        lastmod = datetime.fromtimestamp(facts.mtime_ns / 1e9, UTC)
        return construct(Entry, {"loc": self.file_url(key), "lastmod": lastmod, "md": md})

    # -- Change Lists ------------------------------------------------------------------

    def changelist_pages(self, changes: int) -> int:
        """Pages of a history of ``changes`` changes: the full ones and the open one."""
        return changes // self.changelist_entries + 1

    def _page_bounds(
        self, history: Sequence[ChangeRecord], n: int, started: datetime
    ) -> tuple[datetime, datetime | None]:
        size = self.changelist_entries
        start = started if n == 0 else history[n * size - 1].at
        closed = len(history) >= (n + 1) * size
        return start, (history[(n + 1) * size - 1].at if closed else None)

    def change_list_index(self, history: Sequence[ChangeRecord], started: datetime) -> bytes:
        entries = []
        for n in range(self.changelist_pages(len(history))):
            start, until = self._page_bounds(history, n, started)
            md = construct(Metadata, {"from_": start, "until": until})
            entries.append(construct(Entry, {"loc": self.changelist_page_url(n), "md": md}))
        md = Metadata.model_validate({"capability": Capability.CHANGELIST, "from": started})
        links = (Link(rel="up", href=self.capabilitylist_url),)
        return serialize(ChangeListIndex(md=md, links=links, entries=tuple(entries)))

    def change_list_page(
        self, history: Sequence[ChangeRecord], n: int, started: datetime
    ) -> bytes | None:
        """Page ``n`` of the Change Lists, ``None`` if there is no such page."""
        if not 0 <= n < self.changelist_pages(len(history)):
            return None
        size = self.changelist_entries
        start, until = self._page_bounds(history, n, started)
        md = Metadata.model_validate(
            {"capability": Capability.CHANGELIST, "from": start, "until": until}
        )
        links = [
            Link(rel="up", href=self.capabilitylist_url),
            Link(rel="index", href=self.changelist_url),
        ]
        entries = tuple(change_entry(self, c) for c in history[n * size : (n + 1) * size])
        return serialize(_document(ChangeList, md, links, entries))

    def latest_changes(self, history: Sequence[ChangeRecord], started: datetime) -> bytes:
        """``/changes.xml``: the latest change of each resource, in the order they
        happened."""
        latest: dict[str, ChangeRecord] = {}
        for change in history:
            latest.pop(change.key, None)  # re-inserted last: the dict stays in order
            latest[change.key] = change
        kept = list(latest.values())[-MAX_ENTRIES:]
        start = started if len(kept) == len(latest) else kept[0].at
        md = Metadata.model_validate({"capability": Capability.CHANGELIST, "from": start})
        links = [Link(rel="up", href=self.capabilitylist_url)]
        entries = tuple(change_entry(self, c) for c in kept)
        return serialize(_document(ChangeList, md, links, entries))


def change_entry(site: Site, change: ChangeRecord) -> Entry:
    """One change as a Change List entry (and a change notification's): ``lastmod`` is
    the time the Source saw it, and ``rs:md/@datetime`` too (ResourceSync 1.1's change
    time, which 1.1 clients such as resync require); a resource created or updated has
    its facts."""
    values: dict[str, object] = {"change": change.change, "datetime": change.at}
    facts = change.facts
    if facts is not None:
        values.update(hash=facts.hash, length=facts.length, type=media_type(change.key))
    md = construct(Metadata, values)
    return construct(Entry, {"loc": site.file_url(change.key), "lastmod": change.at, "md": md})


def _document(
    cls: type[Document], md: Metadata, links: Sequence[Link], entries: tuple[Entry, ...]
) -> Document:
    return construct(cls, {"md": md, "links": tuple(links), "entries": entries})

"""Discovery: from a start URL down to a Source's Change Lists, Resource Lists and hub.

Z39.99 Sections 8, 9 and 12: a Source Description (Index) lists Capability Lists; a
Capability List lists the Source's documents by capability (``changelist``,
``resourcelist``, ``resourcedump``, ``changedump``, ``changelist-notification`` with its
``rs:ln rel="hub"``). A walk may
start at any of them, or at a Change List (Index) or Resource List (Index), which are
then taken as found; with ``follow_up`` their ``rel="up"`` Capability List is read too,
for what else it lists (the Resource List, the hub).

The walk does no HTTP itself: it asks ``fetch`` for each document, so that a caller that
counts, caches or stages fetches (the publisher's bridge) walks the same way as one that
does not (the subscriber's poller).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from resourcesync import (
    Capability,
    CapabilityList,
    ChangeList,
    ChangeListIndex,
    Document,
    ResourceList,
    ResourceListIndex,
    SourceDescription,
    SourceDescriptionIndex,
)

from .exceptions import DiscoveryError, SourceError

__all__ = ["MAX_DEPTH", "Choose", "Discovery", "Fetch", "Notification", "discover"]

log = logging.getLogger(__name__)

#: Source Description Index -> Source Description -> Capability List -> feed, and one spare.
MAX_DEPTH = 4

#: Fetch and parse one document; raise :class:`~rsclient.exceptions.SourceError` if it fails.
Fetch = Callable[[str], Awaitable[Document]]
#: Given a Source Description's URL and its Capability Lists' URLs, those to follow.
Choose = Callable[[str, list[str]], list[str]]


@dataclass(frozen=True, slots=True)
class Notification:
    """A ``changelist-notification`` capability: the topic URI and its hub, if linked."""

    topic: str
    hub: str | None


@dataclass
class Discovery:
    """What a walk found, each list in the order found (depth first)."""

    capability_lists: list[str] = field(default_factory=list)
    #: Change Lists and Change List Indexes.
    changelists: list[str] = field(default_factory=list)
    #: Resource Lists and Resource List Indexes.
    resourcelists: list[str] = field(default_factory=list)
    #: Resource Dumps and Resource Dump Indexes (Section 11): a baseline in packages.
    resourcedumps: list[str] = field(default_factory=list)
    #: Change Dumps and Change Dump Indexes (Section 13).
    changedumps: list[str] = field(default_factory=list)
    notifications: list[Notification] = field(default_factory=list)

    @property
    def capability_list(self) -> str | None:
        return self.capability_lists[0] if self.capability_lists else None

    @property
    def changelist(self) -> str | None:
        """The first Change List (Index) found: the start URL when it is one."""
        return self.changelists[0] if self.changelists else None

    @property
    def resourcelist(self) -> str | None:
        return self.resourcelists[0] if self.resourcelists else None

    @property
    def resourcedump(self) -> str | None:
        return self.resourcedumps[0] if self.resourcedumps else None

    @property
    def topic_uri(self) -> str | None:
        return self.notifications[0].topic if self.notifications else None

    @property
    def hub(self) -> str | None:
        return self.notifications[0].hub if self.notifications else None


async def discover(
    fetch: Fetch,
    start: str,
    *,
    choose: Choose | None = None,
    follow_up: bool = True,
    max_depth: int = MAX_DEPTH,
) -> Discovery:
    """Walk from ``start``; ``choose`` picks a Source Description's Capability Lists
    (default: all of them).

    Raises:
        DiscoveryError: a document that leads to no changes (a Resource Dump, say), or
            nesting deeper than ``max_depth``; or what ``choose`` raises.
        SourceError: from ``fetch``, except for a ``rel="up"`` link, which is optional.
    """
    walk = _Walk(fetch, choose, follow_up, max_depth)
    await walk.visit(start, await fetch(start), 0)
    return walk.found


class _Walk:
    def __init__(
        self, fetch: Fetch, choose: Choose | None, follow_up: bool, max_depth: int
    ) -> None:
        self.fetch, self.choose = fetch, choose
        self.follow_up, self.max_depth = follow_up, max_depth
        self.found = Discovery()

    async def visit(self, url: str, doc: Document, depth: int) -> None:
        if depth > self.max_depth:
            raise DiscoveryError(f"{url}: discovery nested more than {self.max_depth} levels deep")
        found = self.found
        if isinstance(doc, SourceDescription | SourceDescriptionIndex):
            locs = [e.loc for e in doc.entries]
            if isinstance(doc, SourceDescription) and self.choose is not None:
                locs = self.choose(url, locs)
            for loc in locs:
                await self.visit(loc, await self.fetch(loc), depth + 1)
        elif isinstance(doc, CapabilityList):
            found.capability_lists.append(url)
            for entry in doc.entries:
                capability = entry.md.capability if entry.md is not None else None
                if capability is Capability.CHANGELIST:
                    found.changelists.append(entry.loc)
                elif capability is Capability.RESOURCELIST:
                    found.resourcelists.append(entry.loc)
                elif capability is Capability.RESOURCEDUMP:
                    found.resourcedumps.append(entry.loc)
                elif capability is Capability.CHANGEDUMP:
                    found.changedumps.append(entry.loc)
                elif capability is Capability.CHANGELIST_NOTIFICATION:
                    hub = next((ln.href for ln in entry.links if ln.rel == "hub"), None)
                    found.notifications.append(Notification(entry.loc, hub))
        elif isinstance(doc, ChangeList | ChangeListIndex):
            found.changelists.append(url)
            await self.up(doc, depth)
        elif isinstance(doc, ResourceList | ResourceListIndex):
            found.resourcelists.append(url)
            await self.up(doc, depth)
        else:
            raise DiscoveryError(f"{url}: a {doc.md.capability} document leads to no changes")

    async def up(self, doc: Document, depth: int) -> None:
        """Read the ``rel="up"`` Capability List, unless one was found already."""
        up = doc.up
        if not self.follow_up or up is None or self.found.capability_lists:
            return
        try:
            capabilities = await self.fetch(up)
        except SourceError as exc:
            log.info("cannot follow rel=up %s: %s", up, exc)
            return
        if isinstance(capabilities, CapabilityList):
            await self.visit(up, capabilities, depth + 1)

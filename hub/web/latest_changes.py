"""``GET /topics/{name}/changes.xml``: the latest change of every URI, as one Change List,
and ``GET /topics/{name}/changes-lost``, what its marker entry names (410 Gone).

What the document holds, and why, is :mod:`hub.core.latest_changes`. Here each topic's view
is kept in memory and brought up to date by reading only the events appended since it was
last read (batches of :data:`READ_BATCH`, rendered in the parse pool when large), under one
lock per topic; views take at most ``max_bytes`` of memory in all (least recently used out,
rebuilt from the stream when asked again). The document is rendered once per version (the
topic's creation, its ``trimmed_through``, its last event id) and shared by every request
for that version (:class:`hub.web.cache.Builds`), waited for at most
``document_wait_seconds`` (then the earlier version, or 503 with ``Retry-After`` before the
first); a conditional GET that matches is answered from the topic's meta hash alone, before
anything is read or built.

Access is the topic's: a private topic's documents need its read token
(:func:`hub.web.documents.known_topic`). User documentation: ``docs/polling.md``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from aiohttp import web

from hub.core import rendering
from hub.core.events import id_ms, parse_id
from hub.core.exceptions import Gone, SnapshotPending
from hub.core.latest_changes import VIEW_ENTRIES, LatestChanges, fold_rows, marker_ms
from hub.core.rendering import Rendered
from hub.core.topics import HubUrls
from hub.live.parsing import DocumentParser
from hub.store.event_store import EventStore, TopicFacts
from hub.web.access import link_urls
from hub.web.cache import Validators, not_modified, send_rendered, stream, unchanged
from hub.web.documents import READING, known_topic
from hub.web.page_builds import READ_BATCH


@dataclass(slots=True)
class _Held:
    """One topic's view, for the incarnation of the topic created at ``created_ms``."""

    created_ms: int
    view: LatestChanges
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class LatestViews:
    """Each topic's :class:`LatestChanges`, kept current by reading only what is new."""

    def __init__(
        self,
        store: EventStore,
        parser: DocumentParser,
        *,
        max_bytes: int,
        limit: int = VIEW_ENTRIES,
    ) -> None:
        self.store = store
        self.parser = parser
        self.max_bytes = max_bytes
        self.limit = limit
        self._held: OrderedDict[str, _Held] = OrderedDict()
        #: Events read from the stream (for tests: a view is never read twice).
        self.events_read = 0

    async def current(self, topic: str, facts: TopicFacts) -> LatestChanges:
        """The topic's view, up to date with ``facts`` (or later). Mutated only under the
        topic's lock: read what is needed from it before the next ``await``."""
        held = self._held.get(topic)
        if held is None or held.created_ms != facts.created_ms:
            # first use, or the topic was deleted and published to again
            held = _Held(facts.created_ms, LatestChanges(self.limit))
            self._held[topic] = held
        self._held.move_to_end(topic)
        async with held.lock:
            await self._catch_up(topic, held.view, facts)
        self._bound()
        return held.view

    async def _catch_up(self, topic: str, view: LatestChanges, facts: TopicFacts) -> None:
        """Fold the events after ``view.last_id`` up to ``facts.last_id`` into ``view``.

        Each batch comes with the newest trimmed id, read in the same atomic step, so events
        retention removes before they are read are accounted for (:meth:`LatestChanges.trim`
        drops them and every older change).
        """
        end = facts.last_id
        if end is not None and (view.last_id is None or parse_id(view.last_id) < parse_id(end)):
            while True:
                start = "-" if view.last_id is None else f"({view.last_id}"
                rows, trimmed = await self.store.range_trimmed(topic, start, end, READ_BATCH)
                self.events_read += len(rows)
                if rows:
                    inline = len(rows) <= rendering.INLINE_ENTRIES
                    view.fold(await self.parser.run(fold_rows, rows, inline=inline))
                view.trim(trimmed)
                if len(rows) < READ_BATCH:  # read through ``end`` (what is left of it)
                    view.advance(end)
                    break
        view.trim(facts.trimmed_through)

    def _bound(self) -> None:
        total = sum(held.view.nbytes for held in self._held.values())
        while total > self.max_bytes and len(self._held) > 1:
            _, dropped = self._held.popitem(last=False)
            total -= dropped.view.nbytes


LATEST = web.AppKey("latest_changes", LatestViews)


def _version(facts_or_view: TopicFacts | LatestChanges) -> str:
    last = facts_or_view.last_id
    return f"{facts_or_view.trimmed_through or '0-0'}.{last or '0-0'}"


def _validators(u: HubUrls, topic: str, created_ms: int, version: str) -> Validators:
    trimmed, _, last = version.partition(".")
    modified = id_ms(last)
    # A trim changes the document (its marker) but not the last event: If-Modified-Since
    # alone cannot tell, so it never answers 304 for a topic that was ever trimmed.
    settled = trimmed == "0-0" and modified < time.time() * 1000 - 1000
    return Validators(f"{u.tag}-lc-{topic}-{created_ms}-{version}", modified, settled=settled)


def _render(u: HubUrls, topic: str, view: LatestChanges, created_ms: int) -> list[bytes]:
    """The document's parts (on the loop: a list of the view's entries, no rendering)."""
    listed = view.listed()
    lost = view.lost_through
    marker = ""
    if lost is not None:
        marker = rendering.lost_marker(u.changes_lost(topic), lost, marker_ms(lost))
    if lost is not None:
        from_ms = marker_ms(lost)
    elif listed:
        from_ms = id_ms(listed[0][0])
    else:
        from_ms = created_ms
    head = rendering.RSHUB_URLSET_OPEN + rendering.root(
        "changelist", [("up", u.capabilitylist(topic))], from_=from_ms
    )
    return [(head + marker).encode(), *(xml for _, xml in listed), b"</urlset>"]


async def latest_changes(request: web.Request) -> web.StreamResponse:
    """``changes.xml``: one version built once (off the loop), then shared."""
    topic = await known_topic(request)
    reading, views, u = request.app[READING], request.app[LATEST], link_urls(request)
    facts = await reading.store.facts(topic)
    early = _validators(u, topic, facts.created_ms, _version(facts))
    if not_modified(request, early):
        return unchanged(early)
    if request.method == "HEAD":
        return await stream(request, early, [])

    async def build() -> Rendered:
        view = await views.current(topic, facts)
        version = _version(view)  # the view may be newer than ``facts``
        parts = _render(u, topic, view, facts.created_ms)
        at_ms = id_ms(view.last_id or "0-0")
        if len(parts) <= rendering.INLINE_ENTRIES:
            built = rendering.rendered(parts, at_ms, version)
        else:  # joining and gzip release the GIL: a thread will do
            built = await asyncio.to_thread(rendering.rendered, parts, at_ms, version)
        return built

    # The rendering's ``last_id`` holds the version it was built at (trimmed.last). The
    # first read of a big topic folds its whole stream (a 100,000-event topic: 11 s): past
    # the wait, the earlier version, or 503 while the first is built.
    wait = reading.snapshot_builds.wait_seconds
    try:
        built = await reading.builds.get(
            f"lc {u.tag} {topic}", _version(facts), build, lambda r: r.last_id or "", wait=wait
        )
    except TimeoutError:
        raise SnapshotPending(
            f"changes.xml of topic {topic!r} is being built (its first read folds the "
            f"topic's stream); read {u.changes(topic)} again after the Retry-After seconds",
            retry_after=max(wait, 1.0),
        ) from None
    assert built is not None and built.last_id is not None
    return await send_rendered(
        request, _validators(u, topic, facts.created_ms, built.last_id), built
    )


async def changes_lost(request: web.Request) -> web.StreamResponse:
    """What ``changes.xml``'s marker names: 410, saying what is lost and the way back."""
    topic = await known_topic(request)
    reading, views, u = request.app[READING], request.app[LATEST], link_urls(request)
    facts = await reading.store.facts(topic)
    view = await views.current(topic, facts)
    lost = view.lost_through
    changes, resources = u.changes(topic), u.resourcelist(topic)
    if lost is None:
        raise Gone(
            f"{changes} lists every change of topic {topic!r} retained now; this URL only "
            "stands for changes it no longer lists",
            topic=topic,
            changes=changes,
            resourcelist=resources,
        )
    when = rendering.w3c_ms(id_ms(lost))
    raise Gone(
        f"changes of topic {topic!r} up to {when} (event {lost}) are no longer listed in "
        f"{changes} (retention trimmed them, or more URIs changed than one document "
        "lists): a Destination that has not applied them must make a new baseline from "
        f"{resources}; with resync-sync: --baseline --delete, then the next --incremental "
        f"once with --from {when}",
        topic=topic,
        changes=changes,
        resourcelist=resources,
        lost_through=lost,
        **{"from": when},
    )

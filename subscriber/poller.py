"""Polling ResourceSync Change Lists: the hub's, or any standard Source's (1.0 or 1.1).

Discovery (:meth:`Poller.discover`) starts from any of: a Source Description, a Capability
List, a Change List Index, a Change List, a Resource List (Index). It follows Source
Description → Capability List → Change List (Index) → pages, as Z39.99-2014 Sections 8,
9 and 12 lay out; a Source Description with several Capability Lists needs ``topic`` (the
one whose URL contains ``/topics/{topic}/`` wins) unless it lists only one.

Entries of the hub's Change Lists carry their event id (``rs:md/@rshub:id``, namespace
``urn:rshub:1``), which the changes keep, with ``topic``, as push would deliver them.

A ``token`` (:class:`~rsclient.hub_token.HubToken`) goes with every document read from the
hub (a private topic's need it), and with no other.

Each :meth:`Poller.poll` returns the changes whose change time (``rs:md/@datetime`` if
present, else ``lastmod``) is at or after ``watermark - overlap``, in document order.

With ``latest`` (the hub's ``changes.xml``, which ``rshub sync`` follows) it reads that one
Change List instead: the latest change of every URI, enough for a mirror whatever the time
between two polls. When it begins with the hub's marker (``rs:md/@rshub:lost-through``, the
newest change no longer listed) and the position is before that change (its event id, else
its watermark), :meth:`Poller.poll` raises
:class:`~subscriber.exceptions.ChangesNoLongerListed`: the mirror needs a new baseline.
Pages entirely before that (``until`` earlier) are not fetched; unchanged pages (304) are
skipped, since their entries were returned before. The result is not de-duplicated: the
overlap deliberately re-reads the recent past, and :class:`~subscriber.position.EventCursor`
drops what was already delivered. ``overlap`` is the clock skew tolerated between a
Source's change times and the watermark.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import aiohttp

import rsclient.exceptions
from resourcesync import ChangeList, ChangeListIndex, Document, Entry, ResourceListIndex
from rsclient.discovery import Discovery, discover
from rsclient.documents import DocumentClient, Fetched
from rsclient.hub_token import HubToken

from .events import ChangeEvent, event_order
from .exceptions import ChangesNoLongerListed, DiscoveryError, HubRefused, SourceError
from .refusal import refusal

__all__ = ["Discovery", "Poller"]

log = logging.getLogger(__name__)


#: Largest document accepted (a Resource List page of 50,000 entries with hashes fits).
MAX_DOCUMENT_BYTES = 256 * 2**20


@contextlib.contextmanager
def _as_subscriber_errors() -> Iterator[None]:
    """Re-raise :mod:`rsclient`'s errors as the subscriber's, which callers catch."""
    try:
        yield
    except SourceError:
        raise  # already the subscriber's (from Poller._choose)
    except rsclient.exceptions.DiscoveryError as exc:
        raise DiscoveryError(str(exc), status=exc.status) from exc
    except rsclient.exceptions.SourceError as exc:
        raise SourceError(str(exc), status=exc.status) from exc


class Poller:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        start: str,
        *,
        topic: str | None = None,
        overlap: timedelta = timedelta(seconds=30),
        token: HubToken | None = None,
        latest: str | None = None,
    ) -> None:
        self.start = start
        self.topic = topic
        self.overlap = overlap
        #: The hub's ``changes.xml`` to poll instead of the discovered Change List.
        self.latest = latest
        self.documents = DocumentClient(session, max_bytes=MAX_DOCUMENT_BYTES, token=token)
        self._found: Discovery | None = None
        #: Change Lists whose current version was returned by a poll.
        self._consumed: set[str] = set()

    async def discover(self) -> Discovery:
        """The Source's documents, found once: a Source Description must lead to a single
        Capability List (``topic`` picks among several)."""
        if self._found is None:
            with _as_subscriber_errors():
                self._found = await discover(self._fetch_start, self.start, choose=self._choose)
        return self._found

    async def _fetch_start(self, url: str) -> Document:
        """Fetch a discovery document; a refused start URL (4xx) is a wrong URL: fatal."""
        try:
            return await self.documents.fetch(url)
        except rsclient.exceptions.SourceError as exc:
            if url == self.start and exc.status is not None and refusal(exc.status):
                raise HubRefused(exc.status, str(exc)) from exc
            raise

    def _choose(self, url: str, capability_lists: list[str]) -> list[str]:
        if self.topic is not None:
            mine = [c for c in capability_lists if f"/topics/{self.topic}/" in c]
            capability_lists = mine or capability_lists
        if len(capability_lists) != 1:
            raise DiscoveryError(
                f"{url}: {len(capability_lists)} Capability Lists; say which with --topic or "
                "give the Capability List URL"
            )
        return capability_lists

    async def _get(self, url: str, *, keep: bool = False) -> Fetched:
        with _as_subscriber_errors():
            return await self.documents.get(url, keep=keep)

    async def _fetch(self, url: str) -> Document:
        with _as_subscriber_errors():
            return await self.documents.fetch(url)

    async def poll(
        self, watermark: datetime | None, event_id: str | None = None
    ) -> list[ChangeEvent]:
        """Changes at or after ``watermark - overlap`` (all retained ones if ``None``).

        ``event_id``: the last hub event id handed over, which judges the ``latest``
        document's marker exactly (else the watermark does).

        Raises:
            ChangesNoLongerListed: ``latest`` no longer lists changes after the position.
        """
        if self.latest is not None:
            return await self._poll_latest(watermark, event_id)
        found = await self.discover()
        if found.changelist is None:
            raise DiscoveryError(f"{self.start}: no Change List found")
        threshold = None if watermark is None else watermark - self.overlap
        result = await self._get(found.changelist, keep=True)
        doc = result.doc
        assert doc is not None
        if isinstance(doc, ChangeListIndex):
            out: list[ChangeEvent] = []
            for page in doc.entries:
                until = page.md.until if page.md else None
                if threshold is not None and until is not None and until < threshold:
                    continue
                fetched = await self._get(page.loc)
                if fetched.changed and fetched.doc is not None:
                    out.extend(_changes(fetched.doc, threshold, self.topic))
            return out
        if not result.changed and found.changelist in self._consumed:
            return []
        self._consumed.add(found.changelist)
        return _changes(doc, threshold, self.topic)

    async def _poll_latest(
        self, watermark: datetime | None, event_id: str | None
    ) -> list[ChangeEvent]:
        assert self.latest is not None
        result = await self._get(self.latest, keep=True)
        if not result.changed and self.latest in self._consumed:
            return []  # read before without a loss, and the position only moves on
        doc = result.doc
        if not isinstance(doc, ChangeList):
            raise SourceError(f"{self.latest}: not a Change List")
        marks = (_lost_through(entry) for entry in doc.entries)
        lost = next((mark for mark in marks if mark is not None), None)
        if lost is not None and _behind(lost, watermark, event_id):
            found = await self.discover()
            raise ChangesNoLongerListed(lost, found.resourcelist)
        self._consumed.add(self.latest)
        threshold = None if watermark is None else watermark - self.overlap
        return _changes(doc, threshold, self.topic)

    async def document(self, url: str) -> Document:
        """One document, read once (not kept for a conditional GET): a Resource Dump, say."""
        doc = await self._fetch(url)
        self.documents.forget(url)
        return doc

    async def resources(self) -> AsyncIterator[tuple[Entry, datetime | None]]:
        """Every entry of the Resource List (all pages of an index), with its ``at``."""
        found = await self.discover()
        if found.resourcelist is None:
            raise DiscoveryError(f"{self.start}: no Resource List found")
        doc = await self._fetch(found.resourcelist)
        self.documents.forget(found.resourcelist)
        if isinstance(doc, ResourceListIndex):
            at = doc.md.at
            for page in doc.entries:
                part = await self._fetch(page.loc)
                self.documents.forget(page.loc)
                for entry in part.entries:
                    yield entry, part.md.at or at
        else:
            for entry in doc.entries:
                yield entry, doc.md.at


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


#: The hub's event id of a Change List entry: an extension attribute of ``rs:md``.
ID_ATTRIBUTE = "{urn:rshub:1}id"
#: On the marker entry of the hub's ``changes.xml``: the newest change it no longer lists.
LOST_ATTRIBUTE = "{urn:rshub:1}lost-through"


def _lost_through(entry: Entry) -> str | None:
    """The event id a marker entry names (the hub's ``changes.xml``), else ``None``."""
    value = entry.md.extra.get(LOST_ATTRIBUTE) if entry.md is not None else None
    return None if value is None else str(value)


def _behind(lost: str, watermark: datetime | None, event_id: str | None) -> bool:
    """Whether a position may lack the change with id ``lost`` (an unreadable id: yes)."""
    order = event_order(lost)
    if order is None:
        return True
    last = None if event_id is None else event_order(event_id)
    if last is not None:
        return last < order
    return watermark is None or watermark < datetime.fromtimestamp(order[0] / 1000, UTC)


def _changes(
    doc: Document, threshold: datetime | None, topic: str | None = None
) -> list[ChangeEvent]:
    # An entry without any time breaks Z39.99 (lastmod is mandatory in 1.0 Change Lists),
    # yet resync-simulator writes such "deleted" entries. Forward chronological order puts
    # the change at or after the entry before it, so it takes that entry's time: stable
    # across polls, hence usable for (loc, lastmod) de-duplication.
    previous = doc.md.from_ or _EPOCH
    out = []
    for entry in doc.entries:
        if _lost_through(entry) is not None:
            continue  # the marker is no change (Poller._poll_latest judged it)
        when = entry.change_time or previous
        previous = when
        if threshold is not None and when < threshold:
            continue
        try:
            event_id = entry.md.extra.get(ID_ATTRIBUTE) if entry.md is not None else None
            out.append(
                ChangeEvent.from_entry(
                    entry,
                    id=None if event_id is None else str(event_id),
                    topic=topic,
                    default_time=when,
                )
            )
        except ValueError as exc:
            log.warning("skipped a Change List entry: %s", exc)
    return out

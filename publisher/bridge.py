"""Make a pull-only ResourceSync Source push-enabled: poll it, publish its new changes.

Each poll (:meth:`Bridge.poll`):

1. *Discovery.* From the URL given (a Source Description, a Capability List, a Change
   List Index or a Change List) down to the Source's change feeds: every Capability List's
   ``changelist`` capability (Z39.99 Sections 8, 9). Repeated each poll, so a Source that
   moves its Change Lists is followed; conditional GETs make it cheap.
2. *Reading*, per feed, as Section 12.1 prescribes: a Change List Index lists Change Lists
   in forward chronological order; a *closed* one (``until``) that ends before the feed's
   position is skipped without a request; the others are fetched. A closed Change List
   reached directly that links to its ``rel="index"`` is read through that index, to find
   the lists that follow it. An open Change List is polled again next time.
3. *Publishing* the entries after the feed's :class:`~publisher.position.ChangeListCursor`, in
   chunks of ``chunk_size``, through :meth:`publisher.client.Publisher.send`.

Every GET is conditional (``If-None-Match``/``If-Modified-Since``); a Change List answered
``304 Not Modified`` was fully published already and is skipped. Validators of a Change
List are kept only once all its changes are published.

Exactly once: before a chunk is sent, the state file records it as *pending* (its feed,
size and Idempotency-Key); after the hub's answer the position moves and the pending mark
goes. A bridge restarted after a crash between the two resends the same chunk with the
same key, and the hub answers with the ids it stored the first time instead of storing
the changes again. ResourceSync 1.0 and 1.1 are both read (change time =
``rs:md/@datetime`` if present, else ``lastmod``); entries are passed on as the Source
wrote them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import aiohttp
from tqdm import tqdm

import rsclient.exceptions
from resourcesync import (
    CapabilityList,
    ChangeList,
    ChangeListIndex,
    Document,
    Entry,
    SourceDescription,
    SourceDescriptionIndex,
    format_datetime,
    parse_datetime,
)
from rsclient.discovery import discover
from rsclient.documents import DocumentClient, Fetched
from rsclient.hub_token import HubToken

from .changes import check_change
from .client import Publisher
from .exceptions import PublisherError, PublishRejected, SourceError, UsageError, WrongSource
from .position import ChangeListCursor, in_order
from .state import StateFile

__all__ = ["Bridge", "PollResult"]

log = logging.getLogger(__name__)

_MAX_BYTES = 50 * 1024 * 1024  # Sitemaps' limit on one document
_STARTS = (
    SourceDescription,
    SourceDescriptionIndex,
    CapabilityList,
    ChangeListIndex,
    ChangeList,
)


@dataclass
class PollResult:
    """What one poll did."""

    published: int = 0
    feeds: list[str] = field(default_factory=list)
    documents_fetched: int = 0
    not_modified: int = 0


class Bridge:
    """Poll the Source at ``source_url`` and push its new changes through ``publisher``.

    ``state`` keeps each feed's position (and a pending chunk) across restarts; without it
    the bridge starts from scratch every time. ``since`` (used only when a feed has no
    saved position) skips the changes before it; ``"now"`` skips all changes listed at
    the first poll.
    """

    def __init__(
        self,
        source_url: str,
        publisher: Publisher,
        *,
        state: StateFile | None = None,
        session: aiohttp.ClientSession | None = None,
        chunk_size: int = 1000,
        since: str | None = None,
        request_timeout: float = 60.0,
        progress: tqdm[Any] | None = None,
    ) -> None:
        if chunk_size < 1:
            raise UsageError("chunk_size must be at least 1")
        self.source_url = source_url
        self.publisher = publisher
        self.state = state
        self.chunk_size = chunk_size
        self.since = since
        self.request_timeout = request_timeout
        #: Counts the changes published (its total grows as a catch-up finds more).
        self.progress = progress
        self._session = session
        self._documents: DocumentClient | None = None
        self.positions: dict[str, ChangeListCursor] = {}
        self._since_time = None if since in (None, "", "now") else _parse_since(str(since))
        self._staged: dict[str, Fetched] = {}
        self._memo: dict[str, tuple[Document, bool]] = {}
        self._warned_untimed = False
        self._pending: dict[str, Any] | None = None
        self._load_state()

    # -- state -------------------------------------------------------------------------

    def _load_state(self) -> None:
        if self.state is None:
            return
        saved = self.state.load()
        if saved and saved.get("source") != self.source_url:
            log.info(
                "state file %s is for %s, not %s: starting afresh",
                self.state.path,
                saved.get("source"),
                self.source_url,
            )
            return
        self.positions = {
            url: ChangeListCursor.from_json(p) for url, p in dict(saved.get("feeds") or {}).items()
        }
        self._pending = saved.get("pending") or None

    def _save_state(self) -> None:
        if self.state is None:
            return
        self.state.save(
            {
                "source": self.source_url,
                "feeds": {url: p.to_json() for url, p in self.positions.items()},
                "pending": self._pending,
            }
        )

    # -- polling -----------------------------------------------------------------------

    async def run(self, interval: float, *, polls: int | None = None) -> None:
        """Poll every ``interval`` seconds (``polls`` times, or until cancelled).

        A Source that fails or answers nonsense is logged and polled again next time,
        except that a start URL that is not ResourceSync at the first poll
        (:class:`WrongSource`) ends the run, as does the hub refusing the changes
        (:class:`PublishRejected`).
        """
        done = 0
        while polls is None or done < polls:
            started = time.monotonic()
            try:
                result = await self.poll()
                if result.published:
                    log.info(
                        "published %d new changes from %s",
                        result.published,
                        ", ".join(result.feeds),
                    )
            except PublishRejected:
                raise
            except WrongSource:
                if done == 0:
                    raise
                log.error("%s is no longer a ResourceSync Source", self.source_url)
            except (SourceError, PublisherError) as exc:
                log.error(
                    "poll of %s failed: %s; next poll in %.0fs", self.source_url, exc, interval
                )
            done += 1
            if polls is None or done < polls:
                await asyncio.sleep(max(0.0, started + interval - time.monotonic()))

    async def poll(self) -> PollResult:
        """One pass: discover the feeds, publish every change not yet published."""
        own = self._session is None
        session = self._session or aiohttp.ClientSession()
        result = PollResult()
        self._memo.clear()
        self._staged.clear()
        if self._documents is None:
            # A Source on the hub itself (a topic bridged into another) is read with the
            # publisher's token, which a private topic needs; no other Source gets it.
            token = HubToken.of(self.publisher.hub, self.publisher.token)
            self._documents = DocumentClient(
                session, timeout=self.request_timeout, max_bytes=_MAX_BYTES, token=token
            )
        self._documents.session = session  # what it remembers outlives a session
        try:
            feeds = await self._discover(result)
            for url in feeds:
                result.feeds.append(url)
                result.published += await self._read_feed(url, result)
        finally:
            if own:
                await session.close()
        return result

    async def _discover(self, result: PollResult) -> list[str]:
        """The change feeds: every Change List (Index) reachable from the source URL."""
        url = self.source_url
        start, _changed = await self._fetch(url, result, commit=True)
        if not isinstance(start, _STARTS):
            raise WrongSource(
                f"{url} is a {type(start).__name__}; give the bridge a Source "
                "Description, Capability List, Change List Index or Change List"
            )

        async def fetch(loc: str) -> Document:
            doc, _changed = await self._fetch(loc, result, commit=True)
            return doc

        try:
            found = await discover(fetch, url, follow_up=False)
        except rsclient.exceptions.DiscoveryError as exc:
            raise SourceError(str(exc)) from None
        return found.changelists

    async def _read_feed(self, url: str, result: PollResult) -> int:
        doc, changed = await self._fetch(url, result, commit=False)
        if isinstance(doc, ChangeList) and doc.md.until is not None:
            index = next((ln.href for ln in doc.links if ln.rel == "index"), None)
            if index and index != url:  # Section 12.1: a closed list; consult its index
                index_doc, _ = await self._fetch(index, result, commit=False)
                if isinstance(index_doc, ChangeListIndex):
                    count = await self._read_index(url, index, index_doc, result)
                    self._commit(index)
                    return count
        if isinstance(doc, ChangeListIndex):
            # Walked even when unchanged: its open Change List changes without it.
            count = await self._read_index(url, url, doc, result)
        elif isinstance(doc, ChangeList) and not changed and self._pending is None:
            count = 0  # unchanged since all of it was published
        elif isinstance(doc, ChangeList):
            count = await self._publish(url, doc, url)
        else:
            raise SourceError(
                f"{url}: expected a Change List or Change List Index, got a {type(doc).__name__}"
            )
        self._commit(url)
        return count

    async def _read_index(
        self,
        feed: str,
        url: str,
        index: ChangeListIndex,
        result: PollResult,
    ) -> int:
        count = 0
        for entry in index.entries:  # forward chronological order (Section 12.2)
            position = self.positions.get(feed, ChangeListCursor())
            until = entry.md.until if entry.md is not None else None
            pending_here = self._pending is not None and self._pending.get("feed") == feed
            if (
                until is not None
                and position.time is not None
                and until < position.time
                and not pending_here
            ):
                continue  # closed, and everything in it was published
            doc, changed = await self._fetch(entry.loc, result, commit=False)
            if not changed and not pending_here:
                continue
            if not isinstance(doc, ChangeList):
                raise SourceError(f"{entry.loc} (listed in {url}) is not a Change List")
            count += await self._publish(feed, doc, entry.loc)
            self._commit(entry.loc)
        return count

    async def _publish(self, feed: str, doc: ChangeList, url: str) -> int:
        entries, untimed = in_order(doc.entries, doc.md.from_)
        if untimed and not self._warned_untimed:
            self._warned_untimed = True
            log.warning(
                "%s: %d entries have neither lastmod nor datetime; each gets the time "
                "of the change before it (Section 12.1 order)",
                url,
                untimed,
            )
        position = self._start_position(feed, entries)
        if position.time is not None and doc.md.from_ is not None and doc.md.from_ > position.time:
            log.warning(
                "%s starts at %s, after the last change published (%s): changes in "
                "between may be missing at the Source",
                url,
                format_datetime(doc.md.from_),
                format_datetime(position.time),
            )
        new = _valid(position.new_entries(entries), url)
        if self.progress is not None and new:
            self.progress.total = (self.progress.total or self.progress.n) + len(new)
            self.progress.refresh()
        published = 0
        while new:
            chunk = new[: self.chunk_size]
            key = _chunk_key(feed, position, chunk)
            pending = self._pending
            if pending is not None and pending.get("feed") == feed:
                # Resend exactly what may have been stored before a crash, with its key.
                chunk, key = new[: int(pending["count"])], str(pending["key"])
            self._pending = {"feed": feed, "count": len(chunk), "key": key}
            self._save_state()
            sent = await self.publisher.send(chunk, idempotency_key=key)
            if sent.replayed:
                log.info(
                    "hub already had %d changes of %s (resent after a restart)", len(chunk), url
                )
            position = position.after(chunk)
            self.positions[feed] = position
            self._pending = None
            self._save_state()
            published += len(chunk)
            if self.progress is not None:
                self.progress.update(len(chunk))
            new = new[len(chunk) :]
        if self._pending is not None and self._pending.get("feed") == feed:
            self._pending = None  # nothing left to resend: the Source moved on
            self._save_state()
        return published

    def _start_position(self, feed: str, entries: Sequence[Entry]) -> ChangeListCursor:
        position = self.positions.get(feed)
        if position is not None:
            return position
        if self.since == "now":
            position = ChangeListCursor().after(entries)
        elif self._since_time is not None:
            # changes at exactly `since` are new: stand a microsecond before it
            position = ChangeListCursor(self._since_time - timedelta(microseconds=1))
        else:
            position = ChangeListCursor()
        self.positions[feed] = position
        return position

    # -- HTTP --------------------------------------------------------------------------

    async def _fetch(self, url: str, result: PollResult, *, commit: bool) -> tuple[Document, bool]:
        """GET ``url`` conditionally; return its document and whether it changed.

        A document is fetched once per poll. ``commit`` remembers its validators at once
        (discovery documents); a Change List's wait for :meth:`_commit`.
        """
        if url in self._memo:
            return self._memo[url]
        assert self._documents is not None  # set by poll()
        try:
            fetched = await self._documents.get(url, keep=True, remember=False)
        except rsclient.exceptions.NotResourceSync as exc:
            raise (WrongSource if url == self.source_url else SourceError)(str(exc)) from None
        except rsclient.exceptions.SourceError as exc:
            raise SourceError(str(exc)) from None
        result.documents_fetched += 1
        doc = fetched.doc
        assert doc is not None  # kept
        if not fetched.changed:
            result.not_modified += 1
        self._memo[url] = (doc, fetched.changed)
        if commit and not isinstance(doc, ChangeList | ChangeListIndex):
            self._documents.remember(url, fetched)
        elif fetched.changed:
            self._staged[url] = fetched
        return doc, fetched.changed

    def _commit(self, url: str) -> None:
        """Remember ``url``'s validators: its changes are all published."""
        staged = self._staged.pop(url, None)
        if staged is not None and self._documents is not None:
            self._documents.remember(url, staged)


def _parse_since(value: str) -> datetime:
    try:
        return parse_datetime(value)
    except ValueError:
        raise UsageError(f"since must be 'now' or a W3C datetime, not {value!r}") from None


def _valid(entries: list[Entry], url: str) -> list[Entry]:
    """Entries fit to publish; a 1.1 entry without ``lastmod`` gets its change time there,
    so that ResourceSync 1.0 readers of the notification see a complete change."""
    out = []
    for entry in entries:
        if entry.lastmod is None:
            entry = entry.model_copy(update={"lastmod": entry.change_time})
        try:
            check_change(entry)
        except UsageError as exc:
            log.warning("%s: skipping an entry the hub would refuse: %s", url, exc)
            continue
        out.append(entry)
    return out


def _chunk_key(feed: str, position: ChangeListCursor, chunk: Sequence[Entry]) -> str:
    digest = hashlib.sha256()
    digest.update(feed.encode())
    digest.update(repr(sorted(position.to_json().items())).encode())
    for entry in chunk:
        when = entry.change_time
        digest.update(f"\n{entry.change} {entry.loc} {when and format_datetime(when)}".encode())
    return "bridge-" + digest.hexdigest()[:40]

"""Follow a Wikimedia edit feed (live SSE stream or recorded file) and publish its edits.

The loop reads feed events in order, keeps those the :class:`~publisher.wikipedia.EditFilter`
accepts, maps each to ResourceSync changes (:func:`~publisher.wikipedia.changes_from_event`)
and queues them on a :class:`~publisher.client.Publisher`, which batches and retries. The
*position* (the SSE id of the last event whose changes the hub has stored, every earlier
event included) goes to a state file, so a restart resumes after it: with
``Last-Event-ID`` on a live stream, by skipping to it in a recording.

Delivery is at least once: on a clean stop (end of a replay, ``limit`` reached, Ctrl-C)
everything queued is flushed and the position saved, so nothing repeats; after a crash,
the events after the saved position (at most the batches in flight, about a second's
worth) are published again. A change the hub refuses ends the run with that error; the
position stays before it.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp

from .client import Publisher
from .exceptions import FeedError
from .sse import EventSource
from .state import StateFile
from .wikipedia import EditFilter, changes_from_event, meta_of

__all__ = [
    "DEFAULT_STREAM",
    "FeedEvent",
    "FeedStats",
    "follow",
    "read_recording",
    "replay",
    "sample_path",
    "stream",
]

log = logging.getLogger(__name__)

DEFAULT_STREAM = "https://stream.wikimedia.org/v2/stream/recentchange"


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One feed event: its SSE id (the resume token) and its decoded JSON data."""

    id: str
    data: dict[str, Any]


@dataclass
class FeedStats:
    read: int = 0
    filtered: int = 0
    unmapped: int = 0
    published_events: int = 0
    changes: int = 0
    by_change: dict[str, int] = field(default_factory=dict)
    position: str = ""


def sample_path() -> Path:
    """The shipped, generated sample recording (see :mod:`publisher.feed_generator`)."""
    return Path(str(resources.files("publisher") / "data" / "recentchange-sample.jsonl.gz"))


def read_recording(path: str | Path) -> Iterator[FeedEvent]:
    """Events of a recording: JSON lines ``{"id", "data"}`` (gzipped if ``.gz``).

    Lines without ``data`` (such as the generated file's header) are skipped; a line that
    is a bare event object is accepted too, with its line number as id.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    raise FeedError(f"{path}:{number}: not JSON: {exc}") from None
                if not isinstance(record, dict):
                    raise FeedError(f"{path}:{number}: not a JSON object")
                if isinstance(record.get("data"), dict):
                    yield FeedEvent(str(record.get("id") or number), record["data"])
                elif "meta" in record and "type" in record:
                    yield FeedEvent(str(number), record)
    except OSError as exc:
        raise FeedError(f"cannot read recording {path}: {exc}") from exc


async def replay(
    path: str | Path, *, rate: float = 0.0, after: str = ""
) -> AsyncIterator[FeedEvent]:
    """Yield the recording's events, ``rate`` per second (0: as fast as possible).

    With ``after``, start after the event with that id.

    Raises:
        FeedError: ``after`` is not an id in the recording.
    """
    events = read_recording(path)
    if after:
        for event in events:
            if event.id == after:
                break
        else:
            raise FeedError(f"resume position {after[:80]!r} is not in {path}")
    started = time.monotonic()
    for n, event in enumerate(events):
        if rate > 0:
            delay = started + n / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        elif n % 200 == 199:
            await asyncio.sleep(0)  # let the publisher run
        yield event


async def stream(
    url: str = DEFAULT_STREAM,
    *,
    after: str = "",
    session: aiohttp.ClientSession | None = None,
    reconnect_delay: float = 1.0,
) -> AsyncIterator[FeedEvent]:
    """Yield a live SSE feed's events, resuming after ``after`` (``Last-Event-ID``)."""
    source = EventSource(url, session=session, last_event_id=after, reconnect_delay=reconnect_delay)
    async for event in source:
        if event.event != "message":
            continue
        try:
            data = json.loads(event.data)
        except ValueError:
            log.warning("skipping an event that is not JSON (id %s)", event.id)
            continue
        if isinstance(data, dict):
            yield FeedEvent(event.id, data)


class _Position:
    """Event ids in feed order with the futures of their changes; the front is settled."""

    def __init__(self, state: StateFile | None, source: str, stats: FeedStats) -> None:
        self.state, self.source, self.stats = state, source, stats
        self.pending: deque[tuple[str, asyncio.Future[list[str]] | None]] = deque()
        self.saved_at = time.monotonic()
        self.saved = stats.position

    def add(self, event_id: str, future: asyncio.Future[list[str]] | None) -> None:
        self.pending.append((event_id, future))

    def advance(self) -> None:
        """Move the position over every leading settled event; raise a publish failure."""
        pending = self.pending
        while pending and (pending[0][1] is None or pending[0][1].done()):
            event_id, future = pending.popleft()
            if future is not None:
                future.result()  # a refused change ends the run here
            self.stats.position = event_id

    def save(self, *, force: bool = False) -> None:
        if self.state is None or self.stats.position == self.saved:
            return
        if force or time.monotonic() - self.saved_at >= 1.0:
            self.state.save({"source": self.source, "last_event_id": self.stats.position})
            self.saved, self.saved_at = self.stats.position, time.monotonic()


def saved_position(state: StateFile | None, source: str) -> str:
    """The last event id saved for ``source`` ("" when none, or saved for another feed)."""
    if state is None:
        return ""
    saved = state.load()
    if saved.get("source") != source:
        if saved:
            log.info(
                "state file %s is for %s, not %s: starting afresh",
                state.path,
                saved.get("source"),
                source,
            )
        return ""
    return str(saved.get("last_event_id") or "")


async def follow(
    events: AsyncIterator[FeedEvent],
    publisher: Publisher,
    *,
    edit_filter: EditFilter | None = None,
    state: StateFile | None = None,
    source: str = "",
    categorize: bool = False,
    limit: int | None = None,
    position: str = "",
) -> FeedStats:
    """Publish the changes of ``events`` until they end, ``limit`` events were read, or
    the task is cancelled; flush and save the position in every case.

    ``position`` is where ``events`` starts (the id saved last time), kept as the position
    until a later event is settled.
    """
    edit_filter = edit_filter or EditFilter()
    stats = FeedStats(position=position)
    tracker = _Position(state, source, stats)
    try:
        async for event in events:
            stats.read += 1
            data = event.data
            if meta_of(data).get("domain") == "canary" or not edit_filter.accepts(data):
                stats.filtered += 1
                tracker.add(event.id, None)
            else:
                try:
                    entries = changes_from_event(data, categorize=categorize)
                except ValueError as exc:
                    log.warning("skipping event %s: %s", event.id[:80], exc)
                    entries = []
                if entries:
                    future = await publisher.put(entries)
                    tracker.add(event.id, future)
                    stats.published_events += 1
                    stats.changes += len(entries)
                    for entry in entries:
                        kind = str(entry.change)
                        stats.by_change[kind] = stats.by_change.get(kind, 0) + 1
                else:
                    stats.unmapped += 1
                    tracker.add(event.id, None)
            tracker.advance()
            tracker.save()
            if limit is not None and stats.read >= limit:
                break
    finally:
        # Clean stop (end, limit, cancellation): send what is queued, then record it.
        try:
            await asyncio.shield(publisher.flush())
        finally:
            try:
                tracker.advance()
            finally:
                tracker.save(force=True)
    return stats

"""The latest change of every URI in a topic's retained stream: what ``changes.xml`` lists.

A Destination that polls by a time position (resync keeps "the newest datetime seen",
re-reading entries at or after it) needs a Change List that is right whatever that
position is: every page of the stream, read one at a time, is not (a page closes between two
runs, and resync reads one Change List per run), and several changes of one URI are not
either (resync drops a URI whose first listed change is ``created`` and last ``deleted``,
whatever it held before). So ``changes.xml`` lists, for each URI changed in the retained
stream, only its latest change, in receipt order of those latest changes. Re-applying a
latest change a client already applied is harmless, so any position at or after the
document's start is right. Z39.99 §12.1 asks for one entry per change ("should"); listing
only the latest is a deliberate departure, said in ``docs/polling.md``.

Rules (:class:`LatestChanges` keeps them as events arrive):

1. The view covers the events after ``trimmed_through`` (retention removes events from the
   front of the stream; the store records the newest it removed) up to ``last_id``.
2. It keeps at most ``limit`` entries (49,999: with the marker of rule 3, the Sitemaps
   limit of 50,000): the newest latest changes. The newest latest change left out is
   ``evicted``.
3. ``lost_through`` is the newer of ``trimmed_through`` and ``evicted``: the newest change
   the document may not say (a trimmed change is left out whether or not a later change of
   its URI superseded it: the hub no longer knows its URI). A client that has not applied it
   must make a new baseline; the document says so with a marker entry
   (:func:`hub.core.rendering.lost_marker`) whose datetime is :func:`marker_ms`.

The view is the same whatever history built it (a process that folded every event since
the topic began, or one that started at ``trimmed_through``): after each step it is the
``limit`` newest latest changes over ``(trimmed_through, last_id]``, so every hub process
serves the same document for the same stream. Folding is pure; reading the stream is the
caller's (:mod:`hub.web.latest_changes`), which renders each event once, in the parse pool
(:func:`fold_rows`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from hub.core.events import CHANGEDUMP, EventKey, decode, id_ms, parse_id
from hub.core.rendering import listed_change

#: Entries one ``changes.xml`` holds at most, the marker included (Sitemaps limit).
MAX_ENTRIES = 50_000
#: Changes a view keeps: one place is the marker's.
VIEW_ENTRIES = MAX_ENTRIES - 1

#: One folded event: ``(loc, event id, its rendered <url>)``.
Folded = tuple[str, str, bytes]


def fold_rows(rows: list[tuple[str, bytes]]) -> list[Folded]:
    """The latest change of each URI in ``rows`` (stored events in stream order), rendered,
    in the order of those latest changes. Runs in the parse pool for large batches.

    Raises:
        DamagedData: a stored event is not a change.
    """
    latest: dict[str, tuple[str, bytes]] = {}
    for event_id, stored in rows:
        data = decode(stored)
        if data["change"] == CHANGEDUMP:  # a package of a Change Dump: no resource's change
            continue
        loc = data["loc"]
        latest.pop(loc, None)  # to the end: the order is that of the latest changes
        latest[loc] = (event_id, listed_change(event_id, data).encode())
    return [(loc, event_id, xml) for loc, (event_id, xml) in latest.items()]


def marker_ms(lost_through: str) -> int:
    """The marker's datetime (ms): one millisecond before the newest change not listed.

    resync keeps entries whose datetime is at or after its position, and its position is
    the newest datetime it has read: a marker *at* that change's time would fail every
    client that did read it, which is every up-to-date client of a quiet topic once
    retention trims its newest change. One millisecond earlier, the marker survives exactly
    for the positions before that change: the clients that may have missed it.
    """
    return max(id_ms(lost_through) - 1, 0)


class LatestChanges:
    """The latest change of each URI over ``(trimmed_through, last_id]``; see the module."""

    def __init__(self, limit: int = VIEW_ENTRIES) -> None:
        if limit < 1:
            raise ValueError("a view keeps at least one entry")
        self.limit = limit
        #: loc -> (event key, event id, rendered entry), oldest latest change first.
        self._entries: OrderedDict[str, tuple[EventKey, str, bytes]] = OrderedDict()
        #: The newest event folded in (or known to be the stream's end), if any.
        self.last_id: str | None = None
        self.trimmed_through: str | None = None
        #: The newest latest change left out by ``limit``.
        self.evicted: str | None = None
        self._trimmed_key: EventKey = (-1, -1)
        self._evicted_key: EventKey = (-1, -1)
        self._last_key: EventKey = (-1, -1)
        #: Bytes of the rendered entries held (for the caller's memory budget).
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def fold(self, folded: Iterable[Folded]) -> None:
        """Add changes newer than every one folded before, in stream order."""
        entries = self._entries
        for loc, event_id, xml in folded:
            key = parse_id(event_id)
            if key <= self._last_key:
                raise ValueError(f"event {event_id} is not after {self.last_id}")
            old = entries.pop(loc, None)
            if old is not None:
                self.nbytes -= len(old[2])
            entries[loc] = (key, event_id, xml)
            self.nbytes += len(xml)
            self._last_key, self.last_id = key, event_id
            if len(entries) > self.limit:
                _, (gone_key, gone_id, gone_xml) = entries.popitem(last=False)
                self.nbytes -= len(gone_xml)
                if gone_key > self._evicted_key:
                    self._evicted_key, self.evicted = gone_key, gone_id

    def advance(self, last_id: str) -> None:
        """The stream ends at ``last_id`` though nothing after :attr:`last_id` was folded
        (retention removed those events before they were read: :meth:`trim` drops them)."""
        key = parse_id(last_id)
        if key > self._last_key:
            self._last_key, self.last_id = key, last_id

    def trim(self, through: str | None) -> None:
        """Retention removed every event up to ``through``: their changes leave the view."""
        if through is None:
            return
        key = parse_id(through)
        if key <= self._trimmed_key:
            return
        self._trimmed_key, self.trimmed_through = key, through
        entries = self._entries
        while entries:
            loc, (first_key, _, xml) = next(iter(entries.items()))
            if first_key > key:
                break
            del entries[loc]
            self.nbytes -= len(xml)

    @property
    def lost_through(self) -> str | None:
        """The newest change this view does not list, if any (see the module's rule 3)."""
        if self._evicted_key > self._trimmed_key:
            return self.evicted
        return self.trimmed_through

    def listed(self) -> list[tuple[str, bytes]]:
        """``(event id, rendered entry)`` of every entry, oldest first."""
        return [(event_id, xml) for _, event_id, xml in self._entries.values()]

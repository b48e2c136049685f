"""Where the bridge stands in a Change List: which changes it has already passed on. No I/O.

Z39.99 Section 12.1: entries are in forward chronological order, and "the forward
chronological order of changes in a Change List, the datetime of a resource change, and
the URI of a changed resource help the Destination to determine the first unprocessed
change". A :class:`ChangeListCursor` is therefore the change time of the last change passed on,
plus how many changes of each (URI, change type) it passed on *at exactly that time* —
counted, not just remembered, so that a Source with coarse timestamps that lists the same
change twice in one second still has each occurrence passed on once.

The change time is ``rs:md/@datetime`` when present (ResourceSync 1.1), else ``<lastmod>``
(1.0): :attr:`resourcesync.Entry.change_time`.

It is not the subscriber's :class:`subscriber.position.EventCursor`, and why: a cursor
reads one Source's Change List, in its order, where hub event ids do not exist and the
only order is the change time, so it must count (not merely remember) what it passed on
at its last time. The subscriber de-duplicates deliveries that arrive by several
transports, in any order, mostly with hub event ids; it can tolerate a lossy, bounded
memory of recent keys. The two agree on the change time and on nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from resourcesync import Entry, format_datetime, parse_datetime

__all__ = ["ChangeListCursor", "in_order"]


def _key(entry: Entry) -> str:
    return f"{entry.change} {entry.loc}"


def in_order(entries: Iterable[Entry], start: datetime | None = None) -> tuple[list[Entry], int]:
    """Entries stably sorted by change time (a no-op for a conforming list), and how many
    had to be given a time.

    An entry with neither ``lastmod`` nor ``rs:md/@datetime`` breaks Section 12.1 (and
    resync-simulator writes deletions so in 1.0 mode). Forward chronological order bounds
    its time: it gets the time of the change before it (or the list's ``from``, ``start``)
    as ``lastmod``, or, at the head of a list without ``from``, the time of the first
    change after it. One with neither bound (a list of untimed entries only) is dropped.
    """
    items = list(entries)
    times: list[datetime | None] = []
    last = start
    for entry in items:
        when = entry.change_time
        if when is not None:
            last = when
        times.append(when or last)
    following: datetime | None = None
    for n in range(len(items) - 1, -1, -1):
        when = items[n].change_time
        if when is not None:
            following = when
        elif times[n] is None:
            times[n] = following
    timed: list[Entry] = []
    inferred = 0
    for entry, when in zip(items, times, strict=True):
        if entry.change_time is None:
            inferred += 1
            if when is None:
                continue
            entry = entry.model_copy(update={"lastmod": when})
        timed.append(entry)
    timed.sort(key=lambda e: e.change_time)  # type: ignore[arg-type, return-value]
    return timed, inferred


@dataclass(frozen=True)
class ChangeListCursor:
    """The last change time passed on, and the changes passed on at exactly that time."""

    time: datetime | None = None
    seen: dict[str, int] = field(default_factory=dict)

    def new_entries(self, entries: Sequence[Entry]) -> list[Entry]:
        """Those of ``entries`` (in forward chronological order) not yet passed on."""
        if self.time is None:
            return list(entries)
        out: list[Entry] = []
        counts: dict[str, int] = {}
        for entry in entries:
            when = entry.change_time
            if when is None or when < self.time:
                continue
            if when == self.time:
                key = _key(entry)
                counts[key] = counts.get(key, 0) + 1
                if counts[key] <= self.seen.get(key, 0):
                    continue
            out.append(entry)
        return out

    def after(self, entries: Iterable[Entry]) -> ChangeListCursor:
        """The position once ``entries`` (in order, all new) have been passed on too."""
        time, seen = self.time, dict(self.seen)
        for entry in entries:
            when = entry.change_time
            if when is None:
                continue
            if time is None or when > time:
                time, seen = when, {}
            if when == time:
                key = _key(entry)
                seen[key] = seen.get(key, 0) + 1
        return ChangeListCursor(time, seen)

    def to_json(self) -> dict[str, Any]:
        return {
            "time": None if self.time is None else format_datetime(self.time),
            "seen": self.seen,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ChangeListCursor:
        if not data or not data.get("time"):
            return cls()
        return cls(
            parse_datetime(str(data["time"])),
            {str(k): int(v) for k, v in dict(data.get("seen") or {}).items()},
        )

"""Where a subscriber stands in a topic, and the rule that drops changes already delivered.

An :class:`EventCursor` holds three things:

- ``event_id``: the last hub event id delivered (push transports, and ``hub.since``);
- ``watermark``: the latest change time delivered, which a poller resumes from;
- ``recent``: the ``(loc, lastmod)`` keys of the latest deliveries (bounded), which is how
  a change that arrives twice by different transports, or from a plain Source that has no
  event ids, is recognised.
- ``applied``: the last event id handed over per resource (the latest resources, bounded),
  which judges a dead letter an operator replays (``X-RSHub-Replay``): its id is older than
  ``event_id``, so it is handed over only when newer than what was handed over for *its*
  resource; an old deletion never undoes a later creation.
- ``baseline_at``: the instant, on the hub's clock, before which the last baseline holds
  every change the hub received: an event received before it whose key the baseline
  remembered is held already (:meth:`EventCursor.seen`).

It is saved as JSON by :class:`EventCursorFile`, atomically and durably
(:mod:`rsclient.statefile`), so a restart resumes where the last save stopped. Saves
happen after the caller has handled a batch: delivery is at least once across crashes,
exactly once otherwise.

It is not the publisher's :class:`publisher.position.ChangeListCursor`, and why: the same
change reaches a subscriber by several transports and in any order, mostly carrying a hub
event id, so the cursor is "the last id, plus a bounded memory of recent keys" and a
duplicate is dropped whichever way it came; the bridge reads one Change List in change
time order with no ids, and must count what it passed on at its last change time.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from resourcesync import format_datetime, parse_datetime
from rsclient.exceptions import StateFileError
from rsclient.statefile import StateFile

from .events import ChangeEvent, event_order
from .exceptions import PositionError

__all__ = ["MAX_RECENT", "EventCursor", "EventCursorFile"]

#: How many recent ``(loc, lastmod, change)`` keys are remembered for de-duplication.
MAX_RECENT = 20_000

Key = tuple[str, str, str]

_VERSION = 2

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class EventCursor:
    """What a subscriber has delivered: the last hub event id, the watermark, recent keys."""

    event_id: str | None = None
    watermark: datetime | None = None
    recent: OrderedDict[Key, None] = field(default_factory=OrderedDict)
    #: loc -> the last event id handed over for it (at most :data:`MAX_RECENT`, latest kept).
    applied: OrderedDict[str, str] = field(default_factory=OrderedDict)
    #: Free-form facts the caller keeps with the position (e.g. "baseline done").
    extra: dict[str, Any] = field(default_factory=dict)
    #: The last baseline holds every change the hub received before this instant (on the
    #: hub's clock, that of its event ids); None: unknown, the ids alone decide.
    baseline_at: datetime | None = None

    def seen(self, event: ChangeEvent) -> bool:
        """Whether ``event`` was already delivered (by id, else by its :attr:`key`).

        A replayed dead letter is judged by its resource's last id instead of the topic's:
        stale when not newer than it. A resource not remembered (never handed over, or
        forgotten past :data:`MAX_RECENT`) takes it; a mirror checks a replayed deletion at
        the Source (:meth:`subscriber.mirror.Mirror.apply`).
        """
        if event.replayed and event.id is not None:
            order = event_order(event.id)
            known = self.applied.get(event.loc)
            held = None if known is None else event_order(known)
            if order is not None and held is not None and order <= held:
                return True
            return event.key in self.recent
        before = None if event.id is None else self._before_baseline(event.id)
        if before and event.key in self.recent:
            # Received before the baseline's instant and listed by it: the baseline holds
            # this state, or a later one (every later change has an id past the instant).
            return True
        if before is False and self.event_id is None:
            # Received after it, nothing delivered since: a change the baseline may lack,
            # even with the (loc, lastmod) it listed (a second update within that second).
            return False
        if event.id is not None and self.event_id is not None:
            new, last = event_order(event.id), event_order(self.event_id)
            if new is not None and last is not None:
                # The ids decide: a newer one is a change not delivered yet, even with a
                # (loc, lastmod) seen before. A publisher's lastmod has whole seconds (or a
                # clock that repeats itself): two updates of one resource within one of
                # them are two changes, and dropping the second left a mirror stale.
                return new <= last
            if event.id == self.event_id:
                return True
        return event.key in self.recent

    def record(self, event: ChangeEvent, *, now: datetime | None = None) -> None:
        """Note ``event`` as delivered (or as seen, for a duplicate).

        The watermark never moves past ``now``: a publisher's clock running ahead must not
        make a later poll skip changes.
        """
        if event.id is not None:
            new, last = event_order(event.id), None
            if self.event_id is not None:
                last = event_order(self.event_id)
            if last is None or new is None or new > last:
                self.event_id = event.id
            held = self.applied.get(event.loc)
            if held is None or new is None or (event_order(held) or (0, 0)) < new:
                self.applied[event.loc] = event.id
                self.applied.move_to_end(event.loc)
                while len(self.applied) > MAX_RECENT:
                    self.applied.popitem(last=False)
        self._note(event.key)
        when = min(event.when, now or datetime.now(UTC))
        if self.watermark is None or when > self.watermark:
            self.watermark = when

    def rebaselined(self, through: str) -> None:
        """A new baseline was made after event ``through`` was no longer listed: every
        change up to it is in the mirror, so the position moves on to it (never back)."""
        new = event_order(through)
        if new is None:
            return
        last = None if self.event_id is None else event_order(self.event_id)
        if last is None or new > last:
            self.event_id = through
        when = datetime.fromtimestamp(new[0] / 1000, UTC)
        if self.watermark is None or when > self.watermark:
            self.watermark = when

    def _before_baseline(self, event_id: str) -> bool | None:
        """Whether the hub received ``event_id`` before :attr:`baseline_at`: its whole
        millisecond before it (one within the same millisecond may have been stored after
        the baseline's snapshot was taken). None: unknown (no instant, an id without a
        time), and the ids decide as without a baseline."""
        order = event_order(event_id)
        if order is None or self.baseline_at is None:
            return None
        since_epoch = (self.baseline_at - _EPOCH) // timedelta(microseconds=1)
        return (order[0] + 1) * 1000 <= since_epoch

    def baselined(self, at: datetime | None) -> None:
        """A new baseline holds every change the hub received before ``at`` (None:
        unknown). It replaces the previous instant, even an earlier one: a re-baseline from
        an older snapshot made the mirror older than the previous baseline had."""
        self.baseline_at = at

    def remember(self, loc: str, lastmod: str) -> None:
        """Note a resource state as already held (e.g. from a baseline): a later creation
        or update announced with this ``lastmod`` is then a duplicate."""
        self._note((loc, lastmod, "created"))
        self._note((loc, lastmod, "updated"))

    def _note(self, key: Key) -> None:
        self.recent[key] = None
        self.recent.move_to_end(key)
        while len(self.recent) > MAX_RECENT:
            self.recent.popitem(last=False)

    def accept(self, event: ChangeEvent) -> bool:
        """Record ``event``; return True when it is new and must be delivered."""
        duplicate = self.seen(event)
        self.record(event)
        return not duplicate

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "event_id": self.event_id,
            "watermark": None if self.watermark is None else format_datetime(self.watermark),
            "recent": [list(key) for key in self.recent],
            "applied": [[loc, event_id] for loc, event_id in self.applied.items()],
            "extra": self.extra,
            "baseline_at": None if self.baseline_at is None else format_datetime(self.baseline_at),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> EventCursor:
        if obj.get("version") != _VERSION:
            raise ValueError(f"unknown position version {obj.get('version')!r:.40}")
        watermark, event_id = obj.get("watermark"), obj.get("event_id")
        baseline_at = obj.get("baseline_at")  # absent from files written before it was kept
        if baseline_at is not None and not isinstance(baseline_at, str):
            raise ValueError(f"baseline_at is a W3C datetime, not {baseline_at!r:.40}")
        if event_id is not None and not isinstance(event_id, str):
            raise ValueError(f"event_id is a string, not {event_id!r:.40}")
        return cls(
            event_id=event_id,
            watermark=None if watermark is None else parse_datetime(watermark),
            recent=OrderedDict(
                ((str(loc), str(lastmod), str(change)), None)
                for loc, lastmod, change in obj.get("recent", [])
            ),
            applied=OrderedDict(
                (str(loc), str(event_id)) for loc, event_id in obj.get("applied", [])
            ),
            extra=dict(obj.get("extra") or {}),
            baseline_at=None if baseline_at is None else parse_datetime(baseline_at),
        )


class EventCursorFile:
    """An :class:`EventCursor` kept in a JSON file, replaced atomically on every save."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = StateFile(path)
        self.path = self._file.path

    def load(self) -> EventCursor:
        """The saved cursor, or a fresh one if there is no file yet.

        Raises:
            PositionError: the file cannot be read or does not hold a cursor.
        """
        try:
            data = self._file.load()
        except StateFileError as exc:
            raise PositionError(f"{self.path}: corrupt position file: {exc}") from exc
        if data is None:
            return EventCursor()
        try:
            return EventCursor.from_json(data)
        except (ValueError, TypeError, KeyError) as exc:
            raise PositionError(f"{self.path}: corrupt position file: {exc}") from exc

    def save(self, cursor: EventCursor) -> None:
        """Replace the file with ``cursor``.

        Raises:
            PositionError: the file cannot be written; it keeps its previous content.
        """
        try:
            self._file.save(cursor.to_json())
        except StateFileError as exc:
            raise PositionError(str(exc)) from exc

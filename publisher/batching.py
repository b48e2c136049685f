"""Grouping queued changes into notifications: by count, by time, in order. No I/O.

:class:`Batcher` holds the changes waiting to be sent, in submission order. A batch is
*due* when it holds ``max_changes`` changes, when its oldest change has waited
``max_wait`` seconds, or when it cannot grow any more because the next queued change is
older than its newest one: a notification lists its changes in forward chronological
order (Z39.99 Section 12.1, enforced by the hub), so an out-of-order change starts a new
notification instead of being reordered. Submission order is never changed.

A :class:`Ticket` stands for one :meth:`Batcher.add` call; it collects the event ids of
its changes, which may travel in several batches, and resolves its future when all are
stored (or fails it on the first batch that fails).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from resourcesync import Entry

__all__ = ["Batch", "BatchPolicy", "Batcher", "Ticket"]


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """How many changes go into one notification, and how long a change may wait.

    ``BatchPolicy.off()`` sends every change on its own, as soon as it is submitted.
    """

    #: At most this many changes per notification (the hub's body limit is 10 MiB by
    #: default, about 40,000 simple changes).
    max_changes: int = 500
    #: Seconds the oldest queued change may wait for companions before it is sent.
    max_wait: float = 0.05

    def __post_init__(self) -> None:
        if not 1 <= self.max_changes <= 50_000:
            raise ValueError("max_changes must be between 1 and 50,000 (Sitemaps limit)")
        if self.max_wait < 0:
            raise ValueError("max_wait must not be negative")

    @classmethod
    def off(cls) -> BatchPolicy:
        """One change per notification, sent without waiting."""
        return cls(max_changes=1, max_wait=0.0)


class Ticket:
    """The outcome of one submission: the event ids of its changes, in order."""

    __slots__ = ("_remaining", "future", "ids")

    def __init__(self, count: int, future: asyncio.Future[list[str]]) -> None:
        self.ids: list[str] = [""] * count
        self._remaining = count
        self.future = future

    def stored(self, index: int, event_id: str) -> None:
        self.ids[index] = event_id
        self._remaining -= 1
        if self._remaining == 0 and not self.future.done():
            self.future.set_result(self.ids)

    def failed(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


@dataclass(frozen=True, slots=True)
class _Slot:
    ticket: Ticket
    index: int
    entry: Entry
    when: datetime | None
    queued_at: float


@dataclass(frozen=True, slots=True)
class Batch:
    """Changes to send together, with where each one's event id must go."""

    slots: tuple[_Slot, ...]

    @property
    def entries(self) -> list[Entry]:
        return [slot.entry for slot in self.slots]

    def __len__(self) -> int:
        return len(self.slots)

    def stored(self, ids: Sequence[str]) -> None:
        """Hand the hub's event ids (one per change, in order) to the tickets."""
        for slot, event_id in zip(self.slots, ids, strict=True):
            slot.ticket.stored(slot.index, event_id)

    def failed(self, exc: BaseException) -> None:
        for slot in self.slots:
            slot.ticket.failed(exc)


class Batcher:
    """The queue of unsent changes, cut into batches by :class:`BatchPolicy`.

    The head batch (what :meth:`take` would return) is tracked as changes are added, so
    :meth:`add` and :meth:`due` cost O(1) per change, :meth:`take` O(batch).
    """

    def __init__(self, policy: BatchPolicy) -> None:
        self.policy = policy
        self._queue: deque[_Slot] = deque()
        self._head = 0  # length of the head batch
        self._head_newest: datetime | None = None
        self._head_closed = False  # full, or followed by an out-of-order change

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, ticket: Ticket, entries: Sequence[Entry], now: float) -> None:
        for index, entry in enumerate(entries):
            slot = _Slot(ticket, index, entry, entry.change_time, now)
            self._queue.append(slot)
            self._grow_head(slot)

    def _grow_head(self, slot: _Slot) -> None:
        if self._head_closed:
            return
        when = slot.when
        if when is not None and self._head_newest is not None and when < self._head_newest:
            self._head_closed = True
            return
        self._head += 1
        if when is not None:
            self._head_newest = when
        if self._head >= self.policy.max_changes:
            self._head_closed = True

    def due(self, now: float, *, flushing: bool = False) -> bool:
        """Whether a batch should be sent now (``flushing``: anything queued is due)."""
        if not self._queue:
            return False
        return (
            flushing or self._head_closed or now - self._queue[0].queued_at >= self.policy.max_wait
        )

    def wait_time(self, now: float) -> float | None:
        """Seconds until the oldest queued change is due; ``None`` when nothing is queued."""
        if not self._queue:
            return None
        return max(0.0, self._queue[0].queued_at + self.policy.max_wait - now)

    def take(self) -> Batch:
        """Remove and return the next batch (empty when nothing is queued)."""
        batch = Batch(tuple(self._queue.popleft() for _ in range(self._head)))
        self._head, self._head_newest, self._head_closed = 0, None, False
        for slot in self._queue:
            self._grow_head(slot)
            if self._head_closed:
                break
        return batch

    def fail_all(self, exc: BaseException) -> int:
        """Fail every queued change's ticket with ``exc``; return how many changes."""
        count = len(self._queue)
        while self._queue:
            self._queue.popleft().ticket.failed(exc)
        self._head, self._head_newest, self._head_closed = 0, None, False
        return count

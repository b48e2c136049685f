"""The synchronization model's metrics, computed from two timelines (no I/O).

A *timeline* is the initial state of every resource and the changes after it, each change
being ``(time, uri, state)`` where ``state`` stands for the representation (a digest) or is
``None`` when the resource does not exist. The Source's timeline gives the lead states, a
Destination's the copy states. Definitions (as in the ResourceSync synchronization-model
experiments):

- *consistency* at time t: the fraction of resources whose copy state equals the lead
  state; the resources counted are those that exist at the Source or at the Destination
  at t (a copy of a deleted resource is out of sync, so is a missing copy). *Average
  consistency* is the mean of consistency sampled every ``step`` over an interval.
- *latency* of a change at the Source: the time from the change until the Destination's
  copy of that resource equals the lead state again (the state of that change, or of a
  later change that superseded it). A change never matched by the end of observation is
  *censored*: its latency is at least (end of observation - change time), and it counts
  with that lower bound, so that the slowest changes are not left out of the figures.
- *data transfer efficiency*: required bytes (the representations the Destination had to
  fetch to make the copy changes it made) ÷ all bytes it transferred.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Change",
    "Latencies",
    "average_consistency",
    "consistency_samples",
    "latencies",
    "percentile",
    "transfer_efficiency",
]


@dataclass(frozen=True, slots=True)
class Change:
    """The state of ``uri`` became ``state`` (``None``: absent) at time ``at``."""

    at: float
    uri: str
    state: str | None


@dataclass
class Latencies:
    """Latency of every Source change in the interval: ``values`` of the changes matched,
    ``censored`` lower bounds (end of observation - change time) of those never matched."""

    values: list[float] = field(default_factory=list)
    censored: list[float] = field(default_factory=list)

    @property
    def unsynced(self) -> int:
        return len(self.censored)

    def all(self) -> list[float]:
        """Every change's latency, a censored one as its lower bound."""
        return self.values + self.censored

    def mean(self) -> float:
        """The mean of :meth:`all` (a lower bound when some are censored)."""
        every = self.all()
        return sum(every) / len(every) if every else math.nan


_SOURCE, _DEST = 0, 1


def _merged(source: Sequence[Change], dest: Sequence[Change]) -> Iterator[tuple[int, Change]]:
    """Both timelines in time order; at equal times the Source's change comes first."""
    keyed_source = ((c.at, _SOURCE, i, c) for i, c in enumerate(sorted(source, key=_at)))
    keyed_dest = ((c.at, _DEST, i, c) for i, c in enumerate(sorted(dest, key=_at)))
    for _, side, _, change in heapq.merge(keyed_source, keyed_dest):
        yield side, change


def _at(change: Change) -> float:
    return change.at


class _Pair:
    """Lead and copy states, with the counts consistency needs kept up to date."""

    def __init__(self, source0: Mapping[str, str], dest0: Mapping[str, str]) -> None:
        self.states: tuple[dict[str, str], dict[str, str]] = (dict(source0), dict(dest0))
        self.present = len(source0.keys() | dest0.keys())
        self.in_sync = sum(1 for uri, state in source0.items() if dest0.get(uri) == state)

    def synced(self, uri: str) -> bool:
        lead, copy = self.states
        return lead.get(uri) == copy.get(uri)

    def _exists(self, uri: str) -> bool:
        return uri in self.states[_SOURCE] or uri in self.states[_DEST]

    def apply(self, side: int, change: Change) -> None:
        uri = change.uri
        was_present, was_synced = self._exists(uri), self.synced(uri)
        table = self.states[side]
        if change.state is None:
            table.pop(uri, None)
        else:
            table[uri] = change.state
        is_present, is_synced = self._exists(uri), self.synced(uri)
        self.present += is_present - was_present
        self.in_sync += (is_present and is_synced) - (was_present and was_synced)

    def consistency(self) -> float:
        return self.in_sync / self.present if self.present else 1.0


def consistency_samples(
    source0: Mapping[str, str],
    source: Sequence[Change],
    dest0: Mapping[str, str],
    dest: Sequence[Change],
    *,
    start: float,
    end: float,
    step: float,
) -> list[float]:
    """Consistency at ``start``, ``start + step``, ... up to ``end`` (changes at t count)."""
    if step <= 0 or end < start:
        raise ValueError("need step > 0 and end >= start")
    pair = _Pair(source0, dest0)
    times = [start + k * step for k in range(int((end - start) / step + 1e-9) + 1)]
    samples: list[float] = []
    events = _merged(source, dest)
    pending = next(events, None)
    for t in times:
        while pending is not None and pending[1].at <= t:
            pair.apply(*pending)
            pending = next(events, None)
        samples.append(pair.consistency())
    return samples


def average_consistency(
    source0: Mapping[str, str],
    source: Sequence[Change],
    dest0: Mapping[str, str],
    dest: Sequence[Change],
    *,
    start: float,
    end: float,
    step: float = 0.1,
) -> float:
    """Mean of :func:`consistency_samples` over ``[start, end]``."""
    samples = consistency_samples(source0, source, dest0, dest, start=start, end=end, step=step)
    return sum(samples) / len(samples)


def latencies(
    source0: Mapping[str, str],
    source: Sequence[Change],
    dest0: Mapping[str, str],
    dest: Sequence[Change],
    *,
    since: float = -math.inf,
    until: float = math.inf,
    observed_until: float | None = None,
) -> Latencies:
    """Latency of each Source change made in ``[since, until]``, as observed up to
    ``observed_until`` (default: the last change of either timeline); changes not in sync
    by then are censored there."""
    if observed_until is None:
        observed_until = max((c.at for c in (*source, *dest)), default=0.0)
    pair = _Pair(source0, dest0)
    waiting: dict[str, list[float]] = {}
    result = Latencies()
    for side, change in _merged(source, dest):
        if change.at > observed_until:
            break
        pair.apply(side, change)
        if side == _SOURCE and since <= change.at <= until:
            waiting.setdefault(change.uri, []).append(change.at)
        if pair.synced(change.uri):
            for at in waiting.pop(change.uri, ()):
                result.values.append(change.at - at)
    result.censored = sorted(observed_until - at for ats in waiting.values() for at in ats)
    return result


def transfer_efficiency(required: int, total: int) -> float:
    """Required bytes ÷ total bytes transferred (NaN when nothing was transferred)."""
    return required / total if total else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1), linearly interpolated between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

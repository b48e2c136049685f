"""Resources whose fetch failed, kept with the position and retried with back-off.

A fetch that fails after the mirror's own quick retries (the Source down, a 5xx) would
otherwise be lost until the resource changes again. Each failed URI keeps what is needed
to fetch and check it again (``length``, ``hash``), how often it failed, and when to try
next: after 1 s, then twice as long each time, at most :data:`MAX_DELAY` seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rsclient.backoff import Backoff

__all__ = ["MAX_DELAY", "FailedFetch", "FailedFetches"]

#: Longest wait between two retries of one resource, in seconds.
MAX_DELAY = 300.0
#: 1 s, doubling, at most :data:`MAX_DELAY`; no jitter (each resource has its own times).
_BACKOFF = Backoff(base=1.0, cap=MAX_DELAY, jitter=0.0)


@dataclass
class FailedFetch:
    length: int | None
    hash: str | None
    attempts: int = 1
    #: ``time.time()`` of the next retry (wall clock: it survives restarts).
    next: float = 0.0


class FailedFetches:
    def __init__(self) -> None:
        self.items: dict[str, FailedFetch] = {}

    def __len__(self) -> int:
        return len(self.items)

    def failed(self, loc: str, length: int | None, hash: str | None) -> None:
        """Note one more failure of ``loc`` and schedule its next retry."""
        known = self.items.get(loc)
        attempts = 1 if known is None else known.attempts + 1
        delay = _BACKOFF.delay(attempts)
        self.items[loc] = FailedFetch(length, hash, attempts, time.time() + delay)

    def succeeded(self, loc: str) -> None:
        self.items.pop(loc, None)

    def due(self, *, now: float | None = None) -> dict[str, FailedFetch]:
        """Those whose retry time has come (``now=inf``: all of them)."""
        now = time.time() if now is None else now
        return {loc: f for loc, f in self.items.items() if f.next <= now}

    def next_due(self) -> float | None:
        return min((f.next for f in self.items.values()), default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            loc: {"length": f.length, "hash": f.hash, "attempts": f.attempts, "next": f.next}
            for loc, f in self.items.items()
        }

    @classmethod
    def from_json(cls, data: Any) -> FailedFetches:
        out = cls()
        for loc, f in dict(data or {}).items():
            out.items[str(loc)] = FailedFetch(
                length=None if f.get("length") is None else int(f["length"]),
                hash=f.get("hash"),
                attempts=int(f.get("attempts", 1)),
                next=float(f.get("next", 0.0)),
            )
        return out

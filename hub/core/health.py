"""What ``/healthz`` says about Redis, without making every probe wait on Redis.

Redis runs one command at a time: while a large publish's append script runs (about a
second for 50,000 changes), a ``PING`` waits behind it. A health probe that pinged on every
request would then take that long and report a busy Redis as if the hub were stuck. So a
background loop pings Redis about once a second and records the outcome here; ``/healthz``
answers from a recent success at once, and pings itself only when the last outcome was a
failure or is older than ``fresh_seconds`` (so an outage and a recovery show at once).
A failed storage call anywhere in the hub counts as a failure too. The background ping
waits up to :data:`PING_TIMEOUT` (a busy Redis is not a dead one; Redis itself calls a
script "busy" only after 5 s), so a hung Redis shows within about that long.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds the background ping waits for Redis before it counts as failed.
PING_TIMEOUT = 5.0


@dataclass(slots=True)
class RedisHealth:
    #: How long a successful ping vouches for Redis (pings start every second).
    fresh_seconds: float = PING_TIMEOUT + 1.0
    ok_at: float | None = None
    error: str | None = None

    def succeeded(self, now: float) -> None:
        self.ok_at, self.error = now, None

    def failed(self, error: str) -> None:
        self.error = error

    def vouched(self, now: float) -> bool:
        """True when a recent success says Redis is fine and nothing failed since."""
        return (
            self.error is None and self.ok_at is not None and now - self.ok_at < self.fresh_seconds
        )

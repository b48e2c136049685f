"""A per-subscription delivery rate limit: a token bucket, sans I/O.

A limit is *deliveries (POSTs) per second* plus a *burst* (the most POSTs sent back to back
after a quiet spell). A worker that has no token waits for one, and the events published
meanwhile go out together in its next, bigger batch: the limit shapes deliveries, it never
drops a change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hub.core.exceptions import BadRequest

#: Bounds of a limit (a rate of 0 means none): a tenth of a POST per minute to 10,000/s.
MIN_RATE = 1 / 600
MAX_RATE = 10_000.0
MAX_BURST = 10_000


@dataclass(frozen=True, slots=True)
class RateLimit:
    per_second: float
    burst: int

    @property
    def unlimited(self) -> bool:
        return self.per_second <= 0


def check(per_second: float, burst: int, what: str) -> RateLimit:
    """A valid :class:`RateLimit`, or 400 naming ``what``."""
    if not math.isfinite(per_second) or not (per_second == 0 or MIN_RATE <= per_second <= MAX_RATE):
        raise BadRequest(
            f"{what}: deliveries per second must be 0 (no limit) or between "
            f"{MIN_RATE:.4f} and {MAX_RATE:g}, got {per_second!r}"
        )
    if not 1 <= burst <= MAX_BURST:
        raise BadRequest(f"{what}: burst must be a whole number from 1 to {MAX_BURST}")
    return RateLimit(per_second, burst)


def parse(text: str, what: str = "hub.rate_limit") -> RateLimit:
    """``"<per second>"`` or ``"<per second>,<burst>"`` (burst: the rate rounded up, at
    least 1, when not given); 400 naming ``what`` otherwise."""
    rate_text, _, burst_text = text.strip().partition(",")
    try:
        if not text.isascii() or len(text) > 40:
            raise ValueError
        per_second = float(rate_text)
        burst = int(burst_text) if burst_text.strip() else max(1, math.ceil(per_second))
    except (ValueError, OverflowError):
        raise BadRequest(
            f"{what} must be <deliveries per second>[,<burst>], e.g. 2 or 0.5,3, got {text[:40]!r}"
        ) from None
    return check(per_second, burst, what)


class TokenBucket:
    """Tokens refill at ``limit.per_second`` up to ``limit.burst``; each POST takes one.

    Times are the caller's monotonic clock, so the bucket is pure and testable.
    """

    def __init__(self, limit: RateLimit, now: float) -> None:
        self.limit = limit
        self.tokens = float(limit.burst)
        self.at = now

    def _refill(self, now: float) -> None:
        if now > self.at:
            gained = (now - self.at) * self.limit.per_second
            self.tokens = min(float(self.limit.burst), self.tokens + gained)
        self.at = max(self.at, now)

    def delay(self, now: float) -> float:
        """Seconds until a token is available (0: one is)."""
        if self.limit.unlimited:
            return 0.0
        self._refill(now)
        if self.tokens >= 1:
            return 0.0
        return (1 - self.tokens) / self.limit.per_second

    def take(self, now: float) -> None:
        """Spend a token (the caller waited :meth:`delay` first)."""
        if self.limit.unlimited:
            return
        self._refill(now)
        self.tokens = max(0.0, self.tokens - 1)

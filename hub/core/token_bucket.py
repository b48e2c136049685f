"""Token buckets: a rate with a burst, as pure arithmetic on a clock the caller passes.

:class:`TokenBucket` is one bucket; :class:`TokenBuckets` keeps one per key (a client
address: publish pings) in bounded memory: a bucket that has refilled completely is the same
as no bucket, so idle keys are dropped, and past ``max_keys`` the least recently used one
goes too. :class:`RateLimit` is a subscription's delivery limit: *deliveries (POSTs) per
second* plus a *burst*; a worker that has no token waits for one, and the events published
meanwhile go out together in its next, bigger batch: the limit shapes deliveries, it never
drops a change.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from hub.core.exceptions import BadRequest

#: Bounds of a delivery limit (a rate of 0 means none): a POST per 10 minutes to 10,000/s.
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

    def bucket(self, now: float) -> TokenBucket | None:
        """A full bucket for this limit, or None when there is no limit."""
        return None if self.unlimited else TokenBucket(self.per_second, self.burst, now)


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
    """``burst`` tokens at most, refilled at ``rate`` per second; each take costs one."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: float, now: float = 0.0) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.stamp = now

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)  # a clock that steps back grants nothing

    def take(self, now: float) -> float:
        """Take a token: 0 when granted, else the seconds until one is available (nothing
        is taken then)."""
        self._refill(now)
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate

    def refund(self) -> None:
        """Give back the token of a :meth:`take` whose delivery did not start after all."""
        self.tokens = min(self.burst, self.tokens + 1)

    def full(self, now: float) -> bool:
        """Refilled to its burst by ``now``: forgetting it changes nothing."""
        return self.tokens + max(0.0, now - self.stamp) * self.rate >= self.burst


class TokenBuckets:
    """One :class:`TokenBucket` per key, at most ``max_keys`` of them."""

    def __init__(self, rate: float, burst: float, *, max_keys: int = 100_000) -> None:
        self.rate, self.burst, self.max_keys = rate, burst, max_keys
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        #: A bucket refills completely within this many seconds of its last take.
        self._idle_after = burst / rate
        self._swept = 0.0

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str, now: float) -> float:
        """:meth:`TokenBucket.take` on ``key``'s bucket (a new key starts full)."""
        self._sweep(now)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.take(now)

    def _sweep(self, now: float) -> None:
        """Drop full buckets, oldest first, at most once per refill period (amortised)."""
        if now - self._swept < self._idle_after:
            return
        self._swept = now
        for key in [k for k, b in self._buckets.items() if b.full(now)]:
            del self._buckets[key]

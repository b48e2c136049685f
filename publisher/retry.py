"""When to try a publish again: capped exponential back-off with jitter. No I/O.

The delays are :class:`rsclient.backoff.Backoff`'s, the one back-off policy of rshub.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from rsclient.backoff import Backoff

__all__ = ["RetryPolicy", "is_retryable_status"]

#: Answers after which the same request may succeed later: timeouts, throttling, the hub
#: or its Redis failing. Every other 4xx means the request itself is wrong.
_RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})
#: 5xx answers that no retry changes: the server does not do this at all (501 Not
#: Implemented, 505 HTTP Version Not Supported), as a server that is no hub answers a POST.
_NEVER = frozenset({501, 505})


def is_retryable_status(status: int) -> bool:
    return status in _RETRYABLE or (status >= 500 and status not in _NEVER)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The publisher's retry settings: the back-off between attempts (``base *
    factor**(attempt-1)``, capped, with jitter) and how long to keep trying.

    The jitter draws each delay uniformly from ``[(1-jitter)*d, d]`` so that many
    publishers cut off by the same outage do not come back in lock-step. A ``Retry-After``
    the hub sends with a 429 or 503 lengthens a delay, up to ``max_delay``.
    """

    #: First delay, in seconds.
    base: float = 0.2
    #: Growth per attempt.
    factor: float = 2.0
    #: Longest delay, in seconds.
    max_delay: float = 30.0
    #: Fraction of each delay that is random (0 = none, 1 = "full jitter").
    jitter: float = 0.5
    #: Give up on a notification after this many seconds of failures (``None``: never,
    #: the bounded queue then tells callers that the hub is down).
    give_up_after: float | None = None
    #: Give up after this many attempts in a row that could not connect at all (``None``:
    #: no such limit). A hub that refuses connections is down, not busy: a one-shot
    #: command says so after one quick retry instead of waiting out ``give_up_after``.
    unreachable_attempts: int | None = None

    def __post_init__(self) -> None:
        if self.base <= 0 or self.factor < 1 or self.max_delay < self.base:
            raise ValueError("need base > 0, factor >= 1 and max_delay >= base")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")
        if self.unreachable_attempts is not None and self.unreachable_attempts < 1:
            raise ValueError("unreachable_attempts must be at least 1")

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.base, self.max_delay, factor=self.factor, jitter=self.jitter)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 = the first)."""
        return self.backoff.delay(attempt, rng=rng)

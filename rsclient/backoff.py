"""How long to wait before trying again, and the client side's one retrying loop.

:class:`Backoff` is the back-off policy of every loop in rshub that retries (hub and
clients alike): a pure, immutable value, capped exponential growth with jitter, which also
honours a server's ``Retry-After`` (:func:`parse_retry_after`, both forms of RFC 9110
§10.2.3). :class:`Retrier` is the client side's retrying loop (the publisher's POST, the
subscriber's and the publisher's reconnecting streams, the mirror's fetches); the hub's
background loops use :func:`hub.core.retrying.retrying`, built on it.

Pure asyncio: importing this module pulls in no aiohttp (an import-linter contract keeps
it so), so the hub's pure layers may use it.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = [
    "EQUAL_JITTER",
    "Backoff",
    "Retrier",
    "parse_retry_after",
    "parse_retry_hint",
    "retry_hint",
]

#: Jitter that draws each delay from the upper half of its ceiling ("equal jitter"): spread
#: enough that clients cut off by one outage do not come back in lock-step, never shorter
#: than half the exponential delay.
EQUAL_JITTER = 0.5
#: Longest ``Retry-After`` :func:`parse_retry_after` returns unless told a lower cap.
MAX_RETRY_AFTER = 86400.0
#: Digits of a delta-seconds value beyond which it is "very long" (``int()`` of thousands
#: of digits is slow, and raises past 4300).
_MAX_DIGITS = 12
#: How a hub's message (a WebSocket close reason, an SSE ``data:`` line) asks its client to
#: wait before it reconnects: written by the hub (:func:`retry_hint`), read by the clients
#: (:func:`parse_retry_hint`), one format for both.
_RETRY_HINT = re.compile(r"(?:^|; )retry after (\d{1,6}(?:\.\d{1,3})?) s(?:;|$)")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential back-off with jitter: ``base * factor**(attempt-1)``, at most
    ``cap``, of which the fraction ``jitter`` is random."""

    #: First delay, in seconds.
    base: float
    #: Longest delay, in seconds (a ``Retry-After`` too is cut to it).
    cap: float
    #: Growth per attempt.
    factor: float = 2.0
    #: Fraction of each delay that is random: 0 none, 0.5 "equal jitter", 1 "full jitter".
    jitter: float = EQUAL_JITTER

    def __post_init__(self) -> None:
        numbers = (self.base, self.cap, self.factor, self.jitter)
        if not all(math.isfinite(n) for n in numbers):
            raise ValueError("back-off needs finite numbers")
        if self.base <= 0 or self.cap <= 0 or self.factor < 1:
            raise ValueError("back-off needs base > 0, cap > 0 and factor >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("back-off jitter must be between 0 and 1")

    def ceiling(self, attempt: int) -> float:
        """The delay after failed attempt number ``attempt`` (1 = the first), unjittered."""
        exponent = min(max(attempt, 1) - 1, 64)
        return min(self.cap, self.base * self.factor**exponent)

    def delay(
        self,
        attempt: int,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 = the first).

        A ``retry_after`` the server asked for (:func:`parse_retry_after`) lengthens the
        delay to it, never beyond ``cap``; ``rng`` makes the jitter reproducible.
        """
        ceiling = self.ceiling(attempt)
        delay = ceiling * (1 - self.jitter * (rng or random).random()) if self.jitter else ceiling
        if retry_after is not None and retry_after > delay:  # NaN is not
            delay = min(retry_after, self.cap)
        return delay


def parse_retry_after(
    value: str | None, now: float | None = None, *, cap: float = MAX_RETRY_AFTER
) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait, at most ``cap``; ``None`` if absent
    or not understood.

    Both forms of RFC 9110 §10.2.3: delta-seconds (ASCII digits only) and an HTTP-date
    (the obsolete RFC 850 and asctime forms too, as §5.6.7 asks recipients), measured from
    ``now`` (``time.time()``); a date in the past means "now" (0). Never raises, whatever
    the header holds.
    """
    text = (value or "").strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        return cap if len(text) > _MAX_DIGITS else min(float(text), cap)
    try:
        when = parsedate_to_datetime(text)
        at = when.timestamp() if when.tzinfo else when.replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None
    seconds = at - (time.time() if now is None else now)
    return min(max(seconds, 0.0), cap)


def retry_hint(seconds: float) -> str:
    """The words that ask a client to wait ``seconds`` before it reconnects (centiseconds:
    a client's own clock is no finer)."""
    return f"retry after {max(seconds, 0.0):.2f} s"


def parse_retry_hint(message: str | None, *, cap: float = MAX_RETRY_AFTER) -> float | None:
    """Seconds a hub's message asks to wait (:func:`retry_hint`, one of its ``;``-separated
    parts), at most ``cap``; ``None`` when it asks nothing. Never raises."""
    match = _RETRY_HINT.search(message or "")
    return None if match is None else min(float(match.group(1)), cap)


class Retrier:
    """One retrying loop's state: ``async for attempt in Retrier(policy): ...``.

    Each iteration is one attempt (numbered from 1). The body reports a failure with
    :meth:`failed`, which returns the delay the next iteration will wait (log it), or
    ``None`` when ``attempts`` or ``give_up_after`` are spent: then the iteration ends
    (the body usually raises instead). A body that goes round again without reporting a
    failure tries again at once (a resumable disconnect). :meth:`succeeded` starts the
    back-off over: a reconnecting stream calls it whenever data flows.
    """

    def __init__(
        self,
        policy: Backoff,
        *,
        attempts: int | None = None,
        give_up_after: float | None = None,
        failures: int = 0,
        rng: random.Random | None = None,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: The policy of the next delay; a loop may swap it (a server's SSE ``retry``).
        self.policy = policy
        self.attempts = attempts
        self.give_up_after = give_up_after
        #: Consecutive failures (the back-off's exponent); ``failures`` continues an
        #: earlier one, such as a delivery's saved count.
        self.failures = failures
        #: Attempts started.
        self.attempt = 0
        self.rng = rng
        self._pause = pause
        self._clock = clock
        self._started = clock()
        self._delay: float | None = 0.0

    @property
    def elapsed(self) -> float:
        """Seconds since the loop started, or since its last success."""
        return self._clock() - self._started

    def failed(self, retry_after: float | None = None) -> float | None:
        """Count a failure; the seconds to wait before the next attempt, or ``None``."""
        self.failures += 1
        delay = self.policy.delay(self.failures, retry_after, self.rng)
        spent = self.attempts is not None and self.attempt >= self.attempts
        late = self.give_up_after is not None and self.elapsed + delay > self.give_up_after
        self._delay = None if spent or late else delay
        return self._delay

    def succeeded(self) -> None:
        self.failures = 0
        self._started = self._clock()

    def __aiter__(self) -> Retrier:
        return self

    async def __anext__(self) -> int:
        delay, self._delay = self._delay, 0.0
        if delay is None:
            raise StopAsyncIteration
        if self.attempt and delay > 0:
            await self._pause(delay)
        self.attempt += 1
        return self.attempt

"""The hub's one retrying loop, for its background work: call until it succeeds.

Used while Redis is away (the feed's tail, following subscription changes, cursor writes,
storing a verified subscription) and to respawn the embedded Redis. Delays come from a
:class:`rsclient.backoff.Backoff`; the counting and giving up from a
:class:`rsclient.backoff.Retrier`. (A WebSub delivery worker keeps its own loop over the
same policy: its failure count, error and retry time are saved with the subscription at
each failure, so whichever process owns it next continues the back-off.) Pure asyncio:
no aiohttp, no redis.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rsclient.backoff import Backoff, Retrier

__all__ = ["STORE_OUTAGE", "retrying"]

T = TypeVar("T")

#: Between attempts of a background loop while Redis is away: 0.1 s, doubling, at most
#: 5 s. No jitter: the retries of one process are few and cheap for a Redis coming back.
STORE_OUTAGE = Backoff(base=0.1, cap=5.0, jitter=0.0)


async def retrying(
    attempt: Callable[[], Awaitable[T]],
    policy: Backoff,
    *,
    retry_on: type[Exception] | tuple[type[Exception], ...],
    log: logging.Logger | None,
    what: str = "",
    failed: Callable[[Exception, float], Awaitable[None] | None] | None = None,
    failures: int = 0,
    patience: float | None = None,
    pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """``await attempt()`` until it returns; after each ``retry_on`` error, back off.

    Each failure is logged on ``log`` as a warning ("``what`` failed (error); retrying in
    N s"; ``log=None``: not at all) and reported to ``failed(error, delay)`` (awaited if it
    returns an awaitable) before the ``pause``. An error with a ``retry_after`` attribute
    (seconds, or ``None``) lengthens its delay to it, up to the policy's cap. ``failures``
    continues a back-off counted elsewhere. Once the next attempt would start more than
    ``patience`` seconds after the first, the last error is raised; any other error at once.
    """
    retrier = Retrier(policy, failures=failures, give_up_after=patience, rng=rng, pause=pause)
    async for _ in retrier:
        try:
            return await attempt()
        except retry_on as exc:
            retry_after = getattr(exc, "retry_after", None)
            delay = retrier.failed(retry_after if isinstance(retry_after, float) else None)
            if delay is None:
                raise
            if log is not None:
                log.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
            noted = None if failed is None else failed(exc, delay)
            if noted is not None:
                await noted
    raise AssertionError("a Retrier without a limit of attempts never ends")

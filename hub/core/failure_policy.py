"""What a failed WebSub delivery leads to: retry, dead letter, disable, or the end.

Pure data, so every rule is tested without a socket or a clock:

* ``410 Gone`` ends the subscription (:attr:`Verdict.GONE`).
* Any other failure is retried with back-off and jitter (``Retry-After`` honoured, capped).
* **Strikes** count toward suspension: one per failure, :data:`CLIENT_ERROR_STRIKES` for a
  4xx other than 408 and 429 (the callback understood the request and refused it, which a
  retry rarely mends). At ``suspend_after`` strikes the subscription is suspended: probed
  at the longest back-off until a 2xx.
* **429 and 503** ask the hub to wait (``Retry-After``): they add no strike and restart
  the disable clock, so a callback that sheds load is never suspended or disabled for it.
* A batch whose first failure is at least ``window`` seconds old when it fails again is
  **dead-lettered** (:attr:`Verdict.DEAD_LETTER`): moved aside, and the next batch is
  tried at once.
* A failure that counts, at least ``disable_after`` seconds after the first counted failure
  since the last 2xx (or 429/503), **disables** the subscription (:attr:`Verdict.DISABLE`):
  no more deliveries until it is re-subscribed or resumed by an operator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import StrEnum

from rsclient.backoff import Backoff

__all__ = ["CLIENT_ERROR_STRIKES", "WAIT_STATUSES", "Decision", "FailurePolicy", "Track", "Verdict"]

#: Strikes a 4xx answer other than 408, 410 and 429 counts toward suspension (others: 1).
CLIENT_ERROR_STRIKES = 5
#: Answers that ask the hub to wait: no strike, and the disable clock restarts.
WAIT_STATUSES = frozenset({429, 503})


class Verdict(StrEnum):
    RETRY = "retry"
    DEAD_LETTER = "dead-letter"
    DISABLE = "disable"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class Track:
    """A subscription's failure record, saved with it so a new owner continues it."""

    #: Failed attempts since the last 2xx (the back-off's exponent).
    failures: int = 0
    #: Weighted failures since the last 2xx, toward suspension.
    strikes: int = 0
    #: First counted failure since the last 2xx, 429 or 503 (epoch seconds; 0 = none).
    failing_since: float = 0.0
    #: First failure of the batch now in flight (epoch seconds; 0 = none).
    batch_failing_since: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    #: The record after this failure (a dead letter starts the next batch's window afresh).
    track: Track
    #: Seconds before the next attempt (0 after a dead letter: the next batch goes at once).
    delay: float
    #: Whether the subscription is (now) suspended.
    suspended: bool


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    backoff: Backoff
    #: Seconds a batch is retried, from its first failure, before it is dead-lettered.
    window: float
    #: Seconds of counted failures, from the first since the last 2xx, before disabling.
    disable_after: float
    #: Strikes at which the subscription is suspended.
    suspend_after: int

    @staticmethod
    def strikes(status: int | None) -> int:
        """What an answer (``None``: no answer, a timeout, a broken one) counts."""
        if status in WAIT_STATUSES:
            return 0
        if status is not None and 400 <= status < 500 and status != 408:
            return CLIENT_ERROR_STRIKES
        return 1

    def suspended(self, track: Track) -> bool:
        return track.strikes >= self.suspend_after

    def decide(
        self,
        track: Track,
        status: int | None,
        now: float,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> Decision:
        """The outcome of a failed attempt at ``now``; ``status`` is the callback's answer
        (``None`` without one) and ``retry_after`` its parsed ``Retry-After``."""
        if status == 410:
            return Decision(Verdict.GONE, track, 0.0, self.suspended(track))
        counted = self.strikes(status)
        after = Track(
            failures=track.failures + 1,
            strikes=track.strikes + counted,
            failing_since=(track.failing_since or now) if counted else 0.0,
            batch_failing_since=track.batch_failing_since or now,
        )
        suspended = self.suspended(after)
        if counted and now - after.failing_since >= self.disable_after:
            return Decision(Verdict.DISABLE, after, 0.0, suspended)
        if now - after.batch_failing_since >= self.window:
            return Decision(
                Verdict.DEAD_LETTER, replace(after, batch_failing_since=0.0), 0.0, suspended
            )
        # Suspended: probed at the longest back-off (the exponent is capped in Backoff).
        attempt = 64 if suspended else after.failures
        delay = self.backoff.delay(attempt, retry_after, rng)
        return Decision(Verdict.RETRY, after, delay, suspended)

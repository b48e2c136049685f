"""What a client dropped as too slow is told: where to resume, and when to come back.

A publish storm drops every lagging client of a topic within moments. Told only "too
slow", they all reconnected at once, replayed the same history side by side and lagged
again. Each is now told where to resume and a wait drawn for it alone, uniformly over
``lag_retry_spread_seconds``, so that the clients one storm drops come back spread over that
window. A WebSocket client gets close code :data:`TRY_AGAIN_LATER` with the reason
:func:`ws_reason` (``too slow; resume with since=<id>; retry after <seconds> s``); the words
of the wait are :func:`rsclient.backoff.retry_hint`'s, which the hub's own clients read back.
"""

from __future__ import annotations

import random

from hub.core.frames import CLOSE_REASON_BYTES
from rsclient.backoff import retry_hint

#: The WebSocket close code of a client dropped as too slow (RFC 6455 §7.4.1: "Try Again
#: Later"), which reconnecting clients know as a passing condition.
TRY_AGAIN_LATER = 1013


def retry_after(spread: float, rng: random.Random | None = None) -> float:
    """A client's wait before it reconnects: uniform over ``[0, spread]`` seconds, drawn for
    it alone (``rng``: reproducible draws)."""
    return (rng or random).uniform(0.0, spread) if spread > 0 else 0.0


def ws_reason(resume_id: str, wait: float) -> str:
    """The close reason of a WebSocket client dropped as too slow: the id to resume from
    (``since=``) and the wait. An event id is at most 41 characters, so the reason stays
    within the :data:`CLOSE_REASON_BYTES` a close frame can carry; a stream of several
    topics' composite id may not, and then the client is told to resume from the id of the
    last message it read (each message carries it)."""
    reason = f"too slow; resume with since={resume_id}; {retry_hint(wait)}"
    if len(reason.encode()) > CLOSE_REASON_BYTES:
        reason = f"too slow; resume with since=<the id of the last message>; {retry_hint(wait)}"
    return reason

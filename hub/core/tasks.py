"""Stopping background tasks without ever hanging shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None], timeout: float = 5.0) -> None:
    """Cancel ``tasks`` and wait up to ``timeout`` for them to end.

    A task that swallows its cancellation (a client library catching it mid-call, say) is
    reported and left behind rather than blocking the hub's shutdown forever.
    """
    given = [t for t in tasks if t is not None]
    pending = {t for t in given if not t.done()}
    for task in pending:
        task.cancel()
    done, stuck = await asyncio.wait(pending, timeout=timeout) if pending else (set(), set())
    # Retrieve every ending exception (also of tasks that were done before), so none is
    # reported later as "never retrieved"; e.g. a write to a client that went away.
    for task in (*done, *(t for t in given if t not in pending)):
        if not task.cancelled() and task.exception() is not None:
            log.debug("task %s ended with %r", task.get_name(), task.exception())
    for task in stuck:
        log.warning("task %s did not stop within %.1fs; leaving it", task.get_name(), timeout)

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
    pending = {t for t in tasks if t is not None and not t.done()}
    for task in pending:
        task.cancel()
    if not pending:
        return
    done, stuck = await asyncio.wait(pending, timeout=timeout)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.debug("task %s ended with %r", task.get_name(), task.exception())
    for task in stuck:
        log.warning("task %s did not stop within %.1fs; leaving it", task.get_name(), timeout)

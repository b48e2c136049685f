"""Waiting to be woken, or for a timeout, without a task per wait.

``asyncio.wait_for(event.wait(), timeout)`` makes a task for every wait. The feed's
delivery workers wait once per batch, every live client once per batch it is handed, and
every multi-topic sender once per round: at thousands of clients those tasks were a
measurable share of each publish's fan-out. Each of them waits instead on a bare future
that whoever has news completes (:func:`wake`), and one timer handle completes it first
when the time is up (:func:`wait`).
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


def wake(waiter: asyncio.Future[T], value: T) -> None:
    """Complete ``waiter`` with ``value`` unless it is done already (woken, timed out or
    cancelled): a producer need not know whether anyone still waits."""
    if not waiter.done():
        waiter.set_result(value)


async def wait(waiter: asyncio.Future[T], timeout: float | None, expired: T) -> T:
    """Wait for ``waiter``: the value it was woken with, or ``expired`` when ``timeout``
    seconds passed first (None: no timeout). The caller keeps ``waiter`` where producers
    find it, and forgets it afterwards."""
    timer = None
    if timeout is not None:
        timer = asyncio.get_running_loop().call_later(timeout, wake, waiter, expired)
    try:
        return await waiter
    finally:
        if timer is not None:
            timer.cancel()

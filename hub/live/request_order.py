"""The latest WebSub request for a subscription wins, whatever order verifications end in.

The hub verifies (un)subscription requests concurrently, each waiting for its callback's
answer. A subscribe answered just before the subscriber's unsubscribe could reach the store
after it and revive what the subscriber had just ended (seen when ``rshub subscribe`` is
stopped right after subscribing). So requests are numbered as they arrive, storing is one
at a time per subscription, and a verified request is dropped once a later one for the same
subscription was stored.

Within one process: two requests for one subscription that reach two hub processes are
stored in the order their verifications end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from hub.core.placement import SubscriptionKey


@dataclass(slots=True)
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Requests that arrived and have not ended yet.
    pending: int = 0
    #: The arrival number of the newest request stored.
    stored: int = -1


class RequestOrder:
    """Arrival numbers and per-subscription store turns, kept only while requests are open."""

    def __init__(self) -> None:
        self._numbers = itertools.count()
        self._slots: dict[SubscriptionKey, _Slot] = {}

    def __len__(self) -> int:
        """Subscriptions with a request still open (bounded by the requests in flight)."""
        return len(self._slots)

    def arrived(self, key: SubscriptionKey) -> int:
        """Number a request as it is accepted; :meth:`ended` must follow, whatever happens."""
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot()
        slot.pending += 1
        return next(self._numbers)

    def ended(self, key: SubscriptionKey) -> None:
        slot = self._slots[key]
        slot.pending -= 1
        if slot.pending == 0:
            del self._slots[key]

    @contextlib.asynccontextmanager
    async def turn(self, key: SubscriptionKey, number: int) -> AsyncIterator[bool]:
        """Hold the subscription's store turn; yields False when a later request was
        stored already (store nothing). The request counts as stored if the block ends
        without an exception."""
        slot = self._slots[key]
        async with slot.lock:
            if slot.stored > number:
                yield False
                return
            yield True
            slot.stored = number

"""Reports this process's live stream clients per topic to Redis (:mod:`hub.store.presence`).

Counting happens where clients connect and leave (:class:`hub.core.presence.StreamCounts`);
this task only wakes on a change (after ``delay``, so a burst of connections is one write)
and every ``every`` seconds, to keep the report from expiring. A failed write is retried on
the next wake-up: presence is for people looking, never worth blocking anything for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from hub.core.presence import StreamCounts
from hub.core.tasks import Tasks
from hub.store.presence import PresenceStore
from hub.store.redis_connection import StoreError

log = logging.getLogger(__name__)


class PresenceReporter:
    def __init__(
        self,
        counts: StreamCounts,
        store: PresenceStore,
        node: str,
        tasks: Tasks,
        *,
        every: float,
        delay: float,
    ) -> None:
        self.counts = counts
        self.store = store
        self.node = node
        self.tasks = tasks
        self.every = every
        self.delay = delay
        self._changed = asyncio.Event()
        counts.on_change = self._changed.set

    def start(self) -> None:
        self.tasks.spawn("presence", self._run())

    async def _run(self) -> None:
        while not self.tasks.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.every)
                await asyncio.sleep(self.delay)
            self._changed.clear()
            try:
                await self.store.report(
                    self.node, self.counts.snapshot(), int(self.every * 3000) + 1000
                )
            except StoreError as exc:
                log.info("presence report failed (next one follows): %s", exc)

    async def close(self) -> None:
        """Stop reporting, and take this process's report back (its clients are gone)."""
        await self.tasks.stop()
        self.counts.on_change = None
        with contextlib.suppress(StoreError):
            await self.store.report(self.node, {}, 1000)

"""Paged Resource List snapshots, taken in the background while the last one is served.

Taking a snapshot of a big topic reads and renders the whole fold: a 1,000,000-URI topic
took 34 s, longer than most HTTP clients wait. So a reader never waits for one when an
earlier snapshot can still be served: it gets that one at once (its index says its ``at``
and ``completed``, so a Destination knows its age and applies the Change Lists from
``at``), and the next is taken in a task of the runtime's ``snapshots`` group, one per
topic in this process (and one per topic among all processes: see
:meth:`hub.store.snapshots.ResourceSnapshots.build`). Only when no snapshot exists yet does
a reader wait, for at most ``wait_seconds``; then it is told to come back
(:class:`hub.core.exceptions.SnapshotPending`, 503 with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import logging

from hub.core.tasks import Tasks
from hub.core.topics import HubUrls
from hub.store.snapshots import ResourceSnapshots, Snapshot

log = logging.getLogger(__name__)


class SnapshotBuilds:
    """The snapshot to serve for a topic, and the background task taking the next."""

    def __init__(self, snapshots: ResourceSnapshots, tasks: Tasks, *, wait_seconds: float) -> None:
        self.snapshots = snapshots
        self.tasks = tasks
        self.wait_seconds = wait_seconds
        self._running: dict[str, asyncio.Task[Snapshot]] = {}

    def running(self, topic: str) -> bool:
        """Whether this process is taking (or waiting for) a snapshot of ``topic``."""
        return topic in self._running

    async def latest(self, topic: str, urls: HubUrls) -> Snapshot | None:
        """The snapshot to serve now, or ``None`` when none exists yet and the first was not
        taken within ``wait_seconds`` (it goes on in the background).

        ``urls``: the public base, which stored pages are rendered under.
        """
        found = await self.snapshots.recorded(topic)
        if found is not None and found.current:
            return found.snapshot
        task = self._start(topic, urls)
        if found is not None:
            return found.snapshot
        await asyncio.wait([task], timeout=self.wait_seconds)
        return task.result() if task.done() else None

    def _start(self, topic: str, urls: HubUrls) -> asyncio.Task[Snapshot]:
        task = self._running.get(topic)
        if task is None:
            task = self.tasks.spawn(
                f"snapshot {topic}",
                self.snapshots.build(topic, urls),
                on_end=lambda done: self._ended(topic, done),
            )
            self._running[topic] = task
        return task

    def _ended(self, topic: str, done: asyncio.Task[Snapshot]) -> None:
        self._running.pop(topic, None)
        if done.cancelled():
            return
        exc = done.exception()  # retrieved here, whether or not a reader waited for it
        if exc is not None:  # the next reader starts another
            log.warning("Resource List snapshot of topic %r failed: %r", topic, exc)

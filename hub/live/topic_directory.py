"""Which topics exist, for streams that follow every topic under a name prefix.

A stream of ``?topic_prefix=repo-`` follows the topics under ``repo-`` when it opens, and
each topic first published while it is open. Redis keeps the names of every topic ever
published to (:data:`hub.store.keys.TOPICS`, added before a topic's first event), so the
hub reads them: once when such a stream opens, and then every ``stream_topic_scan_seconds``
while any stream of this process follows a prefix, one read shared by all of them. A new
topic's events are never missed for being found late: its stream starts it at the stream's
base (:mod:`hub.core.stream_positions`), which never passes a read's :attr:`Snapshot.after`.

Each read first asks Redis for the position every later event comes after
(:meth:`hub.store.event_store.EventStore.new_ids_after`), then for the names: a topic with
an event at or before that position was added before it, so it is among the names. That is
what lets a stream's base move past the time of the read and no further. The names are read
again only when the set's version moved (:data:`hub.store.keys.TOPICS_VERSION`, bumped with
each new name, before the topic's first event): most reads are two small commands, however
many topics the hub has, so streams ask at every look at where their topics are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import NamedTuple

from hub.core import metrics
from hub.core.events import EventKey
from hub.core.tasks import Tasks
from hub.store.event_store import EventStore
from hub.store.redis_connection import StoreError

log = logging.getLogger(__name__)


class Snapshot(NamedTuple):
    """The topic names, and a position such that every topic with an event at or before it
    is named."""

    after: EventKey
    names: frozenset[str]


Listener = Callable[[Snapshot], None]


class TopicDirectory:
    """Reads the topic names now (:meth:`read`) and every ``interval`` seconds for its
    listeners (:meth:`watch`), in a task of ``tasks`` while it has any."""

    def __init__(self, store: EventStore, tasks: Tasks, interval: float) -> None:
        self.store = store
        self.tasks = tasks
        self.interval = interval
        self._listeners: set[Listener] = set()
        self._task: asyncio.Task[None] | None = None
        #: The read under way, shared by everyone who asks meanwhile.
        self._reading: asyncio.Future[Snapshot] | None = None
        #: The names last read, and the version of the set they were read at.
        self._names: frozenset[str] | None = None
        self._version = -1

    async def read(self) -> Snapshot:
        """The names as of now (a read under way is shared: it began after the call)."""
        reading = self._reading
        if reading is None or reading.done():
            reading = self._reading = asyncio.ensure_future(self._read())
            reading.add_done_callback(_retrieved)
        return await asyncio.shield(reading)

    async def _read(self) -> Snapshot:
        after = await self.store.new_ids_after()
        version = await self.store.topics_version()
        names = self._names
        if names is None or version < 0 or version != self._version:  # a name was added
            names = frozenset(await self.store.topics())
            self._names, self._version = names, version
        return Snapshot(after, names)

    def watch(self, listener: Listener) -> None:
        """Call ``listener`` with every periodic read until :meth:`unwatch`."""
        self._listeners.add(listener)
        if self._task is None or self._task.done():
            try:
                self._task = self.tasks.spawn("topic-directory", self._poll())
            except RuntimeError:  # shutting down: no more reads
                pass

    def unwatch(self, listener: Listener) -> None:
        self._listeners.discard(listener)

    async def _poll(self) -> None:
        while self._listeners:
            await asyncio.sleep(self.interval)
            if not self._listeners:
                return
            try:
                snapshot = await self.read()
            except StoreError as exc:  # Redis is out: the next round reads again
                metrics.redis_error()
                log.info("reading the topic names failed (%s); trying again", exc)
                continue
            for listener in list(self._listeners):
                listener(snapshot)


def _retrieved(reading: asyncio.Future[Snapshot]) -> None:
    """A read whose callers all left (their streams ended) failing: its error is theirs,
    not a stray "never retrieved" one."""
    if not reading.cancelled():
        reading.exception()

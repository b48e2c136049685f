"""Parsing published documents without stalling the event loop.

Parsing is CPU work: a 50,000-entry notification takes about a second, mostly Python code
holding the GIL, so in a thread it would still starve the event loop. Bodies up to
``parse_inline_bytes`` are parsed inline (a small document parses faster than a hand-off);
larger ones go to a pool of worker processes, which return the changes already packed for
the append script (one bytes object: cheap to send back). A worker that dies (e.g. killed
for memory) fails only its request, with 503, and the pool is rebuilt.

Errors raised in a worker (``DocumentError``, ``RequestError``) pickle, so the caller sees
the same exception, and the same 4xx, as for an inline parse.

The same pool renders the documents too costly to render per request (whole Resource Lists,
Change List pages: :meth:`DocumentParser.run`), for the same reason: in a thread, 50,000
entries of string building would hold the GIL, and the event loop, for a quarter second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Executor, Future, ThreadPoolExecutor
from typing import Literal, TypeVar

from hub.core import collector
from hub.core.events import Change, changes_from_document
from hub.core.exceptions import ServiceUnavailable
from hub.core.packed import Packed
from hub.core.quick_ingest import packed_from_document
from resourcesync import Limits

log = logging.getLogger(__name__)

T = TypeVar("T")
Row = tuple[str, str, bytes]


def _change_rows(body: bytes, max_bytes: int, limits: Limits) -> list[Row]:
    """In a worker: plain tuples unpickle several times faster than named tuples."""
    return [tuple(c) for c in changes_from_document(body, max_bytes, limits)]  # type: ignore[misc]


class DocumentParser:
    """Turns request bodies into changes, inline or in the worker pool (owned by the app)."""

    def __init__(
        self,
        *,
        max_bytes: int,
        limits: Limits,
        inline_bytes: int,
        workers: int,
        kind: Literal["process", "thread"] = "process",
        gc_young_threshold: int = 0,
    ) -> None:
        self.max_bytes = max_bytes
        #: Each worker process tunes its collector as the hub's own process does
        #: (:mod:`hub.core.collector`); threads share the hub's.
        self.gc_young_threshold = gc_young_threshold
        self.limits = limits
        self.inline_bytes = inline_bytes
        self.workers = workers
        self.kind = kind
        self._pool: Executor | None = None

    def _executor(self) -> Executor:
        """Created on first use: a hub that only sees small publishes starts no process."""
        if self._pool is None:
            if self.kind == "thread":
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="rshub-parse")
            else:
                # Imported here: multiprocessing is ~3 ms of a restart's way to serving.
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                # forkserver, not fork: forking a process that runs threads can deadlock.
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(["hub.core.quick_ingest", "hub.core.rendering"])
                self._pool = ProcessPoolExecutor(
                    self.workers,
                    mp_context=context,
                    initializer=collector.tune,
                    initargs=(self.gc_young_threshold,),
                )
        return self._pool

    async def _off_loop(self, func: Callable[[bytes, int, Limits], T], body: bytes) -> T:
        return await self.run(func, body, self.max_bytes, self.limits)

    async def run(self, func: Callable[..., T], *args: object, inline: bool = False) -> T:
        """``func(*args)`` in the pool (a module-level function; arguments that pickle), or
        right here when ``inline`` (small work: faster than the hand-off)."""
        if inline:
            return func(*args)
        try:
            # Submitted from a thread: the first submit starts the worker processes, which
            # waits on the fork server (and its imports) for most of a second.
            future: Future[T] = await asyncio.to_thread(self._executor().submit, func, *args)
            return await asyncio.wrap_future(future)
        except BrokenExecutor:  # BrokenProcessPool (the thread pool has no initializer to fail)
            log.warning("a parser worker died; restarting the pool")
            broken, self._pool = self._pool, None
            if broken is not None:
                broken.shutdown(wait=False, cancel_futures=True)
            raise ServiceUnavailable("the document parser failed; retry the request") from None

    async def packed(self, body: bytes) -> Packed:
        """The changes of a publish, packed for :meth:`hub.store.event_store.EventStore.append`."""
        if len(body) <= self.inline_bytes:
            return self.packed_inline(body)
        return await self._off_loop(packed_from_document, body)

    def packed_inline(self, body: bytes) -> Packed:
        """:meth:`packed` of a body of at most ``inline_bytes``, on the caller's loop."""
        return packed_from_document(body, self.max_bytes, self.limits)

    async def changes(self, body: bytes) -> list[Change]:
        """The changes of a document, one by one (publish pings compare each)."""
        if len(body) <= self.inline_bytes:
            return changes_from_document(body, self.max_bytes, self.limits)
        rows = await self._off_loop(_change_rows, body)
        return list(map(Change._make, rows))

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

"""What runs in ``rshub source``: the inventory kept in step with the directory, its state
file, the watcher and the pusher, started and stopped together.

Start (:meth:`SourceRuntime.start`): the state file is read; the directory is watched
(``watchfiles``, the OS's own events) *before* it is scanned, so that a change made during
the scan is seen either by the scan or by an event; the scan compares the directory with
the saved resources and records the differences once (what changed while the Source was
stopped); then the pusher sends whatever the hub has not stored yet.

Every scan and every read of a file runs in a thread; the inventory is changed on the event
loop only, by one refresh at a time, so that serving never waits on the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

import watchfiles

from .documents import Site
from .dumps import Dumps
from .exceptions import UsageError
from .inventory import ChangeRecord, Inventory, Reconciled
from .pusher import Pusher
from .tree import RESERVED_PREFIX, FileFacts, key_of, scan

__all__ = ["SourceRuntime", "subtrees"]

log = logging.getLogger(__name__)


def subtrees(keys: Iterable[str]) -> list[str]:
    """The keys that are not below another of ``keys`` (``""`` covers everything)."""
    ordered = sorted(set(keys))
    if "" in ordered:
        return [""]
    out: list[str] = []
    for key in ordered:
        if out and (key == out[-1] or key.startswith(out[-1] + "/")):
            continue
        out.append(key)
    return out


class SourceRuntime:
    """The Source's moving parts for the directory ``root`` (an absolute, resolved path)."""

    def __init__(
        self,
        root: str,
        site: Site,
        state: Path,
        *,
        pusher_factory: type[Pusher] | None = None,
        debounce_ms: int = 1600,
        step_ms: int = 50,
    ) -> None:
        self.root = root
        self.site = site
        self.state = state
        self.inventory = Inventory.load(state, root, site.base_url)
        self.pusher: Pusher | None = None
        self.dumps: Dumps | None = None
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self._refreshing = asyncio.Lock()
        self._saving = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._sealing: set[asyncio.Task[None]] = set()
        self._watching = asyncio.Event()
        #: Set once the first scan is recorded (the documents are complete from then on).
        self.ready = asyncio.Event()
        #: Files and dump packages answered (200 or 206): what Destinations fetched.
        self.files_served = 0
        self.packages_served = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, pusher: Pusher | None = None, dumps: Dumps | None = None) -> None:
        """Watch, scan, record the differences, and push (when ``pusher`` is given); seal
        and announce Change Dump packages (when ``dumps`` is given)."""
        self.pusher = pusher
        self.dumps = dumps
        if dumps is not None:
            await asyncio.to_thread(dumps.load_sealed)
        watching = asyncio.create_task(self._watch(), name="rshub-source:watch")
        self._tasks.append(watching)
        # Scanned once the watches are in place: a change from then on is seen by an event,
        # one before by the scan.
        await self._wait_watching(watching)
        await self.refresh([""])
        self.ready.set()
        if pusher is not None:
            self._tasks.append(asyncio.create_task(pusher.run(), name="rshub-source:push"))
        if dumps is not None:
            self._seal_soon()
            self._tasks.append(asyncio.create_task(dumps.notify(), name="rshub-source:dumps"))
        log.info(
            "%d resources in %s, %d changes recorded, %d pushed",
            len(self.inventory.files),
            self.root,
            len(self.inventory.history),
            self.inventory.pushed,
        )

    async def close(self) -> None:
        """Stop watching and pushing; save the state (if the Source ever started)."""
        for task in [*self._tasks, *self._sealing]:
            task.cancel()
        for task in [*self._tasks, *self._sealing]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.ready.is_set():
            await self.save()

    def failed(self) -> BaseException | None:
        """The error that ended the watcher or the pusher, if one did."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                return task.exception()
        return None

    async def wait_failed(self) -> BaseException:
        """Wait until the watcher or the pusher ends with an error, and return it."""
        while True:
            running = [t for t in self._tasks if not t.done()]
            error = self.failed()
            if error is not None:
                return error
            if not running:
                await asyncio.Event().wait()  # nothing left that could fail
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)

    # -- changes -------------------------------------------------------------------------

    async def refresh(self, keys: Iterable[str]) -> list[ChangeRecord]:
        """Scan the resources at and below ``keys`` and record what changed."""
        async with self._refreshing:
            planned = await asyncio.to_thread(self._plan, subtrees(keys))
            changes = self.inventory.apply(planned)
            if changes:
                await self.save()
                log.info("recorded %d changes", len(changes))
                if self.pusher is not None:
                    self.pusher.wake()
                if self.dumps is not None:
                    self._seal_soon()
        return changes

    def _plan(self, unders: list[str]) -> Reconciled:
        """Scan ``unders`` and compare, all in one (in a thread: hashing, sorting 10,000
        keys, copying the resources' dict once for a batch of a thousand events)."""
        inventory = self.inventory
        found: dict[str, FileFacts] = {}
        for under in unders:
            found.update(scan(self.root, under, inventory.files))
        return inventory.plan(unders, found)

    def _seal_soon(self) -> None:
        """Seal the Change Dump packages of the pages that closed, in a task of its own
        (one at a time: :meth:`Dumps.seal_closed_pages` holds a lock)."""
        dumps = self.dumps
        if dumps is None:
            return
        if len(self.inventory.history) // self.site.changelist_entries <= len(dumps.sealed):
            return
        task = asyncio.create_task(dumps.seal_closed_pages(), name="rshub-source:seal")
        self._sealing.add(task)
        task.add_done_callback(self._sealed)

    def _sealed(self, task: asyncio.Task[None]) -> None:
        self._sealing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Serving and pushing go on; the next refresh tries the packages again.
            log.error("sealing Change Dump packages failed: %r", task.exception())

    async def save(self) -> None:
        """Write the state file (off the loop), newest state last."""
        async with self._saving:
            snapshot = self.inventory.snapshot()
            await asyncio.to_thread(snapshot.save, self.state)

    # -- watching ------------------------------------------------------------------------

    def _key(self, path: str) -> str | None:
        # watchfiles names paths below the root as given (absolute, resolved): a prefix,
        # cut off without os.path.relpath's normalizing (a thousand events, 30 ms).
        if path == self.root:
            return ""
        prefix = os.path.join(self.root, "")
        if not path.startswith(prefix):
            return None
        parts = os.fsencode(path[len(prefix) :]).split(os.fsencode(os.sep))
        if parts[0] == b".." or any(p.startswith(RESERVED_PREFIX.encode()) for p in parts):
            return None
        return key_of(parts)

    def _wanted(self, _change: watchfiles.Change, path: str) -> bool:
        # Every name counts (watchfiles' default filter would drop "*.pyc" or "x~", which
        # are resources here), but the reserved ones: the state file's own writes.
        return self._key(path) is not None

    async def _wait_watching(self, watching: asyncio.Task[None]) -> None:
        waiting = asyncio.ensure_future(self._watching.wait())
        await asyncio.wait([waiting, watching], return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            waiting.cancel()
            await watching  # it ended before it watched: its error, said by the caller

    async def _watch(self) -> None:
        """The directory's events, from ``watchfiles.watch`` in a thread of its own: its
        watches are set up there too (a walk of the whole tree, which took 0.3 s of the
        event loop's time for 10,000 files when ``awatch`` did it on the loop)."""
        loop = asyncio.get_running_loop()
        batches: asyncio.Queue[set[tuple[watchfiles.Change, str]] | BaseException | None]
        batches = asyncio.Queue()
        stop = threading.Event()

        def watching() -> None:
            post = loop.call_soon_threadsafe
            first = True
            try:
                for batch in watchfiles.watch(
                    self.root,
                    watch_filter=self._wanted,
                    debounce=self.debounce_ms,
                    step=self.step_ms,
                    stop_event=stop,
                    # Waits end every quarter second (in this thread only), so that the
                    # first (or the first batch) says the watches are in place; later empty
                    # ones are not passed on.
                    rust_timeout=250,
                    yield_on_timeout=True,
                    raise_interrupt=False,
                    ignore_permission_denied=True,
                ):
                    if batch or first:
                        post(batches.put_nowait, batch)
                    first = False
            except BaseException as exc:  # handed to the loop, raised there
                post(batches.put_nowait, exc)
            else:
                post(batches.put_nowait, None)

        thread = threading.Thread(target=watching, name="rshub-source-watch", daemon=True)
        thread.start()
        try:
            while (batch := await batches.get()) is not None:
                if isinstance(batch, BaseException):
                    raise batch
                self._watching.set()
                keys = [k for _change, path in batch if (k := self._key(path)) is not None]
                if keys:
                    await self.refresh(keys)
        finally:
            stop.set()  # the thread's watch sees it within a step (50 ms)
            await asyncio.shield(asyncio.to_thread(thread.join, 5.0))


def resolved_directory(directory: str) -> str:
    """``directory`` as an absolute path without links (what the state file records).

    Raises:
        UsageError: it is missing or not a directory.
    """
    try:
        path = Path(directory).resolve(strict=True)
    except OSError as exc:
        raise UsageError(f"{directory}: {exc.strerror or exc}") from None
    if not path.is_dir():
        raise UsageError(f"{directory} is not a directory")
    return str(path)

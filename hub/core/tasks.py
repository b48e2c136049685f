"""The hub's background tasks: started, named and stopped in one place.

Every long-lived task of a process is started through a :class:`Tasks` group of the
process's one composition root (:class:`hub.live.runtime.Runtime`), or through a child group
of it (one per component; per-topic and per-subscription tasks are spawned into those), so
shutdown stops everything one way: in reverse order of start, each wait bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

log = logging.getLogger(__name__)


#: How often :func:`cancel_and_wait` repeats a cancel() that did not end its task.
_RECANCEL_SECONDS = 0.25


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None], timeout: float = 5.0) -> None:
    """Cancel ``tasks`` and wait up to ``timeout`` for them to end.

    A task that swallows its cancellation (a client library catching it mid-call, say) is
    reported and left behind rather than blocking the hub's shutdown forever.
    """
    given = [t for t in tasks if t is not None]
    pending = {t for t in given if not t.done()}
    for task in pending:
        task.cancel()
    # A cancel() can be swallowed mid-call (seen with redis-py on Python 3.11: the task went
    # on to its next wait, and a shutdown waited the whole timeout): ask again until it ends.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    stuck = pending
    while stuck and (remaining := deadline - loop.time()) > 0:
        _, stuck = await asyncio.wait(stuck, timeout=min(_RECANCEL_SECONDS, remaining))
        for task in stuck:
            task.cancel()
    done = pending - stuck
    # Retrieve every ending exception (also of tasks that were done before), so none is
    # reported later as "never retrieved"; e.g. a write to a client that went away.
    for task in (*done, *(t for t in given if t not in pending)):
        if not task.cancelled() and task.exception() is not None:
            log.debug("task %s ended with %r", task.get_name(), task.exception())
    for task in stuck:
        log.warning("task %s did not stop within %.1fs; leaving it", task.get_name(), timeout)


class Tasks:
    """A named group of tasks and child groups, stopped in reverse order of start.

    :meth:`spawn` starts a task (one that ends by itself is forgotten, and its failure
    logged); :meth:`group` adds a child group, stopped at its place in the order;
    :meth:`every` runs a step periodically, stopped by an event rather than by ``cancel()``
    alone (a cancellation landing inside a Redis call can be swallowed by the client).
    :meth:`stop` waits at most ``timeout`` per task and leaves a stuck one behind with a
    warning, so shutdown never hangs. A stopped group refuses to start anything more.
    """

    def __init__(self, name: str, *, timeout: float = 5.0, peers: bool = False) -> None:
        self.name = name
        self.timeout = timeout
        #: Peers (one task per subscription, say) are independent of each other's order:
        #: they are cancelled together and waited for once.
        self.peers = peers
        #: Set when the group starts stopping; loops may watch it to end by themselves.
        self.stopping = asyncio.Event()
        self._entries: dict[object, asyncio.Task[Any] | Tasks] = {}
        self._cooperative: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return sum(1 if isinstance(e, asyncio.Task) else len(e) for e in self._entries.values())

    def names(self) -> list[str]:
        """Every running task's name, ``group/task``, in start order (for tests and logs)."""
        found: list[str] = []
        for entry in self._entries.values():
            if isinstance(entry, Tasks):
                found.extend(f"{self.name}/{n}" for n in entry.names())
            else:
                found.append(f"{self.name}/{entry.get_name()}")
        return found

    def running(self) -> list[asyncio.Task[Any]]:
        """Every task of the tree, in start order."""
        found: list[asyncio.Task[Any]] = []
        for entry in self._entries.values():
            found.extend(entry.running() if isinstance(entry, Tasks) else [entry])
        return found

    def spawn(
        self,
        name: str,
        coro: Coroutine[Any, Any, Any],
        *,
        on_end: Callable[[asyncio.Task[Any]], None] | None = None,
    ) -> asyncio.Task[Any]:
        """Start ``coro``; ``on_end`` (instead of an ERROR log if it failed) when it ends."""
        if self.stopping.is_set():
            coro.close()
            raise RuntimeError(f"task group {self.name} is stopping; not starting {name}")
        task = asyncio.create_task(coro, name=name)
        self._entries[task] = task
        task.add_done_callback(lambda t: self._ended(t, on_end))
        return task

    def group(self, name: str, *, peers: bool = False) -> Tasks:
        if self.stopping.is_set():
            raise RuntimeError(f"task group {self.name} is stopping; no group {name}")
        child = Tasks(name, timeout=self.timeout, peers=peers)
        self._entries[child] = child
        return child

    def every(
        self,
        interval: float,
        name: str,
        step: Callable[[], Awaitable[None]],
        *,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
        on_failure: Callable[[BaseException], None] = lambda _exc: None,
    ) -> None:
        """Run ``step`` every ``interval`` seconds until the group stops; a failure of one of
        the ``retry_on`` types is logged and retried next round."""
        task = self.spawn(name, self._loop(interval, name, step, retry_on, on_failure))
        self._cooperative.add(task)

    async def _loop(
        self,
        interval: float,
        name: str,
        step: Callable[[], Awaitable[None]],
        retry_on: type[BaseException] | tuple[type[BaseException], ...],
        on_failure: Callable[[BaseException], None],
    ) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), interval)
            if self.stopping.is_set():
                return
            try:
                await step()
            except retry_on as exc:
                on_failure(exc)
                log.warning("%s failed: %s", name, exc)

    def _ended(
        self, task: asyncio.Task[Any], on_end: Callable[[asyncio.Task[Any]], None] | None
    ) -> None:
        self._entries.pop(task, None)
        self._cooperative.discard(task)
        if on_end is not None:
            on_end(task)
        elif not task.cancelled() and (exc := task.exception()) is not None:
            log.error("task %s failed: %r", task.get_name(), exc, exc_info=exc)

    async def stop(self) -> None:
        """Stop every task and child group, the last started first."""
        self.stopping.set()
        if self.peers:
            plain = [e for e in self._entries.values() if isinstance(e, asyncio.Task)]
            await cancel_and_wait(plain, self.timeout)
        for entry in reversed(list(self._entries.values())):
            if isinstance(entry, Tasks):
                await entry.stop()
                self._entries.pop(entry, None)
            elif entry in self._cooperative:
                _, stuck = await asyncio.wait([entry], timeout=self.timeout)
                if stuck:
                    log.warning("task %s did not stop in time; cancelling", entry.get_name())
                    entry.cancel()
            else:
                await cancel_and_wait([entry], self.timeout)

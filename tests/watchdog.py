"""The hostile tests' watchdog: event-loop stalls, leaked sockets and crash loops.

Every test where another party's bytes enter the hub runs under :class:`Watchdog`::

    async with Watchdog() as dog:
        ...  # the hostile part
    await dog.sockets_back()   # open sockets returned to where they were

A **stall** is the loop thread busy for longer than ``stall_seconds`` without coming back
to the loop: a ticker wakes every 10 ms and compares both the wall time and the loop
thread's own CPU time since its last tick. CPU time is what tells a hub that spins (an
unparseable answer, a document built on the loop) from a machine that is merely busy: on
this 2-core box a ticker on wall time alone sees 100 ms gaps whenever another process
runs, while the loop's own CPU time cannot grow while it is preempted. A gap of more than
``hang_seconds`` of wall time counts too, whatever the CPU: that is a loop blocked in a
system call.

While it watches, the test process's own heap is frozen out of the collector's way
(:func:`frozen_heap`), as ``rshub serve`` freezes its start-up heap: a full collection of
pytest's objects late in a full run took up to 300 ms and is no stall of the hub's.

A **crash loop** is seen in the log: more than ``max_errors`` records at ERROR or above
while the watchdog runs (a worker that dies and restarts logs one each time).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time
from collections.abc import Iterator
from types import TracebackType

from tests.support import TIME_SCALE, wait_for


def _socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed while listed
            continue
        if target.startswith("socket:"):
            inodes.add(target[len("socket:[") : -1])
    return inodes


#: Ports of servers whose client connections are pooled (the session's Redis): a pool that
#: grows during a test keeps its new connections for the next command, which is no leak.
#: Sockets to these ports count for neither side of :meth:`Watchdog.sockets_back`.
POOLED_PORTS: set[int] = set()


def pooled_connections() -> int:
    """This process's established TCP connections to a port in :data:`POOLED_PORTS`."""
    if not POOLED_PORTS:
        return 0
    inodes = _socket_inodes()
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[9] in inodes and fields[3] == "01" and port in POOLED_PORTS:
                    count += 1
    return count


def open_sockets() -> int:
    """The sockets this process holds open (from ``/proc/self/fd``)."""
    return len(_socket_inodes())


def _endpoint(hex_address: str) -> str:
    host, port = hex_address.split(":")
    if len(host) == 8:  # IPv4, little-endian
        ip = ".".join(str(int(host[i : i + 2], 16)) for i in (6, 4, 2, 0))
    else:
        ip = "[ipv6]"
    return f"{ip}:{int(port, 16)}"


def describe_sockets() -> list[str]:
    """This process's TCP sockets as ``local -> remote (state)``, for a leak's message:
    which client or server kept its socket says where to look."""
    inodes = _socket_inodes()
    found = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[9] in inodes:
                    inodes.discard(fields[9])
                    local, remote = _endpoint(fields[1]), _endpoint(fields[2])
                    found.append(f"{local} -> {remote} (state {fields[3]})")
    return sorted(found) + [f"non-TCP socket {inode}" for inode in sorted(inodes)]


async def sockets_back(baseline: int, timeout: float = 10.0, pooled: int | None = None) -> None:
    """Wait until the process holds at most ``baseline`` sockets; else fail naming them.
    With ``pooled`` (the connections to :data:`POOLED_PORTS` when ``baseline`` was taken),
    connections a pool added since then are not counted."""

    def back() -> bool:
        grown = 0 if pooled is None else max(0, pooled_connections() - pooled)
        return open_sockets() <= baseline + grown

    try:
        await wait_for(back, timeout)
    except AssertionError:
        raise AssertionError(
            f"{open_sockets()} sockets open, {baseline} at the start: {describe_sockets()}"
        ) from None


class _ErrorCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Watchdog:
    """Fails the test on a loop stall, a crash loop, or (on request) leaked sockets."""

    def __init__(
        self,
        *,
        stall_seconds: float = 0.1,
        hang_seconds: float = 1.0,
        max_errors: int = 0,
    ) -> None:
        self.stall_seconds = stall_seconds
        self.hang_seconds = hang_seconds * TIME_SCALE
        self.max_errors = max_errors
        #: The longest busy stretch of the loop thread seen, in CPU seconds.
        self.max_busy = 0.0
        #: The longest gap between two ticks, in wall seconds.
        self.max_gap = 0.0
        self.baseline_sockets = 0
        self.baseline_pooled = 0
        self._errors = _ErrorCounter()
        self._task: asyncio.Task[None] | None = None
        #: The test process's heap is frozen while watched (see :func:`frozen_heap`).
        self._heap = frozen_heap()

    async def __aenter__(self) -> Watchdog:
        self.baseline_sockets = open_sockets()
        self.baseline_pooled = pooled_connections()
        self._heap.__enter__()
        logging.getLogger().addHandler(self._errors)
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        logging.getLogger().removeHandler(self._errors)
        self._heap.__exit__(None, None, None)
        if exc_type is None:
            self.check()

    async def _tick(self) -> None:
        wall, cpu = time.monotonic(), time.thread_time()
        while True:
            await asyncio.sleep(0.01)
            now_wall, now_cpu = time.monotonic(), time.thread_time()
            self.max_gap = max(self.max_gap, now_wall - wall)
            self.max_busy = max(self.max_busy, now_cpu - cpu)
            wall, cpu = now_wall, now_cpu

    def check(self) -> None:
        """Raise if the loop stalled or errors were logged beyond the allowance."""
        assert self.max_busy <= self.stall_seconds, (
            f"event loop busy for {self.max_busy * 1000:.0f} ms without yielding "
            f"(limit {self.stall_seconds * 1000:.0f} ms)"
        )
        assert self.max_gap <= self.hang_seconds, (
            f"event loop did not run for {self.max_gap:.2f} s (limit {self.hang_seconds:.2f} s)"
        )
        errors = self._errors.records
        assert len(errors) <= self.max_errors, (
            f"{len(errors)} ERROR log records (allowed {self.max_errors}); first: "
            f"{errors[0].getMessage()[:200]!r}"
        )

    @property
    def errors(self) -> list[logging.LogRecord]:
        return list(self._errors.records)

    async def sockets_back(self, timeout: float = 10.0, slack: int = 0) -> None:
        """Wait until the process holds no more sockets than when the watchdog started,
        but for connections a Redis pool opened meanwhile (:data:`POOLED_PORTS`)."""
        await sockets_back(self.baseline_sockets + slack, timeout, self.baseline_pooled)


_frozen_depth = 0


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """The test process's own heap (pytest, every import) out of the collector's way while
    an in-process hub is watched, as ``rshub serve`` freezes its start-up heap
    (``hub.web.app``): otherwise one full collection of pytest's objects, 60-300 ms late
    in a full run, counts as a hub stall. Nests: only the outermost freezes and thaws."""
    global _frozen_depth
    if _frozen_depth == 0:
        gc.collect()
        gc.freeze()
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if _frozen_depth == 0:
            gc.unfreeze()

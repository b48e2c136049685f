"""A blocking facade over :class:`~publisher.client.Publisher`, for scripts.

The asyncio publisher runs on an event loop in a background thread; each method hands
its call to that loop and waits. Do not use it from inside a running event loop (it would
block that loop); use :class:`~publisher.client.Publisher` there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterable
from types import TracebackType
from typing import Any, TypeVar

from resourcesync import Entry

from .client import Publisher

__all__ = ["BlockingPublisher"]

T = TypeVar("T")


class BlockingPublisher:
    """``with BlockingPublisher(hub, topic) as pub: ids = pub.publish(entries)``.

    Takes the same arguments as :class:`~publisher.client.Publisher`.
    """

    def __init__(self, hub: str, topic: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"rshub-publisher:{topic}", daemon=True
        )
        self._thread.start()
        self._closed = False

        async def create() -> Publisher:
            publisher = Publisher(hub, topic, **options)
            await publisher.start()
            return publisher

        self.publisher = self._call(create())

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def publish(self, entries: Entry | Iterable[Entry], timeout: float | None = None) -> list[str]:
        """Send changes and return their event ids once the hub stored them."""
        return self._call(self.publisher.publish(list(_as_list(entries))), timeout)

    def submit(self, entries: Entry | Iterable[Entry]) -> concurrent.futures.Future[list[str]]:
        """Queue changes (raising QueueFullError when full); the future gives their ids."""
        items = _as_list(entries)

        async def enqueue() -> asyncio.Future[list[str]]:
            return self.publisher.submit(items)

        inner = self._call(enqueue())
        outer: concurrent.futures.Future[list[str]] = concurrent.futures.Future()

        def relay(done: asyncio.Future[list[str]]) -> None:
            if done.cancelled():
                outer.cancel()
            elif (exc := done.exception()) is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(done.result())

        self._loop.call_soon_threadsafe(inner.add_done_callback, relay)
        return outer

    def flush(self, timeout: float | None = None) -> None:
        self._call(self.publisher.flush(), timeout)

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, stop the thread. Raises UnsentChangesError if time ran out."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self.publisher.close(timeout))
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> BlockingPublisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _as_list(entries: Entry | Iterable[Entry]) -> list[Entry]:
    return [entries] if isinstance(entries, Entry) else list(entries)

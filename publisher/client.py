"""The asyncio publisher: queue changes, batch them, POST them to a hub topic, retry.

Contract:

- Changes are sent in the order they were submitted, in notifications of at most
  ``batching.max_changes`` changes, one notification at a time (so the hub assigns event
  ids in submission order).
- Every notification carries an ``Idempotency-Key`` that stays the same on every retry of
  that notification, so a retry after a lost answer is replayed by the hub, never stored
  twice.
- Network errors, timeouts, 408/425/429 and 5xx are retried with capped exponential
  back-off and jitter (:class:`~publisher.retry.RetryPolicy`; a ``Retry-After`` lengthens
  a delay, up to its cap), for ever unless ``give_up_after`` is set. Any other 4xx fails
  the notification's changes with :class:`~publisher.exceptions.PublishRejected` at once.
- The queue is bounded (``max_queued`` changes, in flight included). :meth:`Publisher.submit`
  raises :class:`~publisher.exceptions.QueueFullError` when it is full;
  :meth:`Publisher.put` and :meth:`Publisher.publish` wait for room instead. No change is
  ever dropped without its submitter being told: each submission's future gets either
  the event ids or an exception, and failures are logged.
- :meth:`Publisher.close` sends what is queued before returning, and raises
  :class:`~publisher.exceptions.UnsentChangesError` if its timeout ran out first.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, NamedTuple

import aiohttp
import orjson

from resourcesync import Entry
from rsclient.backoff import Retrier, parse_retry_after

from .batching import Batch, Batcher, BatchPolicy, Ticket
from .changes import check_change, notification
from .exceptions import (
    HubUnavailable,
    PublisherError,
    PublishRejected,
    QueueFullError,
    UnsentChangesError,
    UsageError,
)
from .retry import RetryPolicy, is_retryable_status

__all__ = ["PublishResult", "Publisher"]

log = logging.getLogger(__name__)


class PublishResult(NamedTuple):
    """The hub's answer to one notification."""

    topic: str
    #: Event ids of the notification's changes, in document order.
    ids: list[str]
    #: True when the hub had already stored this Idempotency-Key (a retry's replay).
    replayed: bool


class _Transient(Exception):
    """One failed attempt that a later attempt may fix (after ``retry_after`` seconds, if
    the hub said so); ``unreachable`` when no connection could be made at all."""

    def __init__(
        self, error: str, retry_after: float | None = None, *, unreachable: bool = False
    ) -> None:
        super().__init__(error)
        self.retry_after = retry_after
        self.unreachable = unreachable


class Publisher:
    """Publish changes to ``{hub}/topics/{topic}``.

    Use as ``async with Publisher(hub, topic) as pub: await pub.publish(entries)``, or call
    :meth:`start` and :meth:`close` yourself.
    """

    def __init__(
        self,
        hub: str,
        topic: str,
        *,
        token: str | None = None,
        batching: BatchPolicy | None = None,
        retry: RetryPolicy | None = None,
        max_queued: int = 10_000,
        request_timeout: float = 30.0,
        close_timeout: float | None = 30.0,
        up: str | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if max_queued < 1:
            raise UsageError("max_queued must be at least 1")
        self.hub = hub.rstrip("/")
        self.topic = topic
        self.url = f"{self.hub}/topics/{topic}"
        self.token = token
        self.batching = batching or BatchPolicy()
        self.retry = retry or RetryPolicy()
        self.max_queued = max_queued
        self.request_timeout = request_timeout
        self.close_timeout = close_timeout
        #: Capability List of the Source, sent as the notifications' ``rel="up"`` link.
        self.up = up
        #: ``time.monotonic()`` when the hub last started failing, ``None`` while it works.
        self.down_since: float | None = None
        #: The last failure, in words, for status messages.
        self.last_error: str | None = None
        #: Counters: changes stored, notifications sent, attempts retried, changes failed.
        self.stats = {"stored": 0, "notifications": 0, "retries": 0, "failed": 0}
        self._session = session
        self._own_session = session is None
        self._batcher = Batcher(self.batching)
        self._in_flight = 0
        self._flushing = 0
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._full_logged = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None:
            return
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8))
        self._task = asyncio.create_task(self._run(), name=f"rshub-publisher:{self.topic}")

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Send everything queued, then stop.

        Waits at most ``timeout`` seconds (default: ``close_timeout``, where ``None``
        means no limit).

        Raises:
            UnsentChangesError: the time ran out with changes unsent; their submitters'
                futures fail with the same error.
        """
        if timeout is None:
            timeout = self.close_timeout
        self._closing = True
        self._wake.set()
        unsent = 0
        try:
            if self._task is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(self._task), timeout)
                except TimeoutError:
                    unsent = self.queued
                    self._task.cancel()
                    await asyncio.gather(self._task, return_exceptions=True)
        finally:
            if self._own_session and self._session is not None:
                await self._session.close()
                self._session = None
        if unsent:
            hub_state = f": {self.last_error}" if self.last_error else ""
            raise UnsentChangesError(
                f"closed with {unsent} changes unsent to {self.url}{hub_state}", count=unsent
            )

    # -- submitting --------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """Changes accepted but not yet stored by the hub (in flight included)."""
        return len(self._batcher) + self._in_flight

    def submit(self, entries: Entry | Iterable[Entry]) -> asyncio.Future[list[str]]:
        """Queue changes now; the future gives their event ids once the hub stored them.

        Raises:
            QueueFullError: the queue cannot take them (nothing was queued).
            UsageError: a change is not valid, or the publisher is closed.
        """
        batch = self._prepare(entries)
        if self.queued + len(batch) > self.max_queued:
            raise QueueFullError(
                self._full_message(len(batch)), queued=self.queued, limit=self.max_queued
            )
        return self._enqueue(batch)

    async def put(self, entries: Entry | Iterable[Entry]) -> asyncio.Future[list[str]]:
        """Like :meth:`submit`, but wait for room in the queue instead of raising."""
        batch = self._prepare(entries)
        while self.queued + len(batch) > self.max_queued:
            if not self._full_logged:
                self._full_logged = True
                log.warning("%s; waiting for room", self._full_message(len(batch)))
            self._changed.clear()
            await self._changed.wait()
            if self._closing:
                raise UsageError("the publisher was closed while waiting for room")
        return self._enqueue(batch)

    async def publish(self, entries: Entry | Iterable[Entry]) -> list[str]:
        """Queue changes (waiting for room) and return their event ids once stored."""
        return await (await self.put(entries))

    async def flush(self) -> None:
        """Send everything queued now without waiting for ``max_wait``; return when done."""
        self._flushing += 1
        try:
            while self.queued:
                self._wake.set()
                self._changed.clear()
                await self._changed.wait()
        finally:
            self._flushing -= 1

    def _prepare(self, entries: Entry | Iterable[Entry]) -> list[Entry]:
        if self._closing or (self._task is not None and self._task.done()):
            raise UsageError("the publisher is closed")
        if self._task is None:
            raise UsageError("start the publisher first (await start() or use async with)")
        batch = [entries] if isinstance(entries, Entry) else list(entries)
        if len(batch) > self.max_queued:
            raise UsageError(
                f"{len(batch)} changes in one submission is more than max_queued "
                f"({self.max_queued})"
            )
        for entry in batch:
            check_change(entry)
        return batch

    def _enqueue(self, batch: list[Entry]) -> asyncio.Future[list[str]]:
        future: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        # The publisher logs every failure itself; fire-and-forget callers are not
        # additionally warned about a future whose exception nobody retrieved.
        future.add_done_callback(_retrieve)
        if not batch:
            future.set_result([])
            return future
        self._batcher.add(Ticket(len(batch), future), batch, time.monotonic())
        self._wake.set()
        return future

    def _full_message(self, wanted: int) -> str:
        why = "the hub is slower than the submissions"
        if self.down_since is not None:
            why = (
                f"the hub has been failing for {time.monotonic() - self.down_since:.0f}s"
                f" ({self.last_error})"
            )
        return (
            f"publisher queue full: {self.queued} of {self.max_queued} changes waiting for "
            f"{self.url}, cannot take {wanted} more; {why}"
        )

    # -- sending -----------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            if self._batcher.due(now, flushing=bool(self._flushing) or self._closing):
                await self._send_batch(self._batcher.take())
                continue
            if self._closing and not self._batcher:
                return
            wait = self._batcher.wait_time(now)
            self._wake.clear()
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _send_batch(self, batch: Batch) -> None:
        self._in_flight = len(batch)
        try:
            result = await self.send(batch.entries)
            if len(result.ids) != len(batch):
                raise PublishRejected(
                    f"hub stored {len(result.ids)} changes of {len(batch)}",
                    status=202,
                    error="event id count mismatch",
                )
        except PublisherError as exc:
            self.stats["failed"] += len(batch)
            log.error("%d changes not published to %s: %s", len(batch), self.url, exc)
            batch.failed(exc)
        except asyncio.CancelledError:
            batch.failed(
                UnsentChangesError(
                    f"publisher closed before {len(batch)} changes were stored", count=len(batch)
                )
            )
            self._batcher.fail_all(
                UnsentChangesError(
                    "publisher closed before these changes were sent", count=len(self._batcher)
                )
            )
            raise
        else:
            batch.stored(result.ids)
        finally:
            self._in_flight = 0
            self._full_logged = False
            self._changed.set()

    async def send(
        self, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> PublishResult:
        """POST ``entries`` as one notification now, bypassing the queue; retry as needed.

        ``idempotency_key`` defaults to a fresh random key; a caller that may resend the
        same changes after a crash passes a key derived from them instead.
        """
        return await self.send_body(
            notification(entries, up=self.up), idempotency_key=idempotency_key
        )

    async def send_body(self, body: bytes, *, idempotency_key: str | None = None) -> PublishResult:
        """POST a ready-made notification document, retrying with one Idempotency-Key."""
        key = idempotency_key or uuid.uuid4().hex
        retry = Retrier(self.retry.backoff, give_up_after=self.retry.give_up_after)
        unreachable = 0  # attempts in a row that could not connect
        async for attempt in retry:
            try:
                result = await self._post(body, key)
            except _Transient as exc:
                first = self.down_since is None  # said once per outage, then quietly
                if first:
                    self.down_since = time.monotonic()
                self.last_error = str(exc)
                unreachable = unreachable + 1 if exc.unreachable else 0
                limit = self.retry.unreachable_attempts
                if limit is not None and unreachable >= limit:
                    raise HubUnavailable(
                        f"cannot reach the hub at {self.hub} ({attempt} attempts in "
                        f"{retry.elapsed:.1f}s): {exc}"
                    ) from None
                delay = retry.failed(exc.retry_after)
                if delay is None:
                    raise HubUnavailable(
                        f"gave up after {attempt} attempts in {retry.elapsed:.1f}s: {exc}"
                    ) from None
                self.stats["retries"] += 1
                log.log(
                    logging.WARNING if first else logging.INFO,
                    "publish to %s failed (%s); attempt %d, retrying in %.2fs "
                    "with the same Idempotency-Key",
                    self.url,
                    exc,
                    attempt,
                    delay,
                )
                continue
            if self.down_since is not None:
                log.warning(
                    "hub %s reachable again after %.1fs",
                    self.hub,
                    time.monotonic() - self.down_since,
                )
            self.down_since = None
            self.last_error = None
            self.stats["notifications"] += 1
            self.stats["stored"] += len(result.ids)
            return result
        raise AssertionError("a Retrier without a limit of attempts never ends")

    async def _post(self, body: bytes, key: str) -> PublishResult:
        if self._session is None:
            raise UsageError("start the publisher first (await start() or use async with)")
        headers = {"Content-Type": "application/xml", "Idempotency-Key": key}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            async with self._session.post(
                self.url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.request_timeout),
            ) as resp:
                raw = await resp.read()
                status = resp.status
                kind = resp.content_type
                asked = parse_retry_after(resp.headers.get("Retry-After"))
        except aiohttp.ClientConnectorError as exc:  # refused, or no address to connect to
            raise _Transient(f"{type(exc).__name__}: {exc}", unreachable=True) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _Transient(f"{type(exc).__name__}: {exc or 'timed out'}") from None
        if is_retryable_status(status):
            raise _Transient(f"HTTP {status}: {_error_text(raw, kind)}", asked)
        if not 200 <= status < 300:
            error = _error_text(raw, kind)
            raise PublishRejected(
                f"hub refused the notification for topic {self.topic!r}: HTTP {status}: {error}",
                status=status,
                error=error,
            )
        try:
            answer: dict[str, Any] = orjson.loads(raw)
            ids = [str(i) for i in answer["ids"]]
        except (ValueError, KeyError, TypeError):
            raise PublishRejected(
                f"hub answered HTTP {status} without event ids: {_error_text(raw, kind)}",
                status=status,
                error="unexpected answer",
            ) from None
        return PublishResult(
            str(answer.get("topic", self.topic)), ids, bool(answer.get("replayed", False))
        )


#: The longest answer quoted in an error message, on its one line.
_QUOTED = 200


def _error_text(raw: bytes, content_type: str) -> str:
    """The answer's reason in one line: the hub's ``{"error": ...}``, or what the server
    that is not a hub sent, named by its type (an HTML page is never quoted: its lines
    said nothing a person needed and pushed the reason off the screen)."""
    try:
        data = orjson.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict) and "error" in data:
        text = str(data["error"])
    elif data is not None:
        text = raw.decode(errors="replace")
    else:
        text = raw.decode(errors="replace").strip()
        if not text:
            return "(empty body)"
        if "html" in content_type or "<" in text[:_QUOTED] or "\n" in text:
            return (
                f"not an rshub hub's answer ({content_type or 'no type'}, {len(raw)} bytes): "
                "is --hub the hub's base URL?"
            )
    text = " ".join(text.split())
    return text if len(text) <= _QUOTED else text[: _QUOTED - 1] + "…"


def _retrieve(future: asyncio.Future[list[str]]) -> None:
    if not future.cancelled():
        future.exception()

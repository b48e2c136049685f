"""Following a topic: push when it can, polling when it must, each change once.

:class:`Follower` runs one push transport (WebSocket, SSE or a WebSub callback) as a
background producer and falls back to a :class:`~subscriber.poller.Poller` when push is
unreachable or lost. While polling it retries push every ``push_retry`` seconds; once push
is back, it resumes from the last event id and stops polling.

Guarantees to the caller of :meth:`Follower.batches`:

- order: changes come in the order of their transport (event-id order for push, document
  order for polling);
- nothing lost across switches: push resumes from the last event id, polling re-reads from
  the watermark minus ``overlap``;
- nothing twice: every change passes :meth:`EventCursor.accept` (event id, else
  ``(loc, lastmod)``) before it is handed over; a replayed dead letter (WebSub
  ``X-RSHub-Replay``) comes out of order, handed over only if newer than its resource's last;
- start: from the position's event id or watermark; with neither and ``start_at_end``,
  at the current end, whichever transport comes first (a first poll only records);
- a hub refusal (4xx: bad topic name, bad ``since``) ends :meth:`batches` with
  :class:`~subscriber.exceptions.HubRefused`;
- a WebSub gap notice (the hub trimmed changes before delivering them) is awaited as
  ``on_gap(gap)`` (e.g. a new baseline from the Resource List) before the changes that
  follow it are handed over; without ``on_gap`` it ends :meth:`batches` with
  :class:`~subscriber.exceptions.ChangesTrimmed`: never a silent loss. With ``latest``
  (a mirror: polling the hub's ``changes.xml``, the latest change of each URI), the same
  goes for changes that document no longer lists after the position; after ``on_gap`` the
  position moves on to them (the new baseline holds them);
- restart: the position is saved (debounced, and on exit) once the caller asks for the next
  batch, i.e. after it handled the previous one. A crash may repeat the last batch.

``token``, a private topic's read token, goes with every request to the hub: the stream or
WebSub subscription, the checks of the topic and of ``since``, and every document polled
from the hub (:class:`~rsclient.hub_token.HubToken`: to the hub's origin only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Literal

import aiohttp

from rsclient.hub_token import HubToken

from .callback import CallbackReceiver
from .events import ChangeEvent, Gap
from .exceptions import (
    ChangesNoLongerListed,
    ChangesTrimmed,
    HubRefused,
    PushUnavailable,
    SourceError,
)
from .filters import ChangeFilter
from .poller import Poller
from .position import EventCursor
from .refusal import error_message, refusal, unknown_topic
from .signatures import Scheme
from .stream import HubStream

__all__ = ["Follower", "Mode", "Via"]

log = logging.getLogger(__name__)

Via = Literal["ws", "sse", "webhook", "poll"]
Mode = Literal["push", "poll"]


class _Lost:
    def __init__(self, error: Exception) -> None:
        self.error = error
        #: The hub refused (4xx): no fallback or retry can help.
        self.fatal = isinstance(error, HubRefused)


class Follower:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        position: EventCursor,
        *,
        hub: str | None = None,
        topic: str | None = None,
        source: str | None = None,
        via: Via = "ws",
        fallback: bool = True,
        token: str | None = None,
        poll_interval: float = 5.0,
        push_retry: float = 10.0,
        overlap: timedelta = timedelta(seconds=30),
        save: Callable[[EventCursor], None] | None = None,
        save_interval: float = 0.5,
        callback_host: str = "127.0.0.1",
        callback_port: int = 0,
        callback_url: str | None = None,
        on_mode: Callable[[Mode, str], None] | None = None,
        start_at_end: bool = False,
        on_gap: Callable[[Gap], Awaitable[None]] | None = None,
        event_filter: ChangeFilter | None = None,
        signature: Scheme = "websub",
        waits: bool = True,
        latest: bool = False,
    ) -> None:
        """``event_filter``: only these changes (the hub filters what it pushes, polled
        Change Lists are filtered here); ``signature``: what a WebSub callback asks for;
        ``waits``: False for a one-shot caller (``sync --once``), which is told at
        :meth:`start` that the hub cannot be reached (:class:`SourceError`) instead of
        the follower saying it waits for a hub it will never wait for; ``latest``: poll
        the hub's ``changes.xml`` (the latest change of each URI: for a mirror, which
        needs no intermediate change) instead of its Change List pages."""
        if via != "poll" and (hub is None or topic is None):
            raise ValueError("push needs hub and topic")
        self.session = session
        self.position = position
        self.hub = None if hub is None else hub.rstrip("/")
        self.topic = topic
        self.via = via
        self.token = token
        #: The token as sent: to the hub only.
        self.hub_token = HubToken.of(self.hub, token)
        self.poll_interval = poll_interval
        self.push_retry = push_retry
        self._save = save
        self._save_interval = save_interval
        self._on_mode = on_mode
        self._on_gap = on_gap
        self.event_filter = event_filter
        self.signature: Scheme = signature
        self.waits = waits
        poll_start = source
        if poll_start is None and self.hub is not None:
            poll_start = (
                f"{self.hub}/.well-known/resourcesync"
                if topic is None
                else f"{self.hub}/topics/{topic}/capabilitylist.xml"
            )
        self.poller: Poller | None = None
        #: Polling the hub's latest changes: the marker there judges the position.
        self.latest = latest and self.hub is not None and topic is not None and source is None
        if poll_start is not None and (via == "poll" or fallback):
            self.poller = Poller(
                session,
                poll_start,
                topic=topic,
                overlap=overlap,
                token=self.hub_token,
                latest=f"{self.hub}/topics/{topic}/changes.xml" if self.latest else None,
            )
        self.mode: Mode = "poll" if via == "poll" else "push"
        self._queue: asyncio.Queue[list[ChangeEvent] | Gap | _Lost] = asyncio.Queue(1000)
        #: A gap notice taken from the queue but not handled yet (changes before it were).
        self._held: Gap | None = None
        self._producer: asyncio.Task[None] | None = None
        self._receiver: CallbackReceiver | None = None
        self._receiver_opts = (callback_host, callback_port, callback_url)
        self._next_push = 0.0
        #: Set when push connected, or failed to.
        self._ready = asyncio.Event()
        #: Set while the push transport is connected (or subscribed).
        self._connected = asyncio.Event()
        self._dirty = False
        self._saved_at = 0.0
        #: Polling starts at the current end (as push does without ``since``): the first
        #: successful poll only records what is already listed.
        self._primed = not (
            start_at_end and position.event_id is None and position.watermark is None
        )
        #: Changes before push first connected (with no position) are not the caller's.
        self._not_before: datetime | None = None
        #: The failure last said about reaching the hub or Source (None: it answers).
        self._trouble: str | None = None
        #: The topic had never been published to when we started (said once).
        self._new_topic = False

    async def __aenter__(self) -> Follower:
        # ``async with`` runs no ``__aexit__`` when entering fails or is cancelled (SIGINT
        # soon after subscribing): push may be subscribed by then, so undo it here.
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self, *, wait: float = 10.0) -> None:
        """Connect push in the background; its changes queue up until :meth:`batches`.

        Waits (at most ``wait`` seconds) until push is connected or known to be down, so
        that a baseline taken after this call misses nothing that push will not bring.
        Until push is connected the follower polls.
        """
        self.mode = "poll"
        if self.hub is not None and self.topic is not None:
            await self._check_topic()
        if self.via == "poll":
            if self.hub is not None and self.topic is not None and not self.latest:
                await self._check_since()
            self._set_mode("poll", "polling only")
        if self.via != "poll":
            self._start_push()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):  # keeps a cancel (3.11's wait_for may not)
                    await self._ready.wait()
            if self._connected.is_set():
                self._set_mode("push", "connected")

    async def _check_topic(self) -> None:
        """Say once when the hub or the topic is not there yet; the follower waits for both.

        A topic nothing was ever published to is not a mistake (subscribers may come
        first), but a typo looks the same: every transport says so, then waits for the
        first publish.
        """
        assert self.hub is not None and self.topic is not None
        url = f"{self.hub}/topics/{self.topic}/capabilitylist.xml"
        headers = self.hub_token.headers(url) if self.hub_token else {}
        try:
            async with self.session.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                status = resp.status
                message = await error_message(resp) if status == 404 else ""
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            what = f"cannot reach the hub at {self.hub}: {exc or type(exc).__name__}"
            if not self.waits:
                raise SourceError(what) from None
            self._unreachable(what)
            return
        if unknown_topic(status, message):
            self._topic_not_yet()

    def _topic_not_yet(self) -> None:
        if not self._new_topic:
            self._new_topic = True
            # Everything published from now on is new to us: nothing to skip at a first poll.
            self._primed = True
            log.warning(
                "topic %r has no changes yet at %s (nothing was ever published to it); "
                "waiting for its first publish",
                self.topic,
                self.hub,
            )

    def _unreachable(self, what: str) -> None:
        """Say once that the hub (or Source) cannot be used; later failures only with -v."""
        if self._trouble is None:
            log.warning("%s; waiting for it (retrying quietly; -v logs each try)", what)
        else:
            log.info("%s", what)
        self._trouble = what

    @property
    def unreachable(self) -> str | None:
        """Why the hub or Source cannot be reached now (said once), else ``None``."""
        return self._trouble

    def _reachable(self) -> None:
        if self._trouble is not None:
            log.info("reachable again (after: %s)", self._trouble)
            self._trouble = None

    async def _check_since(self) -> None:
        """Polling the hub from an event id: have the hub judge that id first (400 when
        malformed, 410 when no longer retained), as it does for push."""
        since = self.position.event_id
        if since is None:
            return
        url = f"{self.hub}/topics/{self.topic}/events"
        headers = {"Accept": "text/event-stream", "Last-Event-ID": since}
        if self.hub_token is not None:
            headers.update(self.hub_token.headers(url))
        try:
            async with self.session.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                if refusal(resp.status):
                    raise HubRefused(resp.status, await error_message(resp))
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("cannot check since=%s at the hub: %s", since, exc)

    async def close(self) -> None:
        await self._stop_push()
        if self._receiver is not None:
            await self._receiver.close()
            self._receiver = None
        self.flush()

    def flush(self) -> None:
        """Save the position now if it changed."""
        if self._dirty and self._save is not None:
            self._save(self.position)
            self._dirty = False
            self._saved_at = time.monotonic()

    async def events(self) -> AsyncIterator[ChangeEvent]:
        async for batch in self.batches():
            for event in batch:
                yield event

    async def batches(self) -> AsyncIterator[list[ChangeEvent]]:
        """New changes, batch by batch, forever (until cancelled)."""
        while True:
            if self.mode == "push":
                item: list[ChangeEvent] | Gap | _Lost | None = self._held
                self._held = None
                if item is None:
                    try:
                        async with asyncio.timeout(self._save_interval if self._dirty else None):
                            item = await self._queue.get()
                    except TimeoutError:
                        self.flush()
                        continue
                new = await self._take(item)
            else:
                new = await self._drain_push()
                if self.mode == "poll" and not new:
                    new = await self._poll_once()
            if new:
                self._dirty = True
                yield new
                self._maybe_save()
            elif self.mode == "poll":
                await self._idle()

    async def _take(self, item: list[ChangeEvent] | Gap | _Lost) -> list[ChangeEvent]:
        if isinstance(item, _Lost):
            if item.fatal:
                raise item.error
            self._push_lost(item.error)
            return []
        if isinstance(item, Gap):
            if self._on_gap is None:
                raise ChangesTrimmed(item.trimmed_through, item.resourcelist)
            log.warning("changes through %s trimmed unsent: catching up", item.trimmed_through)
            await self._on_gap(item)
            return []
        return [e for e in item if self.position.accept(e)]

    async def _drain_push(self) -> list[ChangeEvent]:
        """While polling: take what a (re)connecting push producer has queued."""
        new: list[ChangeEvent] = []
        while self._held is not None or not self._queue.empty():
            item = self._held or self._queue.get_nowait()
            self._held = None
            if isinstance(item, Gap) and new:  # the changes before the gap go out first
                self._held = item
                break
            new.extend(await self._take(item))
        if self._connected.is_set() and self._producer is not None and not self._producer.done():
            self._set_mode("push", "push is back")
        return new

    def _set_mode(self, mode: Mode, why: str) -> None:
        if mode != self.mode:
            log.info("switching to %s: %s", mode, why)
        self.mode = mode
        if self._on_mode is not None:
            self._on_mode(mode, why)

    def _push_lost(self, error: Exception) -> None:
        if self.poller is None:
            # Nothing to fall back on: keep trying push.
            self._unreachable(f"push lost ({error})")
            self._next_push = time.monotonic() + min(self.push_retry, 1.0)
            self._set_mode("poll", f"push lost: {error}")
            return
        self._next_push = time.monotonic() + self.push_retry
        self._set_mode("poll", f"push lost: {error}")

    async def catch_up(self) -> list[ChangeEvent]:
        """One poll, for a one-shot caller (``sync --once``): the changes listed after the
        position, not yet judged by it; changes no longer listed after it as in
        :meth:`batches` (``on_gap``, then the position moves on, else raised)."""
        if self.poller is None:
            return []
        try:
            return await self.poller.poll(self.position.watermark, self.position.event_id)
        except ChangesNoLongerListed as exc:
            await self._lost(exc)
        return await self.poller.poll(self.position.watermark, self.position.event_id)

    async def _lost(self, exc: ChangesNoLongerListed) -> None:
        """Changes no longer listed that this position lacks: a new baseline (``on_gap``),
        which holds them, then on from there; without ``on_gap``, the error."""
        if self._on_gap is None:
            raise exc
        log.warning("changes through %s no longer listed: catching up", exc.trimmed_through)
        await self._on_gap(Gap(exc.trimmed_through, exc.resourcelist, unlisted=True))
        self.position.rebaselined(exc.trimmed_through)
        self._dirty = True

    async def _poll_once(self) -> list[ChangeEvent]:
        if self.poller is not None:
            try:
                changes = await self.poller.poll(self.position.watermark, self.position.event_id)
            except ChangesNoLongerListed as exc:
                await self._lost(exc)
                changes = []
            except HubRefused as exc:
                if not (self.topic is not None and unknown_topic(exc.status, exc.message)):
                    raise
                self._topic_not_yet()  # not published to yet: wait for it, quietly
                changes = []
            except SourceError as exc:
                self._unreachable(f"poll failed: {exc}")
                changes = []
            else:
                self._reachable()
                if self._not_before is not None:
                    changes = [e for e in changes if e.when >= self._not_before]
                if not self._primed:
                    self._primed = True
                    for event in changes:
                        self.position.record(event)
                    changes = []
                    log.info("polling from the current end (after %s)", self.position.event_id)
            # A change filtered out still moves the position on (accept() records it).
            wanted = self.event_filter.accepts if self.event_filter else None
            new = [e for e in changes if self.position.accept(e) and (not wanted or wanted(e))]
            if new:
                return new
        if self.via != "poll" and time.monotonic() >= self._next_push:
            self._start_push()  # stays in poll mode until connected
        return []

    async def _idle(self) -> None:
        self._maybe_save(force=True)
        until_push = max(0.05, self._next_push - time.monotonic())
        if self.poller is None:
            delay = until_push
        else:
            delay = self.poll_interval
            if self.via != "poll":
                delay = min(delay, until_push)
        await asyncio.sleep(delay)

    def _maybe_save(self, force: bool = False) -> None:
        if force or time.monotonic() - self._saved_at >= self._save_interval:
            self.flush()

    def _start_push(self) -> None:
        if self._producer is not None and not self._producer.done():
            return
        while not self._queue.empty():  # stale batches of a previous connection
            self._queue.get_nowait()
        self._ready.clear()
        self._connected.clear()
        self._next_push = time.monotonic() + self.push_retry
        self._producer = asyncio.create_task(self._produce())

    async def _stop_push(self) -> None:
        if self._producer is not None:
            self._producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._producer
            self._producer = None

    async def _produce(self) -> None:
        assert self.hub is not None and self.topic is not None
        try:
            if self.via == "webhook":
                await self._produce_webhook()
            else:
                stream = HubStream(
                    self.session,
                    self.hub,
                    self.topic,
                    transport=self.via,  # type: ignore[arg-type]
                    since=self._push_since(),
                    token=self.token,
                    event_filter=self.event_filter,
                )
                watcher = asyncio.create_task(stream.connected.wait())
                watcher.add_done_callback(self._on_connected)
                try:
                    async for batch in stream.batches():
                        await self._queue.put(batch)
                finally:
                    watcher.cancel()
        except (PushUnavailable, HubRefused) as exc:
            await self._queue.put(_Lost(exc))
        except Exception as exc:  # a bug or a bad message must not hang the follower
            log.exception("push failed")
            await self._queue.put(_Lost(exc))
        finally:
            self._connected.clear()
            self._ready.set()

    def _push_since(self) -> str | None:
        """Where push starts: after the last event delivered; on a topic that was empty
        when we looked, at its beginning ("0"), so a first publish made before push
        connected is replayed, not missed; else at the live end."""
        if self.position.event_id is not None:
            return self.position.event_id
        return "0" if self._new_topic else None

    def _on_connected(self, task: asyncio.Task[bool]) -> None:
        if not task.cancelled():
            self._push_started()
            self._connected.set()
            self._ready.set()

    def _push_started(self) -> None:
        """Push began at the live end: a later fallback poll starts there too."""
        self._reachable()
        if not self._primed:
            self._primed = True
            self._not_before = datetime.now(UTC)
            if self.position.watermark is None:
                self.position.watermark = self._not_before

    async def _produce_webhook(self) -> None:
        assert self.hub is not None and self.topic is not None
        if self._receiver is None:
            host, port, url = self._receiver_opts
            self._receiver = CallbackReceiver(
                self.session,
                self.hub,
                self.topic,
                host=host,
                port=port,
                callback_url=url,
                signature=self.signature,
                event_filter=self.event_filter,
                token=self.token,
            )
            await self._receiver.start()
        receiver = self._receiver
        await receiver.subscribe(since=self._push_since())
        self._push_started()
        self._connected.set()
        self._ready.set()

        async def watch() -> None:
            # WebSub has no liveness signal: check the hub's health while subscribed.
            while True:
                await asyncio.sleep(self.poll_interval)
                try:
                    async with self.session.get(
                        f"{self.hub}/healthz", timeout=aiohttp.ClientTimeout(total=5)
                    ) as resp:
                        if resp.status >= 500:
                            raise PushUnavailable(f"hub unhealthy: HTTP {resp.status}")
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    raise PushUnavailable(f"hub unreachable: {exc}") from exc

        watcher = asyncio.create_task(watch())
        try:
            batches = receiver.deliveries().__aiter__()
            while True:
                getter = asyncio.ensure_future(batches.__anext__())
                done, _ = await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if watcher in done:
                    getter.cancel()
                    watcher.result()
                await self._queue.put(getter.result())
        finally:
            watcher.cancel()

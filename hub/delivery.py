"""WebSub content distribution: one :class:`DeliveryWorker` per verified subscription.

Contract (WebSub §7, plus rshub's guarantees): **at-least-once, in event-id order per
subscription**. A worker reads the events after its cursor (shared in-memory tail, Redis
for older ones), POSTs them as one ``changelist-notification`` (bounded count and bytes),
and advances the cursor only after a 2xx (written to Redis within 50 ms, coalesced).
Failures are retried with exponential back-off and jitter (``Retry-After`` honoured,
capped); ``410 Gone`` ends the subscription; after ``suspend_after_failures`` consecutive
failures the subscription is marked suspended and probed at the longest back-off until its
callback recovers. Each worker has exactly one
request in flight, so a slow or dead callback delays nobody else.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import rendering, websub
from .events import Event, parse_id
from .exceptions import CallbackFailed
from .feed import FeedHub
from .settings import Settings
from .subscriptions import CursorWriter, State, Subscription, SubscriptionStore
from .tasks import cancel_and_wait
from .topics import HubUrls

log = logging.getLogger(__name__)

#: Headers naming the first and last event ids of a delivery body and their count (each
#: entry's own id is its ``rs:md/@rshub:id``, see :mod:`hub.rendering`).
FIRST_EVENT_ID_HEADER = "X-RSHub-First-Event-Id"
LAST_EVENT_ID_HEADER = "X-RSHub-Last-Event-Id"
EVENT_COUNT_HEADER = "X-RSHub-Event-Count"


@dataclass(frozen=True, slots=True)
class Answer:
    """What a callback answered."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class CallbackClient(Protocol):
    """The HTTP client delivery needs (:class:`hub.web_client.HttpClient` in the hub).

    Both methods never follow redirects and raise :class:`CallbackFailed` when the callback
    cannot be reached or does not answer in time.
    """

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Answer: ...

    async def get(self, url: str, limit: int) -> Answer: ...


class _Gone(Exception):
    """The subscription ended (410, expiry or unsubscription) while delivering."""


class DeliveryWorker:
    def __init__(
        self,
        sub: Subscription,
        *,
        settings: Settings,
        client: CallbackClient,
        store: SubscriptionStore,
        feeds: FeedHub,
        cursors: CursorWriter,
    ) -> None:
        self.sub = sub
        self.settings = settings
        self.urls = HubUrls(settings.public_url)
        self.client = client
        self.store = store
        self.feeds = feeds
        self.cursors = cursors
        self.task: asyncio.Task[None] | None = None
        self.delivered = 0

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"deliver:{self.sub.callback}")

    async def stop(self) -> None:
        await cancel_and_wait([self.task])

    def _batch(self, events: list[Event]) -> list[Event]:
        """Cut ``events`` to the byte budget (always at least one event)."""
        budget = self.settings.delivery_batch_max_bytes
        size = 0
        for i, event in enumerate(events):
            size += len(event.xml(rendering.event_entry)) + 16
            if size > budget and i > 0:
                return events[:i]
        return events

    async def run(self) -> None:
        sub = self.sub
        feed = await self.feeds.acquire(sub.topic)
        try:
            cursor_text = await self.store.cursor(sub.topic, sub.callback) or "0-0"
            cursor = parse_id(cursor_text)
            limit = self.settings.delivery_batch_max_changes
            while True:
                remaining = sub.expires_at - time.time()
                if remaining <= 0:
                    raise _Gone("lease expired")
                events = await feed.read_after(cursor, limit, timeout=min(remaining, 60.0))
                if not events:
                    continue
                batch = self._batch(events)
                await self._deliver(batch)
                cursor = batch[-1].key
                self.delivered += len(batch)
        except _Gone as exc:
            log.info("subscription %s -> %r ended: %r", sub.topic, sub.callback, str(exc))
            self.cursors.forget(sub.topic, sub.callback)
            await self.store.delete(sub.topic, sub.callback)
        finally:
            await self.feeds.release(feed)

    async def _deliver(self, batch: list[Event]) -> None:
        """POST ``batch`` until a 2xx; raise :class:`_Gone` if the subscription ends."""
        sub = self.sub
        body = rendering.notification(batch, up=self.urls.capabilitylist(sub.topic))
        headers = {
            "Content-Type": "application/xml",
            "Link": self.urls.links(sub.topic_url),
            FIRST_EVENT_ID_HEADER: batch[0].id,
            LAST_EVENT_ID_HEADER: batch[-1].id,
            EVENT_COUNT_HEADER: str(len(batch)),
        }
        if sub.secret:
            headers["X-Hub-Signature"] = websub.signature(sub.secret, body)
        while True:
            if sub.expired:
                raise _Gone("lease expired")
            retry_after: float | None = None
            try:
                answer = await self.client.post(sub.callback, body, headers)
            except CallbackFailed as exc:
                error = str(exc)[:300]
            else:
                if answer.status == 410:
                    raise _Gone("callback answered 410 Gone")
                if 200 <= answer.status < 300:
                    await self._succeeded(batch[-1].id)
                    return
                retry_after = websub.retry_after(answer.headers.get("Retry-After"))
                error = f"HTTP {answer.status}"
            await self._failed(error)
            delay = websub.backoff(
                sub.failures, self.settings.retry_base_seconds, self.settings.retry_max_seconds
            )
            if retry_after is not None:
                delay = min(max(delay, retry_after), self.settings.retry_max_seconds)
            await asyncio.sleep(delay)

    async def _succeeded(self, last_id: str) -> None:
        sub = self.sub
        self.cursors.mark(sub.topic, sub.callback, last_id)
        if sub.failures or sub.state is not State.ACTIVE:
            if sub.state is State.SUSPENDED:
                log.info("subscription %s -> %r resumed", sub.topic, sub.callback)
            sub.failures, sub.state, sub.last_error = 0, State.ACTIVE, None
            await self.store.save(sub)

    async def _failed(self, error: str) -> None:
        sub = self.sub
        sub.failures += 1
        sub.last_error = error
        if sub.failures >= self.settings.suspend_after_failures and sub.state is State.ACTIVE:
            sub.state = State.SUSPENDED
            log.warning(
                "subscription %s -> %r suspended after %d failures: %r",
                sub.topic,
                sub.callback,
                sub.failures,
                error,
            )
            await self.store.save(sub)
        elif sub.failures == 1:
            await self.store.save(sub)


class DeliveryService:
    """Verifies intent (WebSub §5.3) and runs a worker per active subscription."""

    def __init__(
        self,
        settings: Settings,
        client: CallbackClient,
        store: SubscriptionStore,
        feeds: FeedHub,
        last_id: Callable[[str], Awaitable[str | None]],
    ) -> None:
        self.settings = settings
        self.client = client
        self.store = store
        self.feeds = feeds
        self.last_id = last_id
        self.workers: dict[tuple[str, str], DeliveryWorker] = {}
        self.cursors = CursorWriter(store.redis)
        self._tasks: set[asyncio.Task[None]] = set()
        self._verify_slots = asyncio.Semaphore(64)

    async def start(self) -> None:
        """Resume every stored subscription from its cursor (after a restart too)."""
        self.cursors.start()
        for sub in await self.store.all():
            if sub.expired:
                await self.store.delete(sub.topic, sub.callback)
            else:
                self._run_worker(sub)

    async def close(self) -> None:
        await cancel_and_wait(list(self._tasks))
        await asyncio.gather(*(w.stop() for w in self.workers.values()))
        self.workers.clear()
        await self.cursors.close()

    def _run_worker(self, sub: Subscription) -> None:
        key = (sub.topic, sub.callback)
        worker = DeliveryWorker(
            sub,
            settings=self.settings,
            client=self.client,
            store=self.store,
            feeds=self.feeds,
            cursors=self.cursors,
        )
        self.workers[key] = worker
        worker.start()
        assert worker.task is not None
        worker.task.add_done_callback(lambda _t: self._forget(key, worker))

    def _forget(self, key: tuple[str, str], worker: DeliveryWorker) -> None:
        if self.workers.get(key) is worker:
            del self.workers[key]

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def request(self, req: websub.SubscriptionRequest) -> None:
        """Accepted (202): verify intent in the background, then (de)activate.

        A new subscription without ``hub.since`` starts at the topic's end as of *this*
        request, not of its later verification: changes published after the subscriber
        got its 202 are delivered, whatever the verification takes.
        """
        start = await self.last_id(req.topic) if req.since is None else None
        self._spawn(self._verify(req, start or "0-0"))

    def deny(self, callback: str, topic_url: str, reason: str) -> None:
        self._spawn(self._send_denial(callback, topic_url, reason))

    async def _send_denial(self, callback: str, topic_url: str, reason: str) -> None:
        url = websub.denial_url(callback, topic_url, reason)
        async with self._verify_slots:
            try:
                await self.client.get(url, 4096)
            except CallbackFailed as exc:
                log.info("denial to %r not delivered: %r", callback, str(exc))

    async def _verify(self, req: websub.SubscriptionRequest, start: str) -> None:
        challenge = websub.new_challenge()
        lease = req.lease_seconds if req.mode is websub.Mode.SUBSCRIBE else None
        url = websub.verification_url(req.callback, req.mode, req.topic_url, challenge, lease)
        try:
            async with self._verify_slots:
                answer = await self.client.get(url, 4096)
        except CallbackFailed as exc:
            log.info("verification of %r for %s failed: %r", req.callback, req.topic, str(exc))
            return
        if not (200 <= answer.status < 300 and answer.body.strip() == challenge.encode()):
            log.info(
                "verification of %r for %s refused (status %s)",
                req.callback,
                req.topic,
                answer.status,
            )
            return
        key = (req.topic, req.callback)
        old = self.workers.pop(key, None)
        if old is not None:
            await old.stop()
        if req.mode is websub.Mode.UNSUBSCRIBE:
            self.cursors.forget(req.topic, req.callback)
            await self.store.delete(req.topic, req.callback)
            log.info("unsubscribed %r from %s", req.callback, req.topic)
            return
        await self.cursors.flush()  # a re-subscription continues from the newest cursor
        previous = await self.store.get(req.topic, req.callback)
        cursor = req.since
        if cursor is None and previous is None:
            cursor = start
        sub = Subscription(
            topic=req.topic,
            topic_url=req.topic_url,
            callback=req.callback,
            lease_seconds=req.lease_seconds,
            expires_at=time.time() + req.lease_seconds,
            secret=req.secret,
            created_at=previous.created_at if previous else time.time(),
        )
        await self.store.activate(sub, cursor)
        log.info("subscribed %r to %s", req.callback, req.topic)
        self._run_worker(sub)

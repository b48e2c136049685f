"""WebSub content distribution: one :class:`DeliveryWorker` per owned subscription.

Contract (WebSub §7, plus rshub's guarantees): **at-least-once, in event-id order per
subscription**, each subscription delivered by one process at a time (:mod:`hub.live.ownership`).
A worker reads the events after its cursor (shared in-memory tail, Redis for older ones),
POSTs them as one ``changelist-notification`` (bounded count and bytes), and advances the
cursor after each 2xx, before its next POST (a fenced write, committed in groups), so a
process that dies re-sends at most the batch it had in flight. Failures are retried with
exponential back-off and jitter (``Retry-After`` honoured, capped); the failure count, state
and next retry time are saved with the subscription, so a new owner continues the back-off.
``410 Gone`` ends the subscription; what other failures lead to (suspension, a batch moved
to the dead letters after ``retry_window_seconds``, disabling after ``disable_after_seconds``)
is :mod:`hub.core.failure_policy`; a suspended one is probed at the longest back-off. Each
worker has exactly one request in flight, so a slow or dead callback delays nobody else, and
it sends nothing while its lease is not known to be valid. A worker caught up with its feed
has its next POST written by the feed's own fan-out (:meth:`DeliveryWorker.offer`), so one
publish's POSTs to every callback go out in one loop turn; its task then awaits the answer
and handles it exactly as one it sent itself.

A plain WebSub topic's delivery (:mod:`hub.core.topic_content`) is the topic's content as it
is when the batch is sent, with its own ``Content-Type``, standing for every change of the
batch; every other rule is the same. Its content is read from Redis, so the feed's fan-out
leaves it to the worker's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from asyncio import FIRST_COMPLETED
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

from hub.core import metrics, websub
from hub.core.damage import DamageLog
from hub.core.events import Event, EventKey, parse_id
from hub.core.exceptions import CallbackFailed, DamagedData
from hub.core.failure_policy import Decision, FailurePolicy, Track, Verdict
from hub.core.placement import SubscriptionKey, subscription_id
from hub.core.retrying import STORE_OUTAGE, retrying
from hub.core.revocations import Revocations
from hub.core.settings import Settings
from hub.core.tasks import Tasks, cancel_and_wait
from hub.core.topic_content import PlainTopics, TopicContent
from hub.core.topics import HubUrls
from hub.live.callback_connections import Prefix, Started, header_block, length_line
from hub.live.delivery_posts import (
    DeliveryPost,
    DeliveryPosts,
    current_content,
    event_id_headers,
    fitting,
    notification_body,
)
from hub.live.feed import FeedHub, TopicFeed
from hub.live.http_client import Answer, HttpClient
from hub.live.ownership import Lease
from hub.live.subscription_terms import Terms, apply_terms
from hub.store.attempts import Attempt, AttemptStore, AttemptWriter
from hub.store.dead_letters import DeadLetterStore
from hub.store.redis_connection import StoreError
from hub.store.subscriptions import (
    CursorWriter,
    FailedVerification,
    State,
    Subscription,
    SubscriptionStore,
)
from hub.store.topic_contents import ContentStore
from rsclient.backoff import Backoff, parse_retry_after

log = logging.getLogger(__name__)

#: How long a worker waits for its node's heartbeat to vouch for its lease again.
_LEASE_PATIENCE = 60.0

#: Subscriptions whose records :meth:`DeliveryService.start_workers` reads in one round trip,
#: and how many workers it makes before it lets the event loop run.
_START_CHUNK = 500
_START_STRETCH = 50


class _Gone(Exception):
    """The subscription ended (410, expiry or unsubscription) while delivering."""


class _Lost(Exception):
    """This process no longer holds the subscription's lease."""


class _Sent(NamedTuple):
    """A delivery :meth:`DeliveryWorker.offer` started, for the worker's task to finish."""

    batch: list[Event]
    body: bytes
    #: The event the cursor moves to once it is delivered.
    through: Event
    request: Started
    started: float


#: Stored changes that are not the hub's, gone past by deliveries, said once.
_damage = DamageLog(log)


def _whole(events: list[Event], topic: str) -> list[Event]:
    """``events`` without those whose stored change is not the hub's JSON (an entry another
    program added): a delivery goes past them, where rendering one stopped the subscription
    at it. Decoding here costs nothing more: rendering and filters use the same cache."""
    whole = []
    for event in events:
        try:
            event.fields  # noqa: B018  # decoded (and cached) or refused
        except DamagedData as exc:
            _damage.damaged(f"topic {topic!r} stream entry {event.id}", exc)
            continue
        whole.append(event)
    return whole


class Rendered(NamedTuple):
    """A batch as every subscription that is sent it gets it: the body, and the header lines
    naming its events and its length, encoded once (a publish's fan-out writes each POST
    from these and the callback's :class:`Prefix`)."""

    batch: list[Event]
    body: bytes
    #: The ``X-RSHub-First-Event-Id``, ``-Last-Event-Id`` and ``-Event-Count`` lines.
    ids: bytes
    #: The ``Content-Length`` line that ends the head.
    length: bytes


class Bodies:
    """Delivery bodies shared by the workers of a topic.

    Every subscription of a topic that is live reads the same events from the same
    cursor, so the cut to the byte budget and the ``changelist-notification`` are computed
    once per batch, not once per subscription (rendering was a sixth of the hub's time per
    delivery with 100 callbacks, py-spy on bench/hub.py). Only the signature, which
    depends on each subscription's secret, is computed per delivery.
    """

    def __init__(self, urls: HubUrls, max_bytes: int, size: int = 256) -> None:
        self.urls = urls
        self.max_bytes = max_bytes
        self.size = size
        self._cache: OrderedDict[tuple[str, str, int, str | None, object], Rendered] = OrderedDict()
        #: The last batch asked for, found again by the identity of its list: a fan-out
        #: hands every unfiltered worker the same list.
        self._last: tuple[list[Event], object, str, Rendered] | None = None

    def get(
        self, topic: str, events: list[Event], gap: str | None = None, variant: object = None
    ) -> tuple[list[Event], bytes]:
        """The batch to send from ``events`` (cut to the byte budget), and its body; ``gap``
        is the last trimmed id the subscription missed before them, if any; ``variant``
        names how ``events`` were picked from the stream (a subscription's filter)."""
        rendered = self.rendered(topic, events, gap, variant)
        return rendered.batch, rendered.body

    def rendered(
        self, topic: str, events: list[Event], gap: str | None = None, variant: object = None
    ) -> Rendered:
        """:meth:`get`, with the batch's shared header lines."""
        last = self._last
        if gap is None and last and last[0] is events and last[1] == variant and last[2] == topic:
            return last[3]  # the same list again: the next worker of the same fan-out
        # A stream is append-only: its first id and length name a slice of it.
        key = (topic, events[0].id, len(events), gap, variant)
        hit = self._cache.get(key)
        if hit is not None:
            if gap is None:
                self._last = (events, variant, topic, hit)
            return hit
        fit = fitting(events, self.max_bytes)
        batch = events if fit == len(events) else events[:fit]
        body = notification_body(self.urls, topic, batch, gap)
        ids = header_block(event_id_headers(batch))
        rendered = self._cache[key] = Rendered(batch, body, ids, length_line(body))
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        if gap is None:
            self._last = (events, variant, topic, rendered)
        return rendered


class DeliveryWorker:
    def __init__(
        self,
        sub: Subscription,
        lease: Lease,
        *,
        node: str,
        settings: Settings,
        client: HttpClient,
        store: SubscriptionStore,
        feeds: FeedHub,
        cursors: CursorWriter,
        bodies: Bodies,
        dead_letters: DeadLetterStore,
        deny: Callable[[str, str, str], Awaitable[bool]] | None = None,
        attempts: AttemptWriter | None = None,
        contents: ContentStore | None = None,
        cursor: str | None = None,
    ) -> None:
        """``contents``: where the topic's content is, when it is a plain WebSub topic
        (its deliveries are that content, :mod:`hub.core.topic_content`); ``cursor``: its
        delivery cursor, read with its record (None: read as it starts)."""
        self.sub = sub
        self._start_cursor = cursor
        self.lease = lease
        self.node = node
        self.settings = settings
        self.urls = HubUrls(settings.public_url)
        self.client = client
        self.store = store
        self.feeds = feeds
        self.cursors = cursors
        self.bodies = bodies
        self.backoff = Backoff(settings.retry_base_seconds, settings.retry_max_seconds)
        self.policy = FailurePolicy(
            self.backoff,
            settings.retry_window_seconds,
            settings.disable_after_seconds,
            settings.suspend_after_failures,
        )
        self.dead_letters = dead_letters
        #: Sends a WebSub denial (``hub.mode=denied``) once disabled; True if answered.
        self.deny = deny
        #: The callback answered this worker's denial (a new owner sends it once more).
        self.denied = False
        #: Its filter, rate limit and signatures.
        self.terms = Terms(sub, settings)
        self.bucket = self.terms.rate_limit.bucket(time.monotonic())
        self.contents = contents
        #: Its POSTs, made as a dead-letter replay's are (:mod:`hub.live.delivery_posts`).
        self.posts = DeliveryPosts(sub, self.urls, node)
        self.attempts = attempts
        self.task: asyncio.Task[None] | None = None
        self.delivered = 0
        #: Set while a POST is in flight (a stop waits briefly for it, see stop()).
        self.posting = False
        #: Set while no delivery attempt (POST and its cursor write) is under way.
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False
        #: While the worker waits caught up with its feed: what :meth:`offer` answers.
        self._offered: asyncio.Future[_Sent | None] | None = None
        #: The feed's last event when that wait began: an offer of events up to it (the
        #: feed pushes a pass of the loop after it adds, :meth:`TopicFeed._push`) brings
        #: nothing new.
        self._waited_at: EventKey = (0, 0)
        self._feed: TopicFeed | None = None
        #: Counts for tests and operators: deliveries started by offer(), and offers
        #: left to the worker's task (a condition offer() does not handle).
        self.offers_sent = 0
        self.offers_declined = 0
        #: The start of its POSTs, encoded once (False: its URL or a header cannot be,
        #: and each attempt fails as :meth:`HttpClient.post` says).
        self._prefix: Prefix | bool | None = None
        #: Ends a caught-up wait (:meth:`_wait_offer`) at its timeout.
        self._wait_timer: asyncio.TimerHandle | None = None

    def start(self, tasks: Tasks, on_end: Callable[[asyncio.Task[Any]], None]) -> None:
        """Run in a task of ``tasks``; ``on_end`` when it ends."""
        self.task = tasks.spawn(f"deliver:{self.sub.callback}", self.run(), on_end=on_end)

    async def stop(self, grace: float = 0.0) -> None:
        """Stop; a delivery attempt under way gets up to ``grace`` seconds to finish and
        queue its cursor (a planned move: otherwise the next owner re-sends the batch)."""
        self._stopping = True
        try:
            if grace > 0 and not self._idle.is_set() and self.task is not None:
                idle = asyncio.ensure_future(self._idle.wait())
                try:
                    await asyncio.wait(
                        [idle, self.task], timeout=grace, return_when=FIRST_COMPLETED
                    )
                finally:
                    idle.cancel()
        finally:
            await cancel_and_wait([self.task])

    async def run(self) -> None:
        sub = self.sub
        feed = self._feed = await self.feeds.acquire(sub.topic)
        try:
            stored = self._start_cursor
            if stored is None:
                stored = await self.store.cursor(sub.topic, sub.callback)
            cursor = parse_id(stored or "0-0")
            limit = self.settings.delivery_batch_max_changes
            pause = sub.retry_at - time.time()
            if pause > 0:  # a back-off a previous owner started
                await asyncio.sleep(min(pause, self.settings.retry_max_seconds))
            while True:
                remaining = sub.expires_at - time.time()
                if remaining <= 0:
                    raise _Gone("lease expired")
                if sub.disabled:  # until re-subscribed or resumed (a new worker)
                    await self._park(remaining)
                    continue
                sent: _Sent | None = None
                body: bytes | TopicContent
                if cursor == feed.last_key:  # caught up: the feed hands the next events over
                    sent = await self._wait_offer(feed, min(remaining, 60.0))
                    if sent is None:  # timed out, or offer() left them to this task
                        continue
                    batch, body, gap, through = sent.batch, sent.body, None, sent.through
                else:
                    read, gap = await feed.read_span(cursor, limit, timeout=min(remaining, 60.0))
                    if not read:
                        continue
                    events = _whole(read, sub.topic)
                    # A notice whose batch was dead-lettered or filtered out entirely.
                    gap = gap or sub.untold_gap
                    kept = self.terms.kept(events)
                    if not kept:  # nothing for this subscriber: advance, send nothing
                        sub.untold_gap = gap
                        await self._advance(read[-1].id)
                        cursor = read[-1].key
                        continue
                    if self.bucket and (wait := self.bucket.take(time.monotonic())) > 0:
                        await asyncio.sleep(wait)  # over its rate limit: a bigger batch then
                        continue
                    content = await current_content(self.contents, sub.topic)
                    if content is None:
                        batch, body = self.bodies.get(sub.topic, kept, gap, self.terms.filter)
                    else:  # the content now stands for every change read: one POST
                        batch, body = kept, content
                    # The events filtered out after the last one sent are done with too.
                    through = read[-1] if len(batch) == len(kept) else batch[-1]
                if await self._deliver(batch, body, gap, through.id, sent):
                    self.delivered += len(batch)
                if sub.disabled:  # the batch stays at the cursor
                    continue
                # Sent or dead-lettered; the events filtered out after it need nothing.
                cursor = through.key
        except _Gone as exc:
            log.info("subscription %s -> %r ended: %r", sub.topic, sub.callback, str(exc))
            self.cursors.forget(sub.topic, sub.callback)
            await self.store.delete(sub.topic, sub.callback)
        except _Lost:
            log.info("subscription %s -> %s moved to another hub process", sub.topic, sub.callback)
            self.cursors.forget(sub.topic, sub.callback)
        finally:
            if self._wait_timer is not None:
                self._wait_timer.cancel()
            await self.feeds.release(feed)

    async def _wait_offer(self, feed: TopicFeed, timeout: float) -> _Sent | None:
        """Wait, caught up, for :meth:`offer` (None: it left the events to this task, or
        ``timeout`` passed)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[_Sent | None] = loop.create_future()
        self._offered = waiter
        self._waited_at = feed.last_key
        feed.follow(self)
        # One timer across waits, not one per delivery: one that fires earlier than this
        # wait's timeout only wakes it early, and run() waits again.
        due = loop.time() + timeout
        timer = self._wait_timer
        if timer is None or timer.when() > due:
            if timer is not None:
                timer.cancel()
            self._wait_timer = loop.call_at(due, self._wait_timed_out)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and (sent := waiter.result()):
                self.client.abandon_post(sent.request)  # stopped before it got the answer
                self.posting = False
                self._idle.set()
            raise
        finally:
            self._offered = None
            feed.unfollow(self)

    def _wait_timed_out(self) -> None:
        self._wait_timer = None
        waiter = self._offered
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def offer(self, events: list[Event]) -> None:
        """The feed's next events, while this worker waits caught up (:meth:`_wait_offer`).

        Their POST is written here and now, in the feed's own pass over its followers, so a
        publish's whole fan-out is written in one loop turn: with a task switch, a ring read
        and six coroutine frames per worker before each write, the 100th callback's POST
        left ~4 ms after the first (bench/hub.py figure 4). Only the plain case is handled
        here; anything else (a gap to tell, its filter leaving nothing, its rate limit, no
        idle connection, a stale lease, stopping) goes to the worker's task as before,
        which reads the same events from the ring.
        """
        waiter = self._offered
        if waiter is None or waiter.done():
            return
        if events[0].key <= self._waited_at:  # read from the ring before this wait began
            events = [e for e in events if e.key > self._waited_at]
            if not events:
                return
        self._offered = None
        if self._feed is not None:
            self._feed.unfollow(self)  # one batch; the task goes on from its cursor
        sent = None
        try:
            sent = self._start(events)
        except Exception as exc:  # the task meets it again, and fails that delivery
            log.warning("delivery to %r not started at once: %r", self.sub.callback, exc)
        if sent is None:
            self.offers_declined += 1
        else:
            self.offers_sent += 1
        waiter.set_result(sent)

    def _start(self, events: list[Event]) -> _Sent | None:
        """:meth:`run` and :meth:`_deliver` up to the POST's write, for the plain case."""
        sub = self.sub
        now = time.time()
        if (
            self._stopping
            or self.contents is not None  # its content is read from Redis: the task's work
            or sub.disabled
            or sub.untold_gap is not None
            or sub.expired
            or len(events) > self.settings.delivery_batch_max_changes
            or not self.lease.valid()
        ):
            return None
        kept = self.terms.kept(events)
        if not kept:
            return None
        rendered = self.bodies.rendered(sub.topic, kept, None, self.terms.filter)
        batch, body = rendered.batch, rendered.body
        through = events[-1] if len(batch) == len(kept) else batch[-1]
        prefix = self._prefix
        if prefix is None:
            prefix = self._prefix = self._make_prefix()
        if self.bucket and self.bucket.take(time.monotonic()) > 0:
            return None
        if isinstance(prefix, Prefix):
            # The bytes of self.posts.post(batch, body, now), from the batch's shared
            # lines (the order hub.live.delivery_posts gives): only a signature is the
            # subscription's own.
            parts: tuple[bytes, ...]
            if sub.secret:
                signed = header_block(self.posts.signature(body, batch, now))
                parts = (prefix.head, rendered.ids, signed, rendered.length, body)
            else:
                parts = (prefix.head, rendered.ids, rendered.length, body)
            request = self.client.begin_built(prefix, b"".join(parts))
        else:
            post = self.posts.post(batch, body, now)
            request = self.client.begin_post(post.url, post.body, post.headers)
        if request is None:
            if self.bucket:
                self.bucket.refund()
            return None
        self._idle.clear()
        self.posting = True
        return _Sent(batch, body, through, request, now)

    def _make_prefix(self) -> Prefix | bool:
        try:
            return self.client.connections.prefix(self.sub.callback, self.posts.fixed)
        except CallbackFailed:
            return False

    async def _post(
        self, batch: list[Event], post: DeliveryPost | None, sent: _Sent | None = None
    ) -> Answer:
        """POST under a valid lease only: a paused process must not deliver on waking.
        ``sent``: the attempt :meth:`offer` started (the lease was valid then)."""
        if sent is None:
            # A busy loop may delay the heartbeat past the lease; wait for it rather than
            # give the subscription up (a lease really lost stops this worker from outside).
            if not self.lease.valid() and not await self.lease.wait_valid(_LEASE_PATIENCE):
                raise _Lost
            self.posting = True
            started = time.time()  # for the attempt log (queued, never waited for)
            assert post is not None
            request = self.client.post(post.url, post.body, post.headers)
        else:
            started = sent.started
            request = self.client.finish_post(sent.request)
        outcome: Answer | Exception | None = None
        try:
            outcome = answer = await request
            return answer
        except Exception as exc:
            outcome = exc
            raise
        finally:
            self.posting = False
            if outcome is not None and self.attempts is not None:
                self.attempts.record(
                    self.sub.topic, self.sub.callback, _attempt(started, outcome, batch)
                )

    async def _deliver(
        self,
        batch: list[Event],
        body: bytes | TopicContent,
        gap: str | None = None,
        through: str | None = None,
        sent: _Sent | None = None,
    ) -> bool:
        """POST ``batch`` as ``body`` (its notification, or a plain topic's content) until a
        2xx (True: the cursor moves to ``through``, default its last event), its dead
        letter or the subscription's disabling (False); raise :class:`_Gone` if the
        subscription ends. ``sent``: its first attempt, started by :meth:`offer`."""
        sub = self.sub
        while True:
            retry_after: float | None = None
            status: int | None = None
            post: DeliveryPost | None = None
            if sent is None:
                if sub.expired:
                    raise _Gone("lease expired")
                if self._stopping:  # no new attempt: the stop cancels this task at once
                    await asyncio.Event().wait()
                self._idle.clear()
                post = self.posts.post(batch, body, time.time(), gap=gap)
            attempt, sent = sent, None
            try:
                answer = await self._post(batch, post, attempt)
            except (_Lost, _Gone):
                raise
            except CallbackFailed as exc:
                error = str(exc)[:300]
            except Exception as exc:  # a hub bug on odd input fails this delivery, no more
                error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("delivery to %r failed unexpectedly: %s", sub.callback, error)
            else:
                if answer.status == 410:
                    metrics.delivery_outcome("410")
                    raise _Gone("callback answered 410 Gone")
                if 200 <= answer.status < 300:
                    metrics.delivered(batch)
                    try:
                        await self._succeeded(through or batch[-1].id, gap)
                    finally:
                        self._idle.set()
                    return True
                status = answer.status
                # Either form, seconds or an HTTP-date (a 429's or 503's); capped.
                retry_after = parse_retry_after(answer.headers.get("retry-after"), time.time())
                error = f"HTTP {answer.status}"
            track = Track(sub.failures, sub.strikes, sub.failing_since, sub.batch_failing_since)
            decision = self.policy.decide(track, status, time.time(), retry_after)
            try:
                if decision.verdict is Verdict.DISABLE:
                    await self._disable(error, decision)
                    return False
                if decision.verdict is Verdict.DEAD_LETTER:
                    sub.untold_gap = gap  # the next batch carries the notice instead
                    await self._bury(batch, error, decision)
                    return False
            finally:
                self._idle.set()
            metrics.delivery_outcome("retry")
            await self._failed(error, decision)
            await asyncio.sleep(decision.delay)

    async def _advance(self, through: str) -> None:
        """Move the cursor past events the subscription's filter left out."""
        sub = self.sub
        if not await self.cursors.write(sub.topic, sub.callback, self.lease.token, through):
            raise _Lost

    async def _save(self) -> None:
        if not await self.store.save_fenced(self.sub, self.node, self.lease.token):
            raise _Lost

    async def _succeeded(self, last_id: str, gap: str | None = None) -> None:
        sub = self.sub
        if not await self.cursors.write(sub.topic, sub.callback, self.lease.token, last_id):
            raise _Lost
        if gap is not None:
            metrics.delivery_gap(sub.topic)
            log.warning(
                "subscription %s -> %r: events through %s were trimmed before it got them; "
                "told it (X-RSHub-Gap) to re-baseline",
                sub.topic,
                sub.callback,
                gap,
            )
            sub.gaps, sub.last_gap, sub.untold_gap = sub.gaps + 1, gap, None
        if gap is not None or sub.failures or sub.state is not State.ACTIVE:
            if sub.state is State.SUSPENDED:
                log.info("subscription %s -> %r resumed", sub.topic, sub.callback)
            sub.recovered()
            await self._save()

    async def _failed(self, error: str, decision: Decision) -> None:
        sub, track = self.sub, decision.track
        sub.failures, sub.strikes = track.failures, track.strikes
        sub.failing_since, sub.batch_failing_since = track.failing_since, track.batch_failing_since
        sub.last_error = error
        sub.retry_at = time.time() + decision.delay
        if decision.suspended and sub.state is State.ACTIVE:
            sub.state = State.SUSPENDED
            metrics.delivery_outcome("suspended")
            log.warning(
                "subscription %s -> %r suspended after %d failures: %r",
                sub.topic,
                sub.callback,
                sub.failures,
                error,
            )
        await self._save()

    async def _bury(self, batch: list[Event], error: str, decision: Decision) -> None:
        """Move ``batch`` to the dead letters (its window is spent) and go on with the next."""
        sub, now = self.sub, time.time()
        since = sub.batch_failing_since or now
        if not await self.dead_letters.bury(
            sub.topic,
            sub.callback,
            self.node,
            self.lease.token,
            batch,
            since=since,
            now=now,
            error=error,
        ):
            raise _Lost
        metrics.delivery_outcome("dead-letter")
        log.warning(
            "subscription %s -> %r: events %s..%s dead-lettered after %.0fs of failures: %r",
            sub.topic,
            sub.callback,
            batch[0].id,
            batch[-1].id,
            now - since,
            error,
        )
        await self._failed(error, decision)

    async def _disable(self, error: str, decision: Decision) -> None:
        """Stop delivering (failing for ``disable_after_seconds``); :meth:`_park` says so."""
        sub = self.sub
        sub.state, sub.disabled_at = State.DISABLED, time.time()
        await self._failed(error, decision)
        metrics.delivery_outcome("disabled")
        log.warning(
            "subscription %s -> %r disabled after %.0fs of failures: %r",
            sub.topic,
            sub.callback,
            sub.disabled_at - sub.failing_since,
            error,
        )

    async def _park(self, remaining: float) -> None:
        """Disabled: send the callback a WebSub denial until it answers (at the back-off's
        pace), then wait out the lease; a re-subscription or resume starts a new worker."""
        sub = self.sub
        if self.denied or self.deny is None:
            await asyncio.sleep(remaining)
            return
        failing = sub.disabled_at - (sub.failing_since or sub.disabled_at)
        reason = (
            f"deliveries failed for {failing:.0f}s (last: {(sub.last_error or '')[:100]}); "
            "subscribe again to resume"
        )
        self.denied = await self.deny(sub.callback, sub.topic_url, reason)
        if not self.denied:
            await asyncio.sleep(min(self.backoff.delay(64), remaining))


def _attempt(started: float, outcome: Answer | Exception, batch: list[Event]) -> Attempt:
    status = outcome.status if isinstance(outcome, Answer) else None
    if isinstance(outcome, CallbackFailed):
        error: str | None = str(outcome)[:300]
    elif isinstance(outcome, Exception):
        error = f"{type(outcome).__name__}: {outcome}"[:300]
    else:
        error = None if 200 <= outcome.status < 300 else f"HTTP {outcome.status}"
    return Attempt(
        at=started,
        status=status,
        latency_ms=(time.time() - started) * 1000,
        error=error,
        first_event_id=batch[0].id,
        last_event_id=batch[-1].id,
        events=len(batch),
    )


class DeliveryService:
    """Verifies intent (WebSub §5.3) and runs a worker per subscription this process owns."""

    #: How long a verified (un)subscription retries to store itself while Redis is away.
    store_patience = 300.0

    @property
    def request_lifetime(self) -> float:
        """Seconds after its arrival that a request may still be stored: a wait for a
        verification slot, the callback's answer, then :attr:`store_patience`. Later, the
        store may have forgotten that a later request for the same callback was stored."""
        return self.store_patience + 2 * self.settings.verify_timeout + 60

    def __init__(
        self,
        settings: Settings,
        client: HttpClient,
        store: SubscriptionStore,
        feeds: FeedHub,
        *,
        node: str,
        tasks: Tasks,
        worker_ended: Callable[[SubscriptionKey], None],
        revocations: Revocations | None = None,
        plain: PlainTopics | None = None,
        contents: ContentStore | None = None,
    ) -> None:
        """``tasks``: where workers, verifications and cursor writes run; ``worker_ended``:
        called with its key when a worker ends by itself, so ownership reconciles it at once;
        ``revocations``: the tokens revoked (:meth:`end_revoked`); ``plain``, ``contents``:
        the plain WebSub topics and where their content is."""
        self.settings = settings
        self.revocations = Revocations() if revocations is None else revocations
        self.plain = plain or PlainTopics(())
        self.contents = contents
        self.client = client
        self.store = store
        self.feeds = feeds
        self.node = node
        self.workers: dict[SubscriptionKey, DeliveryWorker] = {}
        self.tasks = tasks
        # Made first, stopped last: the cursor writes of the workers stopping go out.
        self.cursors = CursorWriter(store, node, tasks.group("cursors"))
        attempt_store = AttemptStore(store.redis, store.scripts, settings.attempt_log_size)
        self.attempts = AttemptWriter(
            attempt_store, tasks.group("attempts"), quiet=client.deliveries_answered
        )
        self._requests = tasks.group("requests", peers=True)
        self._workers = tasks.group("workers", peers=True)
        # The store's own log: a damaged record met by the store's reads and by a worker's
        # start is one thing, said once (two logs said it twice when a lease was retaken).
        self.damage = store.damage
        self.bodies = Bodies(HubUrls(settings.public_url), settings.delivery_batch_max_bytes)
        self.dead_letters = DeadLetterStore(
            store.redis, store.scripts, settings.dead_letter_max_events
        )
        self._verify_slots = asyncio.Semaphore(64)
        self.worker_ended = worker_ended

    async def close(self) -> None:
        await self._requests.stop()
        await self._workers.stop()
        self.workers.clear()
        await self.cursors.close()
        await self.attempts.close()
        await self.tasks.stop()

    # -- driven by hub.live.ownership ------------------------------------------------------

    def running(self) -> AbstractSet[SubscriptionKey]:
        """The subscriptions with a worker now (a live view, not a copy: a round of the
        ownership loop with 100,000 copied them several times)."""
        return self.workers.keys()

    async def start_worker(self, key: SubscriptionKey, lease: Lease) -> None:
        """Start delivering ``key`` (nothing for a damaged record: said once, tried again
        each full round, and a re-subscription that rewrites it is delivered at once)."""
        await self.start_workers(key[0], {key[1]: lease})

    async def start_workers(self, topic: str, leases: dict[str, Lease]) -> None:
        """:meth:`start_worker` for each of ``topic``'s callbacks in ``leases``, their
        records and cursors read in one round trip (chunked: a topic's worth of 100,000
        subscriptions is no one reply of tens of megabytes)."""
        callbacks = list(leases)
        for start in range(0, len(callbacks), _START_CHUNK):
            chunk = callbacks[start : start + _START_CHUNK]
            rows = await self.store.records(topic, chunk)
            for n, (callback, (data, cursor)) in enumerate(zip(chunk, rows, strict=True)):
                if n and not n % _START_STRETCH:
                    # Let the loop run between stretches: 16,000 workers made in one go
                    # held it for seconds, past the lease, and every worker lost its lease.
                    await asyncio.sleep(0)
                await self._launch((topic, callback), leases[callback], data, cursor)

    async def _launch(
        self, key: SubscriptionKey, lease: Lease, data: bytes | None, cursor: str | None
    ) -> None:
        try:
            sub = Subscription.from_json(data) if data else None
        except DamagedData as exc:
            self.damage.damaged(f"subscription of {key[1]!r} to topic {key[0]!r}", exc)
            return
        if self.damage:
            self.damage.whole(f"subscription of {key[1]!r} to topic {key[0]!r}")
        if sub is None:
            return
        if sub.expired:
            await self.store.delete(*key)
            return
        if self._revoked(sub):  # made with a token revoked before its worker started
            self._spawn(f"revoked:{key[1]}", self._remove_revoked(sub, None))
            return
        worker = DeliveryWorker(
            sub,
            lease,
            node=self.node,
            settings=self.settings,
            client=self.client,
            store=self.store,
            feeds=self.feeds,
            cursors=self.cursors,
            bodies=self.bodies,
            dead_letters=self.dead_letters,
            deny=self.tell_denied,
            attempts=self.attempts,
            contents=self.contents if self.plain.covers(sub.topic, sub.topic_url) else None,
            cursor=cursor,
        )
        self.workers[key] = worker
        worker.start(self._workers, lambda _t: self._ended(key, worker))

    async def stop_worker(self, key: SubscriptionKey, *, planned: bool = True) -> None:
        """``planned`` (a move or a shutdown, not a lost lease): the POST in flight may
        finish, within ``handover_grace_seconds``."""
        worker = self.workers.pop(key, None)
        if worker is None:
            return
        grace = self.settings.handover_grace_seconds if planned else 0.0
        await worker.stop(grace)  # its cursor write, if one was under way, stays due: settle()

    async def settle(self) -> None:
        await self.cursors.settle()

    # -- revoked tokens (hub.core.revocations) ---------------------------------------------

    def end_revoked(self) -> int:
        """End every subscription this process delivers that was made with a token now
        revoked (for every topic or for its own); how many. Called whenever this process
        reads a new set of revocations; a subscription whose worker starts later is
        checked as it starts (:meth:`start_worker`).

        Its worker stops at once (a POST in flight is abandoned), the subscription is
        removed, as an unsubscribe would, and its callback is told with a WebSub denial
        (``hub.mode=denied``, §5.2) whose reason names the revocation: subscribing again
        takes another token.
        """
        if not self.revocations:
            return 0
        ended = [key for key, worker in self.workers.items() if self._revoked(worker.sub)]
        for key in ended:
            worker = self.workers.pop(key)  # now: a second round does not end it again
            self._spawn(f"revoked:{key[1]}", self._remove_revoked(worker.sub, worker))
        return len(ended)

    def _revoked(self, sub: Subscription) -> bool:
        credential = sub.credential
        return credential is not None and self.revocations.refuses(credential, sub.topic)

    async def _remove_revoked(self, sub: Subscription, worker: DeliveryWorker | None) -> None:
        if worker is not None:
            await worker.stop()
        credential = sub.credential
        if credential is None:  # only subscriptions with a credential are revoked
            return
        if not await self.store.delete_made_with(*sub.key, credential.fingerprint):
            # Re-subscribed meanwhile with another token (or gone): that one stays, and
            # its callback is not told a denial meant for the old one.
            log.info(
                "subscription of %r to %s made with a revoked token (%s) was replaced "
                "meanwhile: the new one stays",
                sub.callback,
                sub.topic,
                credential.shown,
            )
            return
        shown = credential.shown
        log.info(
            "subscription of %r to %s removed: the token it was made with was revoked (%s)",
            sub.callback,
            sub.topic,
            shown,
        )
        await self.tell_denied(
            sub.callback, sub.topic_url, "token revoked; subscribe again with another token"
        )

    def _ended(self, key: SubscriptionKey, worker: DeliveryWorker) -> None:
        task = worker.task
        failure = None if task is None or task.cancelled() else task.exception()
        if isinstance(failure, DamagedData):  # met again at each restart: said once
            self.damage.damaged(f"delivery of topic {key[0]!r} to {key[1]!r}", failure)
        elif failure is not None:
            log.error("delivery worker %s -> %s failed: %r", key[0], key[1], failure)
        if self.workers.get(key) is worker:
            del self.workers[key]
            self.worker_ended(key)

    # -- WebSub requests, on whichever process receives them ---------------------------

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        self._requests.spawn(name, coro, on_end=self._spawned_ended)

    def _spawned_ended(self, task: asyncio.Task[Any]) -> None:
        """Report how ``task`` failed if it did (else asyncio would, as a "Task exception
        was never retrieved", whenever it is collected)."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("subscription request failed: %r", exc, exc_info=exc)

    async def request(self, req: websub.SubscriptionRequest) -> None:
        """Accepted (202): verify intent in the background, then (de)activate.

        A new subscription without ``hub.since`` starts at the topic's end as of *this*
        request, not of its later verification: changes published after the subscriber
        got its 202 are delivered, whatever the verification takes.
        """
        start = None
        if req.since is None:
            number, start = await self.store.request_arrived_at_end(req.topic)
        else:
            number = await self.store.request_arrived(req.topic)
        arrived = time.monotonic()
        self._spawn(f"verify:{req.callback}", self._verify(req, start or "0-0", (number, arrived)))

    def deny(self, callback: str, topic_url: str, reason: str) -> None:
        self._spawn(f"deny:{callback}", self._send_denial(callback, topic_url, reason))

    async def _send_denial(self, callback: str, topic_url: str, reason: str) -> None:
        await self.tell_denied(callback, topic_url, reason)

    async def tell_denied(self, callback: str, topic_url: str, reason: str) -> bool:
        """Send a WebSub denial; True if the callback answered it (any status)."""
        url = websub.denial_url(callback, topic_url, reason)
        async with self._verify_slots:
            try:
                await self.client.get(url, 4096)
            except CallbackFailed as exc:
                log.info("denial to %r not delivered: %r", callback, str(exc))
                return False
        return True

    async def _verify(
        self, req: websub.SubscriptionRequest, start: str, arrival: tuple[int, float]
    ) -> None:
        """``arrival``: the request's number (the latest stored wins) and monotonic time."""
        challenge = websub.new_challenge()
        lease = req.lease_at(time.time()) if req.mode is websub.Mode.SUBSCRIBE else None
        if lease == 0:  # made with a read token that expired before its verification
            log.info(
                "subscription of %r to %s not verified: its token expired", req.callback, req.topic
            )
            await self._note_failed(req, "not verified: the request's token expired first")
            return
        url = websub.verification_url(req.callback, req.mode, req.topic_url, challenge, lease)
        try:
            async with self._verify_slots:
                answer = await self.client.get(url, 4096)
        except CallbackFailed as exc:
            log.info("verification of %r for %s failed: %r", req.callback, req.topic, str(exc))
            await self._note_failed(req, f"the verification GET failed: {exc}")
            return
        if not (200 <= answer.status < 300 and answer.body.strip() == challenge.encode()):
            log.info(
                "verification of %r for %s refused (status %s)",
                req.callback,
                req.topic,
                answer.status,
            )
            why = "not 2xx" if not 200 <= answer.status < 300 else "without the hub.challenge"
            await self._note_failed(
                req, f"the callback answered the verification GET with HTTP {answer.status} ({why})"
            )
            return
        await self._store_verified(req, start, arrival)
        with contextlib.suppress(StoreError):  # a stale failure is only shown, never acted on
            await self.store.clear_failed_verification(subscription_id(req.topic, req.callback))

    async def _note_failed(self, req: websub.SubscriptionRequest, reason: str) -> None:
        """Keep why a verification failed in the subscription's record, for its subscriber
        (``rshub inspect``, the admin API): the log says so only to the operator."""
        failed = FailedVerification(
            time.time(), str(req.mode), req.topic, reason[:300], secret=req.secret
        )
        try:
            await self.store.note_failed_verification(
                subscription_id(req.topic, req.callback), failed
            )
        except StoreError as exc:
            log.info("failed verification of %r not kept: %s", req.callback, exc)

    async def _store_verified(
        self, req: websub.SubscriptionRequest, start: str, arrival: tuple[int, float]
    ) -> None:
        """Store what the callback confirmed, retrying while Redis is away.

        The subscriber had its 202 and confirmed its intent: failing here would drop the
        subscription without anyone knowing. Storing twice is harmless (activation and
        deletion are idempotent; a repeated change notice only makes ownership look again),
        so a failed attempt is repeated, with back-off, for up to :attr:`store_patience`
        seconds.
        """
        try:
            await retrying(
                lambda: self._store(req, start, arrival),
                STORE_OUTAGE,
                retry_on=StoreError,
                log=log,
                what=f"storing the verified {req.mode} of {req.callback!r} to {req.topic}",
                failed=lambda _error, _delay: metrics.redis_error(),
                patience=self.store_patience,
            )
        except StoreError as exc:
            log.error(
                "verified %s of %r to %s not stored: storage unavailable for %.0fs (%s)",
                req.mode,
                req.callback,
                req.topic,
                self.store_patience,
                exc,
            )

    async def _store(
        self, req: websub.SubscriptionRequest, start: str, arrival: tuple[int, float]
    ) -> None:
        number, arrived = arrival
        late = time.monotonic() - arrived
        if late > self.request_lifetime:  # the store may have forgotten later requests
            log.warning(
                "verified %s of %r to %s not stored: %.0f s after the request",
                req.mode,
                req.callback,
                req.topic,
                late,
            )
            return
        remember_ms = int((self.request_lifetime + 60) * 1000)
        if req.mode is websub.Mode.UNSUBSCRIBE:
            if await self.store.delete_latest(req.topic, req.callback, number, remember_ms):
                log.info("unsubscribed %r from %s", req.callback, req.topic)
            else:
                self._superseded(req)
            return
        try:
            previous = await self.store.get(req.topic, req.callback)
        except DamagedData as exc:  # the new record replaces it
            log.warning("re-subscription replaces a damaged record: %s", exc)
            previous = None
        cursor = req.since
        if cursor is None and previous is None:
            cursor = start
        now = time.time()
        # Never beyond the told lease, nor the read token the request was made with.
        lease = req.lease_at(now)
        if lease == 0:
            log.info(
                "subscription of %r to %s not stored: its token expired", req.callback, req.topic
            )
            return
        sub = Subscription(
            topic=req.topic,
            topic_url=req.topic_url,
            callback=req.callback,
            lease_seconds=lease,
            expires_at=now + lease,
            secret=req.secret,
            created_at=previous.created_at if previous else time.time(),
            gaps=previous.gaps if previous else 0,
            last_gap=previous.last_gap if previous else None,
            untold_gap=previous.untold_gap if previous else None,
        )
        if req.credential is not None:
            sub.token_fingerprint, sub.token_jti = req.credential.fingerprint, req.credential.jti
        apply_terms(sub, req, previous, self.settings.secret_overlap_seconds)
        if await self.store.activate_latest(sub, cursor, number, remember_ms) is None:
            self._superseded(req)
            return
        log.info("subscribed %r to %s", req.callback, req.topic)

    @staticmethod
    def _superseded(req: websub.SubscriptionRequest) -> None:
        log.info(
            "verified %s of %r to %s not stored: a later request for it was",
            req.mode,
            req.callback,
            req.topic,
        )

"""Re-delivering a subscription's dead letters, when an operator asks.

The process that takes ``POST /admin/subscriptions/{id}/dead-letters/replay`` POSTs them
itself, oldest first, in batches of the usual bounds, each made as a delivery of that batch
is (:mod:`hub.live.delivery_posts`, which says what differs), marked ``X-RSHub-Replay``:
they arrive **out of order** relative to the events delivered after them. Each entry is
removed from the dead-letter stream once its batch got a 2xx; the first failure stops the
replay and leaves the rest for the next one. A replay does not go through the delivery
worker, so it runs even while the subscription is disabled; one replay at a time per
subscription over every process (a lock in Redis that expires after :data:`REPLAY_LOCK_SECONDS`,
should its process die mid-replay).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from hub.core.exceptions import CallbackFailed, Conflict
from hub.core.topic_content import PlainTopics, TopicContent
from hub.core.topics import HubUrls
from hub.live.delivery_posts import (
    DeliveryPosts,
    current_content,
    fitting,
    notification_body,
)
from hub.live.http_client import HttpClient
from hub.store.attempts import Attempt, AttemptWriter
from hub.store.dead_letters import DeadLetter, DeadLetterStore
from hub.store.subscriptions import Subscription
from hub.store.topic_contents import ContentStore

#: How long a replay may hold its subscription's lock (a dead process's lock lapses).
REPLAY_LOCK_SECONDS = 300


@dataclass(frozen=True, slots=True)
class Replayed:
    #: Dead letters delivered (and removed) by this replay.
    replayed: int
    #: Dead letters left (the failure stopped the replay, or new ones arrived).
    remaining: int
    #: Why the replay stopped early (``None``: it went through).
    error: str | None


class Replays:
    def __init__(
        self,
        dead_letters: DeadLetterStore,
        client: HttpClient,
        urls: HubUrls,
        *,
        node: str,
        max_changes: int,
        max_bytes: int,
        attempts: AttemptWriter | None = None,
        plain: PlainTopics | None = None,
        contents: ContentStore | None = None,
    ) -> None:
        """``plain``, ``contents``: the plain WebSub topics, whose replays are their content
        as it is now (what their deliveries send), and where it is."""
        self.dead_letters = dead_letters
        self.plain = plain or PlainTopics(())
        self.contents = contents
        #: Where each replay POST is logged, as deliveries are: the subscription's record
        #: (``rshub inspect``) showed "last success never" after a replay that succeeded.
        self.attempts = attempts
        self.client = client
        self.urls = urls
        self.node = node
        self.max_changes = max_changes
        self.max_bytes = max_bytes
        self._running: set[tuple[str, str]] = set()

    async def replay(self, sub: Subscription) -> Replayed:
        """Re-deliver ``sub``'s dead letters; :class:`Conflict` if a replay is under way."""
        busy = Conflict("a replay of this subscription's dead letters is under way")
        if sub.key in self._running:
            raise busy
        self._running.add(sub.key)
        try:
            if not await self.dead_letters.claim_replay(
                sub.topic, sub.callback, self.node, REPLAY_LOCK_SECONDS
            ):
                raise busy
            try:
                return await self._replay(sub)
            finally:
                await self.dead_letters.release_replay(sub.topic, sub.callback)
        finally:
            self._running.discard(sub.key)

    async def _replay(self, sub: Subscription) -> Replayed:
        replayed, error, after = 0, None, None
        posts = DeliveryPosts(sub, self.urls, self.node)
        while True:  # each round removes what it read, or stops
            letters = await self.dead_letters.read(sub.topic, sub.callback, self.max_changes, after)
            if not letters:
                break
            batch = letters[: fitting([d.event for d in letters], self.max_bytes)]
            error = await self._post(sub, posts, batch)
            if error is not None:
                break
            await self.dead_letters.remove(sub.topic, sub.callback, [d.entry for d in batch])
            replayed, after = replayed + len(batch), batch[-1].entry
        remaining = await self.dead_letters.count(sub.topic, sub.callback)
        return Replayed(replayed, remaining, error)

    async def _post(
        self, sub: Subscription, posts: DeliveryPosts, batch: list[DeadLetter]
    ) -> str | None:
        """POST one batch; the error, or ``None`` on a 2xx."""
        events = [d.event for d in batch]
        plain = self.plain.covers(sub.topic, sub.topic_url)
        content = await current_content(self.contents if plain else None, sub.topic)
        body: bytes | TopicContent = (
            notification_body(self.urls, sub.topic, events) if content is None else content
        )
        started = time.time()
        post = posts.post(events, body, started, replay=True)
        status: int | None = None
        try:
            answer = await self.client.post(post.url, post.body, post.headers)
        except CallbackFailed as exc:
            error: str | None = str(exc)[:300]
        else:
            status = answer.status
            error = None if 200 <= status < 300 else f"HTTP {status}"
        if self.attempts is not None:
            latency = (time.time() - started) * 1000
            self.attempts.record(
                sub.topic,
                sub.callback,
                Attempt(started, status, latency, error, events[0].id, events[-1].id, len(events)),
            )
        return error

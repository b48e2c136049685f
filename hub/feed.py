"""In-memory tail of each followed topic, shared by every live consumer of that topic.

One task per topic blocks on ``XREAD`` and appends what arrives to a bounded ring of
:class:`Event`\\ s. Consumers (WebSocket and SSE clients, WebSub delivery workers) ask for
the events after their cursor: from the ring when it covers the cursor, from Redis
(``XRANGE``) when the cursor is older, so a consumer never sees a gap and every live event
is read from Redis once however many consumers follow it. Encodings (the client JSON, the
``<url>`` XML, WebSocket messages) are computed once and shared.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from . import keys, replies
from .events import with_id
from .exceptions import BadRequest
from .tasks import cancel_and_wait

log = logging.getLogger(__name__)

EventKey = tuple[int, int]

#: XREAD BLOCK time; the feeds' Redis client has no socket timeout (see FeedHub).
_BLOCK_MS = 5000

_ID = re.compile(r"(\d{1,20})(?:-(\d{1,20}))?")


def parse_id(value: str) -> EventKey:
    """``"<ms>-<seq>"`` (or ``"<ms>"``) as a comparable tuple."""
    match = _ID.fullmatch(value)
    if not match:
        raise BadRequest(f"invalid event id {value[:60]!r}: expected <ms>-<seq>")
    return int(match.group(1)), int(match.group(2) or 0)


def format_id(key: EventKey) -> str:
    return f"{key[0]}-{key[1]}"


class Event:
    """One stored change with its lazily computed, shared encodings."""

    __slots__ = ("_fields", "_json", "_xml", "data", "id", "key")

    def __init__(self, event_id: str, data: bytes) -> None:
        self.id = event_id
        self.key = parse_id(event_id)
        self.data = data
        self._json: bytes | None = None
        self._xml: bytes | None = None
        self._fields: dict[str, Any] | None = None

    @property
    def fields(self) -> dict[str, Any]:
        """The stored change, decoded (once, for filters)."""
        if self._fields is None:
            self._fields = orjson.loads(self.data)
        return self._fields

    def json(self, topic: str) -> bytes:
        if self._json is None:
            self._json = with_id(self.id, topic, self.data)
        return self._json

    def xml(self, render: Callable[[Event], bytes]) -> bytes:
        if self._xml is None:
            self._xml = render(self)
        return self._xml


class Follower(Protocol):
    def offer(self, events: list[Event]) -> None: ...


class TopicFeed:
    """The live tail of one topic; see the module docstring."""

    def __init__(
        self,
        redis: Redis,
        topic: str,
        *,
        blocking: Redis | None = None,
        ring_events: int = 50_000,
        read_count: int = 1000,
    ) -> None:
        self.redis = redis
        #: Client for XREAD BLOCK only: no socket timeout to trip over while it waits.
        self.blocking = blocking or redis
        self.topic = topic
        self.ring_events = ring_events
        self.read_count = read_count
        self._events: list[Event] = []
        self._keys: list[EventKey] = []
        #: The ring holds every event with id > base (and <= its last event).
        self.base: EventKey | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.consumers = 0
        self._followers: set[Follower] = set()
        self._messages: OrderedDict[tuple[str, str], bytes] = OrderedDict()

    def ws_message(self, events: list[Event]) -> bytes:
        """A JSON array of ``events`` (UTF-8), cached: live clients get identical batches."""
        key = (events[0].id, events[-1].id)
        message = self._messages.get(key)
        if message is None:
            message = b"[" + b",".join(e.json(self.topic) for e in events) + b"]"
            self._messages[key] = message
            if len(self._messages) > 64:
                self._messages.popitem(last=False)
        return message

    async def start(self) -> None:
        rows = await self.redis.xrevrange(keys.events(self.topic), "+", "-", count=1)
        last = replies.first_id(rows)
        self.base = parse_id(last) if last else (0, 0)
        self._task = asyncio.create_task(self._tail(), name=f"feed:{self.topic}")

    async def stop(self) -> None:
        await cancel_and_wait([self._task])

    @property
    def last_key(self) -> EventKey:
        assert self.base is not None
        return self._keys[-1] if self._keys else self.base

    async def _tail(self) -> None:
        stream = keys.events(self.topic)
        failures = 0
        while True:
            try:
                result = await self.blocking.xread(
                    {stream: format_id(self.last_key)}, count=5000, block=_BLOCK_MS
                )
                failures = 0
            except RedisError as exc:
                failures += 1
                log.warning("feed %s: XREAD failed (%s); retrying", self.topic, exc)
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                continue
            if not result:
                continue
            fresh = [Event(eid, data) for eid, data in replies.xread_events(result)]
            self._events.extend(fresh)
            self._keys.extend(e.key for e in fresh)
            overflow = len(self._events) - self.ring_events
            if overflow > 0:
                self.base = self._keys[overflow - 1]
                del self._events[:overflow]
                del self._keys[:overflow]
            self._changed.set()
            self._changed = asyncio.Event()
            for follower in list(self._followers):
                follower.offer(fresh)

    def follow(self, follower: Follower) -> None:
        """Push every batch read from now on to ``follower.offer`` (synchronously)."""
        self._followers.add(follower)

    def unfollow(self, follower: Follower) -> None:
        self._followers.discard(follower)

    async def read_after(
        self, cursor: EventKey, limit: int, *, timeout: float | None = None
    ) -> list[Event]:
        """Up to ``limit`` events with id > ``cursor``, waiting up to ``timeout`` for one.

        Returns ``[]`` when the timeout passes with nothing new (heartbeat time).
        """
        while True:
            assert self.base is not None
            if cursor < self.base:
                events = await self._read_redis(cursor, limit)
                if events:
                    return events
                cursor = self.base  # nothing retained in (cursor, base]: go on from the ring
                continue
            start = bisect.bisect_right(self._keys, cursor)
            if start < len(self._events):
                return self._events[start : start + limit]
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), timeout)
            except TimeoutError:
                return []

    async def _read_redis(self, cursor: EventKey, limit: int) -> list[Event]:
        assert self.base is not None
        rows = await self.redis.xrange(
            keys.events(self.topic),
            f"({format_id(cursor)}",
            format_id(self.base),
            count=min(limit, self.read_count),
        )
        return [Event(eid, data) for eid, data in replies.events(rows)]


class FeedHub:
    """Creates a :class:`TopicFeed` per followed topic and stops it when nobody follows."""

    def __init__(self, redis: Redis, blocking: Redis | None = None, **feed_options: Any) -> None:
        self.redis = redis
        self.blocking = blocking
        self.feed_options = feed_options
        self._feeds: dict[str, TopicFeed] = {}
        self._lock = asyncio.Lock()

    @property
    def consumer_count(self) -> int:
        return sum(feed.consumers for feed in self._feeds.values())

    async def acquire(self, topic: str) -> TopicFeed:
        async with self._lock:
            feed = self._feeds.get(topic)
            if feed is None:
                feed = TopicFeed(self.redis, topic, blocking=self.blocking, **self.feed_options)
                await feed.start()
                self._feeds[topic] = feed
            feed.consumers += 1
            return feed

    async def release(self, feed: TopicFeed) -> None:
        async with self._lock:
            feed.consumers -= 1
            if feed.consumers <= 0 and self._feeds.get(feed.topic) is feed:
                del self._feeds[feed.topic]
                await feed.stop()

    async def close(self) -> None:
        for feed in list(self._feeds.values()):
            await feed.stop()
        self._feeds.clear()

"""WebSub subscriptions and their delivery cursors, kept in Redis so they survive restarts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from . import keys, metrics
from .tasks import cancel_and_wait

log = logging.getLogger(__name__)


class State(StrEnum):
    #: Verified; deliveries flow.
    ACTIVE = "active"
    #: Kept failing; still probed at the longest back-off and resumed from its cursor when
    #: the callback answers again. Never deleted for failing (only 410 or expiry end it).
    SUSPENDED = "suspended"


@dataclass(slots=True)
class Subscription:
    topic: str
    topic_url: str
    callback: str
    lease_seconds: int
    expires_at: float
    secret: str | None = None
    state: State = State.ACTIVE
    created_at: float = field(default_factory=time.time)
    failures: int = 0
    last_error: str | None = None

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes | str) -> Subscription:
        raw = orjson.loads(data)
        raw["state"] = State(raw.get("state", State.ACTIVE))
        return cls(**raw)

    @property
    def expired(self) -> bool:
        return time.time() >= self.expires_at

    def public(self) -> dict[str, object]:
        """What introspection may show (no secret)."""
        out = asdict(self)
        out["secret"] = bool(self.secret)
        return out


class SubscriptionStore:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def activate(self, sub: Subscription, cursor: str | None) -> str:
        """Save ``sub``; set its cursor to ``cursor`` if given, keep an existing one otherwise.

        Returns the cursor in force. A re-subscription therefore updates the one existing
        (topic, callback) subscription and delivers nothing twice.
        """
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.subscriptions(sub.topic), sub.callback, sub.to_json())
            if cursor is not None:
                pipe.hset(keys.cursors(sub.topic), sub.callback, cursor)
            else:
                pipe.hsetnx(keys.cursors(sub.topic), sub.callback, "0-0")
            pipe.hget(keys.cursors(sub.topic), sub.callback)
            pipe.sadd(keys.SUBSCRIBED_TOPICS, sub.topic)
            results = await pipe.execute()
        return keys.text(results[2])

    async def save(self, sub: Subscription) -> None:
        await self.redis.hset(keys.subscriptions(sub.topic), sub.callback, sub.to_json())

    async def get(self, topic: str, callback: str) -> Subscription | None:
        data = await self.redis.hget(keys.subscriptions(topic), callback)
        return Subscription.from_json(data) if data else None

    async def delete(self, topic: str, callback: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.subscriptions(topic), callback)
            pipe.hdel(keys.cursors(topic), callback)
            await pipe.execute()

    async def cursor(self, topic: str, callback: str) -> str | None:
        value = await self.redis.hget(keys.cursors(topic), callback)
        return keys.text(value) if value is not None else None

    async def all(self) -> list[Subscription]:
        subs: list[Subscription] = []
        for topic in await self.redis.smembers(keys.SUBSCRIBED_TOPICS):
            rows = await self.redis.hgetall(keys.subscriptions(keys.text(topic)))
            subs.extend(Subscription.from_json(data) for data in rows.values())
        return subs

    async def for_topic(self, topic: str) -> list[Subscription]:
        rows = await self.redis.hgetall(keys.subscriptions(topic))
        return [Subscription.from_json(data) for data in rows.values()]

    async def cursors(self, topic: str) -> dict[str, str]:
        """Every subscription's delivery cursor for ``topic``: callback -> event id."""
        rows = await self.redis.hgetall(keys.cursors(topic))
        return {keys.text(k): keys.text(v) for k, v in rows.items()}


class CursorWriter:
    """Coalesces delivery-cursor writes: one pipelined round trip per ``interval``.

    A cursor is durable up to ``interval`` after its delivery succeeded; a crash in between
    means that batch is delivered again (at-least-once, same event ids), never skipped.
    """

    def __init__(self, redis: Redis, interval: float = 0.05) -> None:
        self.redis = redis
        self.interval = interval
        self._dirty: dict[tuple[str, str], str] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="cursor-writer")

    def mark(self, topic: str, callback: str, event_id: str) -> None:
        self._dirty[(topic, callback)] = event_id

    def forget(self, topic: str, callback: str) -> None:
        self._dirty.pop((topic, callback), None)

    async def flush(self) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for (topic, callback), event_id in dirty.items():
                    pipe.hset(keys.cursors(topic), callback, event_id)
                await pipe.execute()
        except RedisError:
            for key, event_id in dirty.items():  # keep them for the next round
                self._dirty.setdefault(key, event_id)
            raise

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.flush()
            except RedisError as exc:
                metrics.redis_error()
                log.warning("cursor flush failed (will retry): %s", exc)

    async def close(self) -> None:
        await cancel_and_wait([self._task])
        with contextlib.suppress(RedisError):
            await self.flush()

"""What operators read about topics, and deleting a topic with every key it has.

Summaries are read in pipelines of single-key commands (one topic's keys share a hash slot,
different topics' do not), so they work on one Redis and on a Redis Cluster alike. Deleting
a topic removes each of its keys one by one: the fixed ones by name, and whatever else
carries its ``{name}`` hash tag (Idempotency-Keys, Resource List pages) found with ``SCAN``
on the node that holds the tag's slot; never a multi-key command across slots.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio.cluster import RedisCluster

from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe
from hub.store.subscriptions import SubscriptionStore

#: Topics summarised per pipeline round trip.
_CHUNK = 200
#: Keys asked for per SCAN step.
_SCAN_COUNT = 1000
#: A subscription's lag is counted up to this many events (then reported as at least it).
LAG_CAP = 100_000
#: Events one script call counts at most (~3 ms of Redis): the whole cap in one call held
#: Redis ~0.3 s before 2026-11-25, stalling every other client.
LAG_CHUNK = 1_000

COUNT_AFTER = scripts.load("count_after")


@dataclass(frozen=True, slots=True)
class TopicSummary:
    name: str
    length: int
    first_id: str | None
    last_id: str | None
    #: Time of the last publish (ms since the epoch), if any was recorded.
    last_publish_ms: int | None
    subscriptions: int


def fixed_keys(topic: str) -> list[str]:
    """Every key of ``topic`` whose name does not depend on other data."""
    return [
        keys.events(topic),
        keys.subscriptions(topic),
        keys.cursors(topic),
        keys.holds(topic),
        keys.tails(topic),
        keys.owners(topic),
        keys.owner_epoch(topic),
        keys.owner_heartbeats(topic),
        keys.pages(topic),
        keys.pages_head(topic),
        keys.resources(topic),
        keys.resourcelist_snapshot(topic),
        keys.resourcelist_lock(topic),
        keys.topic_meta(topic),
        keys.pinged(topic),
        keys.content(topic),
        keys.last_successes(topic),
        keys.requests(topic),
        keys.request_marks(topic),
    ]


def tag_pattern(topic: str) -> str:
    """The SCAN pattern of every key of ``topic`` (names hold no glob characters)."""
    return f"{keys.PREFIX}{{{topic}}}:*"


class TopicAdmin:
    def __init__(
        self, redis: Client, script_pipe: ScriptPipe, subscriptions: SubscriptionStore
    ) -> None:
        self.redis = redis
        self.scripts = script_pipe
        self.subscriptions = subscriptions

    async def count_after(self, topic: str, after: str | None) -> int:
        """Events of ``topic`` after ``after`` (all retained ones for None), up to LAG_CAP.

        Counted :data:`LAG_CHUNK` a call, the calls awaited one by one."""
        counted, start, whole = 0, after or "0-0", "1"
        while counted < LAG_CAP:
            count, last, done = await self.scripts.run(
                COUNT_AFTER, [keys.events(topic)], [start, min(LAG_CHUNK, LAG_CAP - counted), whole]
            )
            counted += int(count)
            if int(done):
                break
            start, whole = keys.text(last), "0"
        return counted

    async def summaries(self, topics: list[str]) -> list[TopicSummary]:
        out: list[TopicSummary] = []
        for start in range(0, len(topics), _CHUNK):
            chunk = topics[start : start + _CHUNK]
            async with self.redis.pipeline(transaction=False) as pipe:
                for topic in chunk:
                    pipe.xlen(keys.events(topic))
                    pipe.xrange(keys.events(topic), "-", "+", count=1)
                    pipe.xrevrange(keys.events(topic), "+", "-", count=1)
                    pipe.hget(keys.topic_meta(topic), keys.LAST_PUBLISH_MS)
                    pipe.hlen(keys.subscriptions(topic))
                rows = await pipe.execute(raise_on_error=False)
            for topic, group in zip(chunk, keys.per_topic(rows, 5), strict=True):
                length, first, last, published, subs = group or (0, None, None, None, 0)
                out.append(
                    TopicSummary(
                        name=topic,
                        length=int(length),
                        first_id=keys.first_row_id(first),
                        last_id=keys.first_row_id(last),
                        last_publish_ms=keys.count(published) or None,
                        subscriptions=int(subs),
                    )
                )
        return out

    async def closed_pages(self, topic: str) -> int:
        """Closed Change List pages still recorded (the open page comes on top)."""
        return int(await self.redis.zcard(keys.pages(topic)))

    async def resources(self, topic: str) -> int:
        """Resources in the topic's Resource List."""
        return int(await self.redis.hlen(keys.resources(topic)))

    async def delete(self, topic: str) -> int:
        """Remove ``topic`` and everything of it; return how many keys were removed.

        Its subscriptions are removed first through :class:`SubscriptionStore` (their
        owners learn of it and stop delivering), then every key, then the topic sets.
        Finally every hub process is told (``SubscriptionStore.topic_removed``).
        """
        await self.redis.srem(keys.TOPICS, topic)
        for sub in await self.subscriptions.for_topic(topic):
            await self.subscriptions.delete(topic, sub.callback)
        await self.redis.srem(keys.SUBSCRIBED_TOPICS, topic)
        removed = 0
        for key in fixed_keys(topic):
            removed += int(await self.redis.unlink(key))
        for tagged in await self._tagged(topic):
            removed += int(await self.redis.unlink(tagged))
        await self.subscriptions.topic_removed(topic)
        return removed

    async def _tagged(self, topic: str) -> list[bytes | str]:
        found: list[bytes | str] = []
        if isinstance(self.redis, RedisCluster):
            node = self.redis.get_node_from_key(keys.events(topic))
            async for key in self.redis.scan_iter(
                match=tag_pattern(topic), count=_SCAN_COUNT, target_nodes=node
            ):
                found.append(key)
        else:
            async for key in self.redis.scan_iter(match=tag_pattern(topic), count=_SCAN_COUNT):
                found.append(key)
        return found

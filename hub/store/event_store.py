"""The topic event store: one Redis stream per topic, and the facts kept beside it.

A publish is one Lua script call (:data:`hub.store.scripts.APPEND`): every change of the request
is XADDed (all or none, since a script runs atomically), the Resource List fold is updated
in the same step, retention is applied, and the Idempotency-Key is remembered. Doing the
per-change work inside Redis keeps the Python side to one round trip per request, whatever
the number of changes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError, ResponseError

from hub.core.damage import DamageLog
from hub.core.events import U64_MAX, Change, Event, EventKey
from hub.core.exceptions import Conflict
from hub.core.packed import Packed, pack, stored_json
from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.replicas import ReplicaWait
from hub.store.script_pipe import ScriptPipe
from hub.store.stream_tail import StreamTail

log = logging.getLogger(__name__)

#: Events one XRANGE reads at most while a consumer catches up.
READ_COUNT = 1000

#: Script calls one :meth:`EventStore.trim` makes at most (1,000 events each by length).
TRIM_CALLS = 10_000

#: How far apart (ms) the clocks of a Redis Cluster's nodes may be for
#: :meth:`EventStore.new_ids_after` to hold.
_CLUSTER_CLOCKS_MS = 1000

#: Topics whose append keys :class:`EventStore` keeps built.
_APPEND_KEYS_CACHED = 4096


class Appended:
    """What one append stored: its events (ids and stored JSON), or, when the publish was
    replayed (its Idempotency-Key seen before), the ids stored the first time."""

    __slots__ = ("_events", "_packed", "ids", "previous_id", "replayed")

    def __init__(
        self,
        ids: list[str],
        replayed: bool,
        previous_id: str | None = None,
        packed: Packed | None = None,
    ) -> None:
        self.ids = ids
        #: True when an earlier publish with the same Idempotency-Key was found instead.
        self.replayed = replayed
        #: The stream's last id just before these events ("" when it was empty; None when
        #: replayed): with it, :meth:`hub.live.feed.FeedHub.published` knows they follow on.
        self.previous_id = previous_id
        self._packed = packed
        self._events: list[Event] | None = None

    @property
    def events(self) -> list[Event]:
        """The events this append stored (none when replayed), made on first use: when no
        live feed of this process follows the topic, nobody asks."""
        if self._events is None:
            packed = self._packed
            if packed is None or self.replayed:
                self._events = []
            else:
                stored = stored_json(packed)
                self._events = [Event(i, e) for i, e in zip(self.ids, stored, strict=True)]
        return self._events


@dataclass(frozen=True, slots=True)
class Retention:
    """How long and how many events a topic keeps (0 = no bound); per-topic overrides.

    The hold: events a WebSub subscription of the topic has yet to receive are kept beyond
    those bounds (its cursor is in ``keys.holds``), but at most ``hold_max_events`` more
    than ``max_events`` and none older than ``hold_seconds`` (0 in either: no hold). Past
    that the subscriber is told of the gap (:mod:`hub.live.delivery`).
    """

    seconds: int = 0
    max_events: int = 0
    topic_seconds: dict[str, int] | None = None
    topic_max_events: dict[str, int] | None = None
    hold_max_events: int = 0
    hold_seconds: int = 0

    def for_topic(self, topic: str) -> tuple[int, int]:
        seconds = (self.topic_seconds or {}).get(topic, self.seconds)
        return seconds, (self.topic_max_events or {}).get(topic, self.max_events)


@dataclass(frozen=True, slots=True)
class TopicFacts:
    """The small per-topic facts of ``keys.topic_meta`` (ms since the epoch)."""

    created_ms: int
    last_id: str | None
    last_publish_ms: int | None
    trimmed_through: str | None


class EventStore:
    def __init__(
        self,
        redis: Client,
        *,
        blocking: Client | None = None,
        retention: Retention | None = None,
        idempotency_seconds: int = 86400,
        wait_replicas: int = 0,
        wait_seconds: float = 1.0,
        uncertain: Callable[[str], None] | None = None,
    ) -> None:
        """``uncertain`` is how the store reports upwards without importing the layer above:
        it is called with the topic of an append made for a node (``node=``) whose caller
        may not learn what it stored (the append failed, or was cancelled, once it may have
        run). That node's feed is not told by notice, so it must read the stream; the live
        layer passes its feeds' :meth:`hub.live.feed.FeedHub.unsure` here."""
        self.redis = redis
        #: Client for XREAD BLOCK only: no socket timeout to trip over while it waits.
        self.blocking = blocking or redis
        self.retention = retention or Retention()
        self.damage = DamageLog(log)
        self.idempotency_seconds = idempotency_seconds
        #: Every script but a publish's: leases, heartbeats, delivery cursors, reads. Never
        #: followed by a ``WAIT``: what they write is confirmed by the primary alone.
        self.scripts = ScriptPipe(redis)
        #: The publishes' pipe: with ``wait_replicas``, one of its own, whose batches are
        #: answered once that many replicas have them (:mod:`hub.store.replicas`). Its own
        #: connections, because a ``WAIT`` holds up everything behind it on a connection
        #: (up to ``wait_seconds``, each batch, while a failover has left the primary no
        #: replica): on a shared one, heartbeats and cursor writes would queue behind it, the
        #: node's leases lapse, and WebSub deliveries stop with the publishes.
        self.publishes = self.scripts
        if wait_replicas:
            wait = ReplicaWait(wait_replicas, max(1, round(wait_seconds * 1000)))
            self.publishes = ScriptPipe(redis, wait=wait)
        self._known_topics: set[str] = set()
        #: Each topic's six append keys, built once (a bounded cache: cleared when full).
        self._append_keys: dict[str, tuple[str, ...]] = {}
        self._uncertain = uncertain

    async def append(
        self,
        topic: str,
        changes: list[Change] | Packed,
        *,
        digest: str = "",
        idempotency_key: str | None = None,
        node: str = "",
    ) -> Appended:
        """Store all ``changes`` atomically; return what was stored, in order. The followers
        of the topic are told by notice (:mod:`hub.store.tail_notices`), all but ``node``,
        whose caller takes what was stored from the answer."""
        packed = changes if isinstance(changes, Packed) else pack(changes)
        if packed.changes and topic not in self._known_topics:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.sadd(keys.TOPICS, topic)
                pipe.incr(keys.TOPICS_VERSION)  # both done before the topic's first event
                added, version = await pipe.execute(raise_on_error=False)
            if isinstance(added, Exception):
                raise added
            if isinstance(version, Exception):
                self._version_damaged(version)
            self._known_topics.add(topic)
        script_keys, args = self._append_call(topic, packed, digest, idempotency_key, node)
        through = self.publishes if packed.changes else self.scripts
        try:
            reply = await through.run(
                scripts.APPEND, script_keys, args, replicated=bool(packed.changes)
            )
        except BaseException:
            if node and self._uncertain is not None:
                self._uncertain(topic)
            raise
        return self._appended(reply, packed, digest, idempotency_key)

    def append_now(
        self,
        topic: str,
        packed: Packed,
        digest: str,
        idempotency_key: str | None,
        node: str = "",
    ) -> asyncio.Future[Any] | None:
        """:meth:`append` without a coroutine (the lean publish: no task or frames
        per publish): the script call under way, whose outcome :meth:`appended` reads; None
        when the topic must first be recorded (its first publish here): :meth:`append`."""
        if packed.changes and topic not in self._known_topics:
            return None
        script_keys, args = self._append_call(topic, packed, digest, idempotency_key, node)
        through = self.publishes if packed.changes else self.scripts
        pending = through.call_script(
            scripts.APPEND, script_keys, args, replicated=bool(packed.changes)
        )
        uncertain = self._uncertain
        if node and uncertain is not None:

            def failed(done: asyncio.Future[Any]) -> None:
                if done.cancelled() or done.exception() is not None:
                    uncertain(topic)

            pending.add_done_callback(failed)
        return pending

    def appended(
        self,
        pending: asyncio.Future[Any],
        packed: Packed,
        digest: str,
        idempotency_key: str | None,
    ) -> Appended | None:
        """What :meth:`append_now`'s finished call stored (raising its error, as
        :meth:`append`); None when Redis had not loaded the script, so nothing ran:
        :meth:`append` stores it then (it loads the script)."""
        try:
            reply = pending.result()
        except NoScriptError:
            return None
        return self._appended(reply, packed, digest, idempotency_key)

    def _append_call(
        self, topic: str, packed: Packed, digest: str, idempotency_key: str | None, node: str
    ) -> tuple[tuple[str, ...], list[Any]]:
        """The append script's keys and arguments."""
        now_ms = int(time.time() * 1000)
        retention = self.retention
        max_age, max_events = retention.for_topic(topic)
        minid = f"{now_ms - max_age * 1000}-0" if max_age else ""
        script_keys = self._append_keys.get(topic)
        if script_keys is None:
            if len(self._append_keys) >= _APPEND_KEYS_CACHED:
                self._append_keys.clear()
            script_keys = self._append_keys[topic] = (
                keys.events(topic),
                keys.resources(topic),
                keys.topic_meta(topic),
                keys.holds(topic),
                keys.cursors(topic),
                keys.tails(topic),
            )
        hold = retention.hold_max_events if retention.hold_seconds else 0
        hold_floor_ms = now_ms - retention.hold_seconds * 1000
        if idempotency_key is not None:
            script_keys = (*script_keys, keys.idempotency(topic, idempotency_key))
        args = [
            digest,
            self.idempotency_seconds,
            max_events,
            minid,
            now_ms,
            packed.data,
            hold,
            hold_floor_ms,
            node,
            topic,
            packed.tails,
        ]
        return script_keys, args

    @staticmethod
    def _appended(reply: Any, packed: Packed, digest: str, idempotency_key: str | None) -> Appended:
        replayed, joined, *before = reply
        text = keys.text(joined)
        if replayed:
            prev_digest, _, text = text.partition("|")
            if prev_digest != digest:
                raise Conflict(
                    "Idempotency-Key was already used for a different body",
                    idempotency_key=idempotency_key,
                )
        return Appended(
            ids=text.split(" ") if text else [],
            replayed=bool(replayed),
            previous_id=keys.text(before[0]) if before else None,
            packed=packed,
        )

    async def close(self) -> None:
        if self.publishes is not self.scripts:
            await self.publishes.close()
        await self.scripts.close()

    async def trim(self, topic: str) -> None:
        """Apply retention now (publishes do it too; this covers quiet topics).

        One call cuts at most 1,000 events by length (``append.lua``: reading them holds
        Redis), so a stream far beyond its bound takes several calls, awaited one by one
        so that other clients' commands run in between.
        """
        empty = pack([])
        for _ in range(TRIM_CALLS):
            script_keys, args = self._append_call(topic, empty, "", None, "")
            reply = await self.scripts.run(scripts.APPEND, script_keys, args)
            if len(reply) < 4 or not int(reply[3]):
                return

    # -- reading events ---------------------------------------------------------------

    async def range(
        self, topic: str, start: str, end: str = "+", count: int = READ_COUNT
    ) -> list[tuple[str, bytes]]:
        """Events from ``start`` to ``end`` in XRANGE syntax (``(id`` excludes ``id``)."""
        rows = await self.redis.xrange(keys.events(topic), start, end, count=count)
        return keys.event_rows(rows)

    async def range_trimmed(
        self, topic: str, start: str, end: str, count: int = READ_COUNT
    ) -> tuple[list[tuple[str, bytes]], str | None]:
        """:meth:`range` and :meth:`trimmed_through`, read together in one atomic step."""
        rows, trimmed = await self.scripts.run(
            scripts.RANGE_TRIMMED,
            [keys.events(topic), keys.topic_meta(topic)],
            [start, end, count],
        )
        return keys.script_event_rows(rows), keys.text(trimmed) or None

    async def follow(self, topic: str, node: str) -> str | None:
        """Have ``node`` told of every later append to ``topic`` (but its own); the
        stream's last id as it starts, read in the same atomic step."""
        reply = await self.scripts.run(
            scripts.FOLLOW, [keys.tails(topic), keys.events(topic)], [node]
        )
        return keys.text(reply) or None

    async def unfollow(self, topic: str, node: str) -> None:
        await self.redis.srem(keys.tails(topic), node)

    def tail(self, topic: str) -> StreamTail:
        """A blocked read of ``topic``'s new events on a connection of its own (the live
        feed's; :mod:`hub.store.stream_tail`)."""
        return StreamTail(self.scripts, self.blocking, topic)

    async def contains(self, topic: str, event_id: str) -> bool:
        return bool(await self.redis.xrange(keys.events(topic), event_id, event_id, count=1))

    async def first_id(self, topic: str) -> str | None:
        rows = await self.redis.xrange(keys.events(topic), "-", "+", count=1)
        return keys.first_row_id(rows)

    async def last_id(self, topic: str) -> str | None:
        rows = await self.redis.xrevrange(keys.events(topic), "+", "-", count=1)
        return keys.first_row_id(rows)

    async def length(self, topic: str) -> int:
        return int(await self.redis.xlen(keys.events(topic)))

    # -- topics -----------------------------------------------------------------------

    async def topics(self) -> list[str]:
        names, others = keys.topic_names(await self.redis.smembers(keys.TOPICS))
        for member in others:
            self.damage.damaged(f"topic set member {member!r}", "not a topic name")
        return names

    async def topics_version(self) -> int:
        """:data:`hub.store.keys.TOPICS_VERSION`: it moves whenever a topic name is added;
        -1 when Redis holds something else there (then every read of the names is whole)."""
        try:
            value = await self.redis.get(keys.TOPICS_VERSION)
        except ResponseError as exc:
            if not keys.is_damage(exc):
                raise
            self._version_damaged(exc)
            return -1
        try:
            return int(value) if value is not None else 0
        except ValueError:
            self._version_damaged(f"not a number: {keys.shown_text(value)!r:.60}")
            return -1

    def _version_damaged(self, problem: object) -> None:
        """The topic names' version is not a counter: streams following a prefix read the
        whole set each time (the repair: delete the key), publishes go on."""
        self.damage.damaged(f"key {keys.TOPICS_VERSION}", problem)

    def forget(self, topic: str) -> None:
        """``topic`` was deleted: do not take it for known any longer."""
        self._known_topics.discard(topic)

    async def exists(self, topic: str) -> bool:
        if topic in self._known_topics:
            return True
        found = bool(await self.redis.sismember(keys.TOPICS, topic))
        if found:
            self._known_topics.add(topic)
        return found

    async def facts(self, topic: str) -> TopicFacts:
        created, last, published, trimmed = await self.redis.hmget(
            keys.topic_meta(topic),
            [keys.CREATED_MS, keys.LAST_ID, keys.LAST_PUBLISH_MS, keys.TRIMMED_THROUGH],
        )
        return TopicFacts(
            created_ms=int(created) if created else 0,
            last_id=keys.optional_text(last),
            last_publish_ms=int(published) if published else None,
            trimmed_through=keys.optional_text(trimmed),
        )

    async def facts_of(self, topics: list[str]) -> list[TopicFacts | None]:
        """:meth:`facts` of every topic in one round trip (a pipeline: a Cluster splits it
        by node); None for a topic whose meta Redis holds in another shape."""
        fields = [keys.CREATED_MS, keys.LAST_ID, keys.LAST_PUBLISH_MS, keys.TRIMMED_THROUGH]
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in topics:
                pipe.hmget(keys.topic_meta(name), fields)
            values = await pipe.execute(raise_on_error=False)
        out: list[TopicFacts | None] = []
        for group in keys.per_topic(values, 1):
            if group is None:
                out.append(None)
                continue
            created, last, published, trimmed = group[0]
            out.append(
                TopicFacts(
                    created_ms=keys.count(created),
                    last_id=keys.optional_text(last),
                    last_publish_ms=keys.count(published) or None,
                    trimmed_through=keys.optional_text(trimmed),
                )
            )
        return out

    async def new_ids_after(self) -> EventKey:
        """A position that every event appended from now on comes after (read *before*
        whatever it bounds: a topic's last id read later says no event of it lies between).

        Redis makes a new event id from its clock (``XADD *``: the current millisecond, or
        the stream's last one if that is later), so events appended after this call get ids
        from this millisecond on. On a Cluster each node makes its ids from its own clock,
        and this reads one node's: a second less, so nodes whose clocks agree within a
        second (NTP) keep the bound true."""
        seconds, micros = await self.redis.time()
        ms = int(seconds) * 1000 + int(micros) // 1000
        if isinstance(self.redis, RedisCluster):
            ms -= _CLUSTER_CLOCKS_MS
        return (ms - 1, U64_MAX) if ms > 0 else (0, 0)

    async def trimmed_through(self, topic: str) -> str | None:
        """Id of the newest event retention ever removed from ``topic``, if any."""
        value = await self.redis.hget(keys.topic_meta(topic), keys.TRIMMED_THROUGH)
        return keys.optional_text(value)

    async def created_ms(self, topics: list[str]) -> list[int]:
        """When each topic was first published to (0 if unknown), in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in topics:
                pipe.hget(keys.topic_meta(name), keys.CREATED_MS)
            values = await pipe.execute(raise_on_error=False)
        return [keys.count(group[0]) if group else 0 for group in keys.per_topic(values, 1)]

    # -- publish pings ----------------------------------------------------------------

    async def unseen(self, topic: str, digests: list[str]) -> list[bool]:
        """For each digest: True if no earlier ping of ``topic`` stored that change."""
        seen = await self.redis.smismember(keys.pinged(topic), digests)
        return [not was for was in seen]

    async def remember(self, topic: str, digests: list[str], ttl: int) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.sadd(keys.pinged(topic), *digests)
            pipe.expire(keys.pinged(topic), ttl)
            await pipe.execute()

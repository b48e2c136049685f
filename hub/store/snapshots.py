"""Resource List snapshots (Z39.99 §10): every URI's latest state, read from the fold.

The fold itself is kept by the publish script (:mod:`hub.store.event_store`): hash
``keys.resources(topic)``, ``loc -> state`` (:mod:`hub.core.resource_states`: packed, or an
earlier hub's ``"<event-id> <event-json>"``), deleted locs removed. Here it is read two ways:

- Up to ``page_entries`` URIs: :meth:`ResourceSnapshots.exact` copies it with ``COPY`` in
  one script with a Redis ``TIME`` (``scripts/exact_resourcelist.lua``), so it is an exact
  snapshot: ``at`` = ``completed`` = that time. Every change not in it has a later receipt
  time (event ids follow the Redis clock), so a Destination that baselines from it then
  applies the Change List entries with ``datetime >= at`` misses nothing. The copy is then
  read in ``HSCAN`` batches (one 50,000-entry reply would hold the event loop while it is
  parsed) and rendered in a thread, together with its gzipped form.
- Beyond that: pages of one snapshot built with ``HSCAN`` (not atomic: ``at`` is when the
  scan began and ``completed`` when it ended, as §10.1 allows). The pages are rendered once
  (in a thread), kept in Redis for ``ttl_seconds`` and served as immutable; a snapshot is
  current for ``reuse_seconds`` while the topic changes, and for as long as it does not (up
  to half its lifetime). A snapshot that is no longer current is still served while the
  next is taken (:mod:`hub.live.snapshot_builds` takes them in the background: a
  1,000,000-URI fold takes tens of seconds). One process takes a snapshot at a time
  (``keys.resourcelist_lock``, kept alive page by page); the others wait for its record,
  so several hub processes serve the same snapshot.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from hub.core import rendering, resource_states
from hub.core.digest_set import DigestSet
from hub.core.events import format_id, parse_id
from hub.core.topics import HubUrls
from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe

#: Runs ``func(*args)`` off the event loop and awaits its result.
Offload = Callable[..., Awaitable[Any]]

#: How long a snapshot's taker holds its lock past its last page (it dies: another takes over).
_TAKING_MS = 60_000
#: How often a process waiting for another's snapshot looks for its record.
_WAIT_FOR_TAKER = 0.1
#: The longest a process waits for another's snapshot (a 1,000,000-URI one took ~60 s).
_WAIT_FOR_TAKER_MAX = 1800.0
#: Fold entries one HSCAN asks for: Redis builds the reply while every other client waits
#: (5,000 held it 5-20 ms, measured with ``bench/redis_blocking.py``), and hiredis parses
#: 1,000 in well under a millisecond.
SCAN_BATCH = 1000
#: How long a reader's copy of the fold may outlive a reader that died while reading it.
_COPY_MS = 60_000
#: Reads by scan and replay before the fold is copied in one step (a topic changing so
#: fast, or trimmed so tight, that every replay missed events).
_SCAN_ATTEMPTS = 3
#: Events one replay read takes (a script reading entries holds Redis ~2.7 us each).
_REPLAY_BATCH = 1000


class _Again:
    """:meth:`ResourceSnapshots._scan_and_replay` could not vouch for its read: again."""


_AGAIN = _Again()


def _fold_into(fold: dict[bytes, bytes], event_id: str, stored: bytes) -> bool:
    """One event folded as ``scripts/append.lua`` folds it; False if it cannot be read."""
    try:
        fields = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return False
    loc = fields.get("loc") if isinstance(fields, dict) else None
    change = fields.get("change") if isinstance(fields, dict) else None
    if not isinstance(loc, str) or not isinstance(change, str):
        return False
    if change == "deleted":
        fold.pop(loc.encode(), None)
    else:
        fold[loc.encode()] = resource_states.encode(event_id, stored)
    return True


@dataclass(frozen=True, slots=True)
class Exact:
    """The whole fold read at one instant: ``loc -> state`` (:mod:`hub.core.resource_states`)."""

    at_ms: int
    last_id: str | None
    fold: dict[bytes, bytes]


@dataclass(frozen=True, slots=True)
class Probe:
    """What one round trip tells a reader before it builds: size, version, Redis clock."""

    size: int
    last_id: str | None
    now_ms: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A paged Resource List: ``pages`` rendered pages kept in Redis."""

    id: str
    at_ms: int
    completed_ms: int
    pages: int
    last_id: str


@dataclass(frozen=True, slots=True)
class Recorded:
    """The snapshot recorded for a topic, and whether it may be served without a new one
    being taken (see :meth:`ResourceSnapshots.recorded`)."""

    snapshot: Snapshot
    current: bool


def _ms(t: list[int] | tuple[int, int]) -> int:
    return int(t[0]) * 1000 + int(t[1]) // 1000


class ResourceSnapshots:
    def __init__(
        self,
        redis: Client,
        scripts: ScriptPipe,
        *,
        page_entries: int,
        reuse_seconds: int,
        ttl_seconds: int,
        offload: Offload = asyncio.to_thread,
    ) -> None:
        self.redis = redis
        self.scripts = scripts
        self.page_entries = page_entries
        self.reuse_seconds = reuse_seconds
        self.ttl_seconds = ttl_seconds
        #: Runs CPU-heavy rendering off the event loop (the app passes its parse pool).
        self.offload = offload
        self._locks: dict[str, asyncio.Lock] = {}

    async def probe(self, topic: str) -> Probe:
        """The fold's size, the topic's version and the Redis clock, in one round trip."""
        size, last_id, *now = await self.scripts.run(
            scripts.RESOURCELIST_PROBE, [keys.resources(topic), keys.topic_meta(topic)], []
        )
        return Probe(int(size), keys.optional_text(last_id), _ms((int(now[0]), int(now[1]))))

    async def exact(self, topic: str) -> Exact | None:
        """The whole fold at one instant, or ``None`` when it needs pages.

        Read without holding Redis: the live fold in ``HSCAN`` batches between two probes,
        then the events appended meanwhile replayed onto it in stream order, as the append
        script folds them. A ``COPY`` in one step held Redis 20-30 ms for a 50,000-URI fold
        (every other client waiting, at every new version a reader builds). The result is
        the fold at the second probe: each loc the scan may have read mid-change was changed
        by an event it replays, and every other loc did not change while it was read. When
        the replay cannot be trusted (events trimmed before it read them, one it cannot
        read, a size that does not add up) it tries again, then copies as before.
        """
        for _ in range(_SCAN_ATTEMPTS):
            read = await self._scan_and_replay(topic)
            if not isinstance(read, _Again):
                return read
        return await self._copy(topic)

    async def _scan_and_replay(self, topic: str) -> Exact | _Again | None:
        before = await self.probe(topic)
        if before.size > self.page_entries:
            return None
        fold = await self._scan(keys.resources(topic))
        after = await self.probe(topic)
        if after.size > self.page_entries:
            return None
        if after.last_id != before.last_id:
            if after.last_id is None or not await self._replay(topic, fold, before, after):
                return _AGAIN
        if len(fold) != after.size:
            return _AGAIN
        return Exact(after.now_ms, after.last_id, fold)

    async def _scan(self, key: str) -> dict[bytes, bytes]:
        fold: dict[bytes, bytes] = {}
        cursor = 0
        while True:
            reply = await self.redis.hscan(key, cursor, count=SCAN_BATCH)
            cursor, batch = keys.hscan_reply(reply)
            fold.update(batch)
            if not cursor:
                return fold

    async def _replay(
        self, topic: str, fold: dict[bytes, bytes], before: Probe, after: Probe
    ) -> bool:
        """Fold the events after ``before`` up to ``after`` into ``fold``; False when some
        may be gone (retention trimmed past the last one read) or one is unreadable."""
        assert after.last_id is not None
        done, end = parse_id(before.last_id or "0-0"), parse_id(after.last_id)
        while done < end:  # each read moves ``done`` on, or returns
            rows, trimmed = await self.scripts.run(
                scripts.RANGE_TRIMMED,
                [keys.events(topic), keys.topic_meta(topic)],
                [f"({format_id(done)}", after.last_id, _REPLAY_BATCH],
            )
            if trimmed and parse_id(keys.text(trimmed)) > done:
                return False
            events = keys.script_event_rows(rows)
            if not events:  # the last id of the probe is gone: deleted meanwhile
                return False
            for event_id, stored in events:
                if not _fold_into(fold, event_id, stored):
                    return False
            done = parse_id(events[-1][0])
        return done == end

    async def _copy(self, topic: str) -> Exact | None:
        """The fold copied in one step (``scripts/exact_resourcelist.lua``), then read."""
        copy = keys.resourcelist_copy(topic, secrets.token_hex(8))
        out = await self.scripts.run(
            scripts.EXACT_RESOURCELIST,
            [keys.resources(topic), keys.topic_meta(topic), copy],
            [self.page_entries, _COPY_MS],
        )
        if not out:
            return None
        at_ms = _ms((int(out[0]), int(out[1])))
        last_id = keys.optional_text(out[2])
        try:
            fold = await self._scan(copy) if int(out[3]) else {}
        finally:
            await self.redis.delete(copy)
        return Exact(at_ms, last_id, fold)

    async def recorded(self, topic: str) -> Recorded | None:
        """The recorded snapshot, if its pages still exist, and whether it is current.

        Current: taken less than ``reuse_seconds`` ago, or the topic has not changed since;
        and in either case younger than half its pages' lifetime, so that a reader starts
        the next one while this one can still be served.
        """
        raw = await self.redis.hgetall(keys.resourcelist_snapshot(topic))
        snap = {keys.text(k): keys.text(v) for k, v in raw.items()}
        if not snap:
            return None
        now = _ms(await self.redis.time())
        last_id = await self.redis.hget(keys.topic_meta(topic), keys.LAST_ID)
        age = now - int(snap[keys.SNAP_AT])
        fresh = age < self.reuse_seconds * 1000
        unchanged = last_id is not None and keys.text(last_id) == snap[keys.SNAP_LAST_ID]
        alive = await self.redis.exists(keys.resourcelist_page(topic, snap[keys.SNAP_ID], 0))
        if not alive:
            return None
        snapshot = Snapshot(
            snap[keys.SNAP_ID],
            int(snap[keys.SNAP_AT]),
            int(snap[keys.SNAP_COMPLETED]),
            int(snap[keys.SNAP_PAGES]),
            snap[keys.SNAP_LAST_ID],
        )
        young = age < self.ttl_seconds * 500
        return Recorded(snapshot, (fresh or unchanged) and young)

    async def build(self, topic: str, urls: HubUrls) -> Snapshot:
        """A current snapshot of ``topic``: taken here, unless another process is taking
        one (then its record, once it is written). Slow for a big topic (a 1,000,000-URI
        fold is read and rendered whole): run it in the background, never on a reader's
        path (see :mod:`hub.live.snapshot_builds`)."""
        lock = self._locks.setdefault(topic, asyncio.Lock())
        async with lock:
            deadline = asyncio.get_running_loop().time() + _WAIT_FOR_TAKER_MAX
            while True:
                found = await self.recorded(topic)
                if found is not None and found.current:
                    return found.snapshot
                taking = keys.resourcelist_lock(topic)
                if await self.redis.set(taking, "1", nx=True, px=_TAKING_MS):
                    try:
                        return await self._take(topic, urls, taking)
                    finally:
                        await self.redis.delete(taking)
                # A taker that died leaves its lock to expire (then it is taken above); one
                # alive keeps it alive page by page. Past this bound, take one regardless.
                if asyncio.get_running_loop().time() > deadline:
                    return await self._take(topic, urls, None)
                await asyncio.sleep(_WAIT_FOR_TAKER)  # another process is taking it

    async def _take(self, topic: str, urls: HubUrls, taking: str | None) -> Snapshot:
        """Scan the fold into rendered pages stored in Redis; record the snapshot.

        Memory is bounded by one page: each is rendered and stored as soon as it is full.
        ``taking``: the lock key held, kept alive page by page (a big snapshot may take
        longer than one lock period; another process must not start a second one).
        """
        at_ms = _ms(await self.redis.time())
        last_id = keys.optional_text(await self.redis.hget(keys.topic_meta(topic), keys.LAST_ID))
        snap_id = str(at_ms)
        seen = DigestSet()  # ~16-32 bytes per URI, never one object per URI
        batch: list[tuple[bytes, bytes]] = []
        k = 0

        async def flush() -> None:
            nonlocal k, batch
            head = rendering.RSHUB_URLSET_OPEN + rendering.root(
                "resourcelist",
                [("up", urls.capabilitylist(topic)), ("index", urls.resourcelist(topic))],
                at=at_ms,
            )
            if len(batch) <= rendering.INLINE_ENTRIES:
                body = rendering.resource_page(head, batch)
            else:
                body = await self.offload(rendering.resource_page, head, batch)
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(keys.resourcelist_page(topic, snap_id, k), body, ex=self.ttl_seconds)
                if taking is not None:
                    pipe.pexpire(taking, _TAKING_MS)
                await pipe.execute()
            k, batch = k + 1, []

        cursor = 0
        while True:
            reply = await self.redis.hscan(keys.resources(topic), cursor, count=SCAN_BATCH)
            cursor, found = keys.hscan_reply(reply)
            for loc, value in found.items():
                if not seen.add(loc):  # HSCAN may return an entry twice while the hash rehashes
                    continue
                batch.append((loc, value))
                if len(batch) >= self.page_entries:
                    await flush()
            if not cursor:
                break
        if batch or k == 0:
            await flush()
        completed_ms = max(_ms(await self.redis.time()), at_ms)
        snapshot = Snapshot(snap_id, at_ms, completed_ms, k, last_id or "")
        record: dict[Any, Any] = {
            keys.SNAP_ID: snapshot.id,
            keys.SNAP_AT: str(snapshot.at_ms),
            keys.SNAP_COMPLETED: str(snapshot.completed_ms),
            keys.SNAP_PAGES: str(snapshot.pages),
            keys.SNAP_LAST_ID: snapshot.last_id,
        }
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.resourcelist_snapshot(topic), mapping=record)
            pipe.expire(keys.resourcelist_snapshot(topic), self.ttl_seconds)
            await pipe.execute()
        return snapshot

    async def page(self, topic: str, snapshot: str, k: int) -> bytes | None:
        """One rendered page of a snapshot, or ``None`` once it expired."""
        body = await self.redis.get(keys.resourcelist_page(topic, snapshot, k))
        return keys.as_bytes(body) if body is not None else None

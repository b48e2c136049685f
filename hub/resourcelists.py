"""The Resource List (Z39.99 §10): every URI's latest state, folded from the changes.

The fold itself is kept by the publish script (:mod:`hub.store`): hash
``keys.resources(topic)``, ``loc -> "<event-id> <event-json>"``, deleted locs removed. This
module only reads it:

- Up to ``resourcelist_page_entries`` URIs: one Resource List, read with ``HGETALL`` in the
  same ``MULTI`` as a Redis ``TIME``, so it is an exact snapshot: ``at`` = ``completed`` = that
  time. Every change not in it has a later receipt time (event ids follow the Redis clock),
  so a Destination that baselines from it then applies the Change List entries with
  ``datetime >= at`` misses nothing.
- Beyond that: a Resource List Index over pages of one snapshot, built with ``HSCAN`` (not
  atomic: ``at`` is when the scan began and ``completed`` when it ended, as §10.1 allows).
  Its pages are rendered once, kept in Redis for ``resourcelist_snapshot_ttl_seconds`` and
  served as immutable; the snapshot is reused for ``resourcelist_snapshot_seconds``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from typing import Any, cast

from aiohttp import web
from redis.asyncio import Redis

from . import keys, rendering, replies
from .discovery import DocumentUrls, known_topic, urls
from .exceptions import NotFound
from .http_cache import Validators, stream
from .settings import Settings
from .state import REDIS, SETTINGS

_LOCKS = web.AppKey("resourcelist_locks", dict)


def _ms(t: list[int] | tuple[int, int]) -> int:
    return int(t[0]) * 1000 + int(t[1]) // 1000


def _entries(values: list[bytes]) -> Iterator[str]:
    for value in values:
        _, _, stored = value.partition(b" ")
        yield rendering.resource_entry(stored)


def _single(u: DocumentUrls, topic: str, at_ms: int, values: list[bytes]) -> Iterator[bytes]:
    head = rendering.URLSET_OPEN + rendering.root(
        "resourcelist", [("up", u.capabilitylist(topic))], at=at_ms, completed=at_ms
    )
    yield from rendering.chunked([head, *_entries(values), rendering.URLSET_CLOSE])


async def resource_list(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    redis: Redis = request.app[REDIS]
    settings = request.app[SETTINGS]
    limit = settings.resourcelist_page_entries
    if await redis.hlen(keys.resources(topic)) <= limit:
        async with redis.pipeline(transaction=True) as pipe:
            pipe.time()
            pipe.hgetall(keys.resources(topic))
            pipe.hget(keys.topic_meta(topic), "last_id")
            now, fold, last_id = await pipe.execute()
        if len(fold) <= limit:
            u = urls(request)
            at_ms = _ms(now)
            values = [fold[loc] for loc in sorted(fold)]
            last = last_id.decode() if last_id else "0-0"
            modified = min(rendering.event_ms(last), at_ms)
            validators = Validators(
                f"{u.tag}-rl-{topic}-{last}", modified, settled=modified < at_ms - 1000
            )
            return await stream(request, validators, _single(u, topic, at_ms, values))
    return await _index(request, topic)


async def _index(request: web.Request, topic: str) -> web.StreamResponse:
    snapshot = await _current_snapshot(request, topic)
    u = urls(request)
    snap_id, at_ms, completed_ms, count = (
        snapshot["id"],
        int(snapshot["at"]),
        int(snapshot["completed"]),
        int(snapshot["pages"]),
    )
    parts = [
        rendering.INDEX_OPEN,
        rendering.root(
            "resourcelist", [("up", u.capabilitylist(topic))], at=at_ms, completed=completed_ms
        ),
    ]
    parts.extend(
        rendering.index_entry(u.resourcelist_page(topic, snap_id, k), at=at_ms)
        for k in range(count)
    )
    parts.append(rendering.INDEX_CLOSE)
    validators = Validators(f"{u.tag}-rli-{topic}-{snap_id}", completed_ms)
    return await stream(request, validators, rendering.chunked(parts))


async def _current_snapshot(request: web.Request, topic: str) -> dict[str, str]:
    redis: Redis = request.app[REDIS]
    settings = request.app[SETTINGS]
    locks: dict[str, asyncio.Lock] = request.app[_LOCKS]
    lock = locks.setdefault(topic, asyncio.Lock())
    async with lock:
        raw = await redis.hgetall(keys.resourcelist_snapshot(topic))
        snap = {replies.text(k): replies.text(v) for k, v in raw.items()}
        if snap:
            now = _ms(await redis.time())
            last_id = await redis.hget(keys.topic_meta(topic), "last_id")
            fresh = now - int(snap["at"]) < settings.resourcelist_snapshot_seconds * 1000
            unchanged = last_id is not None and replies.text(last_id) == snap["last_id"]
            alive = await redis.exists(keys.resourcelist_page(topic, snap["id"], 0))
            if alive and (fresh or unchanged):
                return snap
        return await _take_snapshot(redis, settings, urls(request), topic)


async def _take_snapshot(
    redis: Redis, settings: Settings, u: DocumentUrls, topic: str
) -> dict[str, str]:
    """Scan the fold into rendered pages stored in Redis; record and return the snapshot."""
    limit = settings.resourcelist_page_entries
    ttl = settings.resourcelist_snapshot_ttl_seconds
    at_ms = _ms(await redis.time())
    last_id = await redis.hget(keys.topic_meta(topic), "last_id")
    snap_id = str(at_ms)
    seen: set[bytes] = set()
    batch: list[bytes] = []
    k = 0

    async def flush() -> None:
        nonlocal k, batch
        head = rendering.URLSET_OPEN + rendering.root(
            "resourcelist",
            [("up", u.capabilitylist(topic)), ("index", u.resourcelist(topic))],
            at=at_ms,
        )
        body = b"".join(rendering.chunked([head, *_entries(batch), rendering.URLSET_CLOSE]))
        await redis.set(keys.resourcelist_page(topic, snap_id, k), body, ex=ttl)
        k, batch = k + 1, []

    async for loc, value in redis.hscan_iter(keys.resources(topic), count=5000):
        digest = hashlib.blake2b(loc, digest_size=12).digest()
        if digest in seen:  # HSCAN may return an entry twice while the hash is rehashed
            continue
        seen.add(digest)
        batch.append(value)
        if len(batch) >= limit:
            await flush()
    if batch or k == 0:
        await flush()
    completed_ms = max(_ms(await redis.time()), at_ms)
    snap = {
        "id": snap_id,
        "at": str(at_ms),
        "completed": str(completed_ms),
        "pages": str(k),
        "last_id": replies.text(last_id) if last_id else "",
    }
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(keys.resourcelist_snapshot(topic), mapping=cast("dict[Any, Any]", snap))
        pipe.expire(keys.resourcelist_snapshot(topic), ttl)
        await pipe.execute()
    return snap


async def resource_list_page(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    snap_id, _, k = request.match_info["page"].partition("-")
    body = None
    if snap_id.isdigit() and k.isdigit() and len(k) <= 6:
        body = await request.app[REDIS].get(keys.resourcelist_page(topic, snap_id, int(k)))
    if body is None:
        raise NotFound(
            f"no Resource List page {request.match_info['page']!r} for topic {topic!r}: "
            f"snapshots expire; read {urls(request).resourcelist(topic)} again",
            topic=topic,
        )
    u = urls(request)
    validators = Validators(f"{u.tag}-rlp-{topic}-{snap_id}-{k}", int(snap_id), immutable=True)
    return await stream(request, validators, [replies.bytes_(body)])


def setup(app: web.Application) -> None:
    app[_LOCKS] = {}

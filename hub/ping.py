"""WebSub publish pings: ``hub.mode=publish`` with ``hub.url`` (or ``hub.topic``).

A Source that cannot POST its notifications can ping instead; the hub then fetches the
topic URL and stores the changes it has not stored from earlier pings. The fetch is done
while the pinger waits, so it learns the outcome: ``202`` with the ids stored (maybe none),
``4xx`` for a URL or document the hub will not take, ``502`` when the fetch fails.
Fetching obeys the same address rules as callbacks (no private addresses unless allowed,
no redirects) and the same size limit as a publish.

A topic URI of this hub has nothing to fetch (its notifications are POSTed to it); a ping
for one is acknowledged and stores nothing.
"""

from __future__ import annotations

import hashlib

import aiohttp
import orjson
from aiohttp import web

from . import keys, topics
from .callbacks import check_callback_address
from .exceptions import BadGateway, PayloadTooLarge
from .ingest import AUTH, changes_from_document
from .state import HTTP, REDIS, SETTINGS, STORE
from .store import Change


async def _fetch(session: aiohttp.ClientSession, url: str, limit: int, timeout: float) -> bytes:
    try:
        async with session.get(
            url,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
            headers={"Accept": "application/xml"},
        ) as resp:
            if resp.status != 200:
                raise BadGateway(f"fetching {url} for the publish ping gave HTTP {resp.status}")
            body = await resp.content.read(limit + 1)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise BadGateway(f"fetching {url} for the publish ping failed: {exc!r}") from None
    if len(body) > limit:
        raise PayloadTooLarge(f"{url} is larger than the {limit}-byte publish limit")
    return body


def _digest(change: Change) -> str:
    return hashlib.sha1(change.event, usedforsecurity=False).hexdigest()


async def publish_ping(request: web.Request, url: str) -> web.Response:
    app = request.app
    settings = app[SETTINGS]
    topic = topics.name_from_url(settings.public_url, url)
    app[AUTH].check(topic, request.headers.get("Authorization"))
    if url.startswith(f"{settings.public_url}/topics/"):
        answer = {
            "topic": topic,
            "accepted": 0,
            "ids": [],
            "note": "a topic of this hub: POST its notifications to it",
        }
        return web.Response(body=orjson.dumps(answer), status=202, content_type="application/json")
    await check_callback_address(
        url, allow_private=settings.private_callbacks_allowed, what="hub.url"
    )
    body = await _fetch(app[HTTP], url, settings.max_body_bytes, settings.verify_timeout)
    changes = changes_from_document(body, settings.max_body_bytes)

    redis, key = app[REDIS], keys.pinged(topic)
    digests = [_digest(c) for c in changes]
    seen = await redis.smismember(key, digests)
    fresh = [(c, d) for c, d, was in zip(changes, digests, seen, strict=True) if not was]
    ids: list[str] = []
    if fresh:
        stored = await app[STORE].append(topic, [c for c, _ in fresh])
        ids = stored.ids
        async with redis.pipeline(transaction=False) as pipe:
            pipe.sadd(key, *(d for _, d in fresh))
            pipe.expire(key, settings.idempotency_seconds)
            await pipe.execute()
    answer = {"topic": topic, "accepted": len(ids), "ids": ids, "fetched": len(changes)}
    return web.Response(body=orjson.dumps(answer), status=202, content_type="application/json")

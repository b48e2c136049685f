"""Helpers for the publisher tests: read what the hub stored, flaky proxies, hub restarts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from redis.asyncio import Redis

from hub import keys
from hub.settings import Settings
from publisher.changes import make_change
from resourcesync import Entry
from tests.conftest import start_hub

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def entries(n: int, *, prefix: str = "http://example.org/r", start: int = 0) -> list[Entry]:
    """``n`` updated-changes with distinct locs and increasing change times."""
    return [
        make_change(f"{prefix}{i}", "updated", T0 + timedelta(milliseconds=i))
        for i in range(start, start + n)
    ]


async def stored_events(redis_url: str, topic: str) -> list[dict[str, Any]]:
    """Every event the hub stored for ``topic``, with its ``id``, in stream order."""
    redis = Redis.from_url(redis_url)
    try:
        rows = await redis.xrange(keys.events(topic), "-", "+")
    finally:
        await redis.aclose()
    out = []
    for event_id, fields in rows:
        event = orjson.loads(fields[keys.EVENT_FIELD])
        event["id"] = event_id.decode()
        out.append(event)
    return out


@asynccontextmanager
async def hub_on(settings: Settings, redis_url: str) -> AsyncIterator[web.AppRunner]:
    """A hub for ``settings`` (a fixed port), stopped on exit: restartable on that port."""
    runner, _app = await start_hub(settings, redis_url)
    try:
        yield runner
    finally:
        await runner.cleanup()


class LosingProxy:
    """Forwards POSTs to ``upstream`` but answers 503 to the first ``lose`` of them.

    The hub has stored those notifications; only its answer is lost, as when a
    connection drops after the request went through.
    """

    def __init__(self, upstream: str, *, lose: int = 1) -> None:
        self.upstream = upstream
        self.lose = lose
        self.requests: list[dict[str, str]] = []
        self.app = web.Application()
        self.app.router.add_post("/{tail:.*}", self._forward)

    async def _forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in {"content-type", "authorization", "idempotency-key"}}
        self.requests.append(headers)
        async with aiohttp.ClientSession() as session, session.post(
            self.upstream + request.path, data=body, headers=headers
        ) as resp:
            payload = await resp.read()
            status = resp.status
        if self.lose > 0:
            self.lose -= 1
            return web.json_response({"error": "answer lost on the way back"}, status=503)
        return web.Response(body=payload, status=status, content_type="application/json")

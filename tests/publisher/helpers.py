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

from hub.core.settings import Settings
from hub.store import keys
from publisher.changes import make_change
from resourcesync import Entry
from tests.conftest import start_hub
from tests.support import free_port

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
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in {"content-type", "authorization", "idempotency-key"}
        }
        self.requests.append(headers)
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.upstream + request.path, data=body, headers=headers) as resp,
        ):
            payload = await resp.read()
            status = resp.status
        if self.lose > 0:
            self.lose -= 1
            return web.json_response({"error": "answer lost on the way back"}, status=503)
        return web.Response(body=payload, status=status, content_type="application/json")


class SSEServer:
    """Serves ``events`` (``(id, data)``) as an event stream that honours ``Last-Event-ID``.

    The first connection is cut after ``cut_after`` events, to test reconnecting.
    """

    def __init__(self, events: list[tuple[str, str]], *, cut_after: int | None = None) -> None:
        self.events = events
        self.cut_after = cut_after
        self.last_event_ids: list[str | None] = []
        self.app = web.Application()
        self.app.router.add_get("/stream", self.stream)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        last = request.headers.get("Last-Event-ID")
        self.last_event_ids.append(last)
        ids = [event_id for event_id, _ in self.events]
        start = ids.index(last) + 1 if last else 0
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b": hello\n\nretry: 10\n\n")
        for n, (event_id, data) in enumerate(self.events[start:]):
            if self.cut_after is not None and n == self.cut_after:
                self.cut_after = None
                request.transport.close()  # type: ignore[union-attr]
                return resp
            await resp.write(f"event: message\nid: {event_id}\ndata: {data}\n\n".encode())
        return resp


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Run ``app`` on 127.0.0.1 and yield its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


class StaticSource:
    """A pull-only Source serving ``docs`` (path -> bytes) with ETags; counts requests."""

    def __init__(self) -> None:
        self.docs: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.not_modified: list[str] = []
        self.fail: set[str] = set()
        self.app = web.Application()
        self.app.router.add_get("/{path:.*}", self._get)
        self.url = ""

    async def _get(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        self.requests.append(path)
        if path in self.fail:
            return web.Response(status=500, text="source is broken")
        if path not in self.docs:
            return web.Response(status=404)
        body = self.docs[path]
        etag = f'"{hash(body) & 0xFFFFFFFF:x}"'
        if request.headers.get("If-None-Match") == etag:
            self.not_modified.append(path)
            return web.Response(status=304, headers={"ETag": etag})
        return web.Response(body=body, content_type="application/xml", headers={"ETag": etag})

"""The reconnecting event-stream reader (its parser is tested in tests/rsclient)."""

from __future__ import annotations

import pytest
from aiohttp import web

from publisher.exceptions import FeedError
from publisher.sse import EventSource

from .helpers import SSEServer, serve


async def test_reconnects_with_last_event_id() -> None:
    server = SSEServer([(str(i), f'{{"n": {i}}}') for i in range(10)], cut_after=4)
    async with serve(server.app) as base:
        source = EventSource(f"{base}/stream", reconnect_delay=0.01)
        seen = []
        async for event in source:
            seen.append(event.id)
            if len(seen) == 10:
                break
    assert seen == [str(i) for i in range(10)]
    assert server.last_event_ids == [None, "3"]
    assert source.connections == 2


async def test_wrong_content_type_fails() -> None:
    async def plain(request: web.Request) -> web.Response:
        return web.Response(text="nope")

    app = web.Application()
    app.router.add_get("/stream", plain)
    async with serve(app) as base:
        with pytest.raises(FeedError, match="text/event-stream"):
            async for _ in EventSource(f"{base}/stream"):
                pass


async def test_overlong_line_fails_the_feed() -> None:
    async def long_line(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: " + b"x" * 100)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/stream", long_line)
    async with serve(app) as base:
        with pytest.raises(FeedError, match="longer"):
            async for _ in EventSource(f"{base}/stream", max_line_bytes=10):
                pass

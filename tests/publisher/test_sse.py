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


async def test_a_redirect_to_a_host_no_lookup_takes_is_retried_like_a_failed_connect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stream first redirects to a host the resolver's IDNA step refuses (a
    UnicodeError, which ended ``rshub wikipedia`` with a traceback), then serves."""
    server = SSEServer([("1", '{"n": 1}')])
    redirects = 0

    async def stream(request: web.Request) -> web.StreamResponse:
        nonlocal redirects
        if redirects == 0:
            redirects += 1
            raise web.HTTPFound(f"http://{'a' * 64}.invalid/stream")
        return await server.stream(request)

    app = web.Application()
    app.router.add_get("/stream", stream)
    async with serve(app) as base:
        source = EventSource(f"{base}/stream", reconnect_delay=0.01)
        async for event in source:
            assert event.id == "1"
            break
    assert redirects == 1 and "UnicodeError" in caplog.text

"""The SSE parser, fed literal bytes, and the reconnecting reader."""

from __future__ import annotations

import pytest
from aiohttp import web

from publisher.exceptions import FeedError
from publisher.sse import Event, EventParser, EventSource

from .helpers import SSEServer, serve


def test_fields_comments_and_dispatch() -> None:
    parser = EventParser()
    events = parser.feed(b": comment\nevent: edit\nid: 7\ndata: a\ndata:b\n\ndata: c\n\n")
    assert events == [Event("a\nb", "edit", "7"), Event("c", "message", "7")]


def test_line_endings_split_anywhere() -> None:
    parser = EventParser()
    stream = b"\xef\xbb\xbfid: 1\r\ndata: x\r\n\r\nid: 2\rdata: \xc3\xa9\r\rdata: z\n\n"
    events = []
    for i in range(len(stream)):  # one byte at a time: CRLF and UTF-8 split across chunks
        events += parser.feed(stream[i : i + 1])
    assert events == [Event("x", id="1"), Event("é", id="2"), Event("z", id="2")]


def test_id_without_data_moves_the_resume_point_only_at_a_blank_line() -> None:
    parser = EventParser()
    assert parser.feed(b"id: 5\n") == []
    assert parser.block_event_id == ""
    assert parser.feed(b"\n") == []
    assert parser.block_event_id == "5"


def test_retry_and_ignored_fields() -> None:
    parser = EventParser()
    parser.feed(b"retry: 2500\nretry: soon\nid: a\x00b\nfoo: bar\ndata\n\n")
    assert parser.retry == 2500
    assert parser.last_event_id == ""  # an id containing NUL is ignored


def test_overlong_line_is_refused() -> None:
    parser = EventParser(max_line_bytes=10)
    with pytest.raises(FeedError, match="longer"):
        parser.feed(b"data: " + b"x" * 20)


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

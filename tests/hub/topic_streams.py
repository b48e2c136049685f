"""A client of streams of several topics (``/events``, ``/ws``), for the tests.

It reads as a browser's EventSource or WebSocket would: an SSE event counts once complete
(its blank line), its ``id:`` then becomes the last id (an ``id:`` alone too), and a named
event (``event: error``, ``shutdown``, ``deleted``, ``topic-deleted``) is kept apart; a
WebSocket message counts whole, its ``"id"`` the last id (one saying a topic was deleted is
kept apart as ``topic-deleted`` too, with the SSE event's data, ``{"topic": NAME}``), and
the close code and reason are kept.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp

from hub.core.stream_positions import decode
from tests.support import TIME_SCALE


def resume_topics(resume_id: str) -> dict[str, tuple[int, int]]:
    """The topics a composite id names, and their positions."""
    return decode(resume_id, what="id", max_bytes=10**6, max_topics=10**6)[1]


class Reader:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.last_id: str | None = None
        self.ids: list[str] = []
        #: SSE events with a type (``event:``), as (type, data, id).
        self.named: list[tuple[str, str, str | None]] = []
        #: A WebSocket's close code and reason.
        self.closed: tuple[int | None, str] | None = None
        #: Set at the first id: the stream's opening one (it follows its topics).
        self.opened = asyncio.Event()

    def _id(self, value: str) -> None:
        self.last_id = value
        self.ids.append(value)
        self.opened.set()

    async def sse(self, resp: aiohttp.ClientResponse, stop: Callable[[], bool] = bool) -> None:
        """Read until ``stop()`` after an event, or the stream ends."""
        event_id = data = kind = None
        while not stop():
            line = await resp.content.readline()
            if not line:
                return
            text = line.decode().rstrip("\n")
            if text.startswith("id: "):
                event_id = text[4:]
            elif text.startswith("data: "):
                data = text[6:]
            elif text.startswith("event: "):
                kind = text[7:]
            elif text == "":
                if event_id is not None:
                    self._id(event_id)
                if kind is not None:
                    self.named.append((kind, data or "", event_id))
                elif data is not None:
                    self.events.append(json.loads(data))
                event_id = data = kind = None

    async def ws(
        self, ws: aiohttp.ClientWebSocketResponse, stop: Callable[[], bool] = bool
    ) -> None:
        """Read until ``stop()`` after a message, or the socket closes."""
        while not stop():
            msg = await ws.receive()
            if msg.type != aiohttp.WSMsgType.TEXT:
                self.closed = (ws.close_code, str(msg.extra or ""))
                return
            message = json.loads(msg.data)
            if "topic_deleted" in message:  # the stream goes on without that topic
                assert set(message) == {"id", "events", "topic_deleted"}, message
                assert message["events"] == [], message
                data = json.dumps({"topic": message["topic_deleted"]}, separators=(",", ":"))
                self.named.append(("topic-deleted", data, message["id"]))
            else:
                assert set(message) == {"id", "events"}, message
            self.events.extend(message["events"])
            self._id(message["id"])

    def count(self, n: int) -> Callable[[], bool]:
        return lambda: len(self.events) >= n

    def deleted(self) -> list[str]:
        """The topics the stream said were deleted (it went on without them), in order."""
        return [
            json.loads(data)["topic"] for kind, data, _id in self.named if kind == "topic-deleted"
        ]

    def pairs(self) -> list[tuple[str, str]]:
        return [(e["topic"], e["id"]) for e in self.events]


async def follow_sse(
    session: aiohttp.ClientSession,
    url: str,
    n: int,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 20,
) -> Reader:
    """Open ``url``, read ``n`` events (or to its end), close."""
    reader = Reader()
    async with asyncio.timeout(timeout * TIME_SCALE):
        async with session.get(url, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            await reader.sse(resp, reader.count(n))
    return reader


async def follow_ws(
    session: aiohttp.ClientSession,
    url: str,
    n: int,
    *,
    timeout: float = 20,
) -> Reader:
    reader = Reader()
    async with asyncio.timeout(timeout * TIME_SCALE):
        async with session.ws_connect(url) as ws:
            await reader.ws(ws, reader.count(n))
    return reader

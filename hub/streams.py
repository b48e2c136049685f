"""Live streams of a topic's changes: WebSocket (``/ws``) and server-sent events (``/events``).

Both replay from ``?since=ID`` (or SSE's ``Last-Event-ID``) and then follow live. Without
either they start at the current end. Events are the JSON objects of DESIGN.md; a WebSocket
text message is a JSON array of one or more of them, an SSE event carries one.

Back-pressure: a pump reads from the topic feed into a per-client queue bounded by
``client_buffer_events``. While replaying history the pump waits for room; once live, a
client whose queue is full is too slow for the stream: it is disconnected (WebSocket close
code 1013, SSE ``event: error``) with a reason naming the id to resume from, and loses
nothing by resuming from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import WSCloseCode, web

from . import topics
from .feed import Event, EventKey, TopicFeed, parse_id
from .state import FEEDS, SETTINGS

log = logging.getLogger(__name__)

_READ_BATCH = 1000


class TooSlow(Exception):
    """The client's bounded buffer overflowed while following live."""


class ClientPump:
    """Moves events from a :class:`TopicFeed` into one client's bounded queue."""

    def __init__(self, feed: TopicFeed, cursor: EventKey, capacity: int) -> None:
        self.feed = feed
        self.cursor = cursor
        self.capacity = capacity
        self.queue: asyncio.Queue[list[Event]] = asyncio.Queue()
        self.queued = 0
        self._room = asyncio.Event()
        self._room.set()
        self.overflowed = False

    async def run(self) -> None:
        while True:
            events = await self.feed.read_after(self.cursor, _READ_BATCH)
            live = self.feed.base is not None and self.cursor >= self.feed.base
            while self.queued + len(events) > self.capacity:
                if live:
                    self.overflowed = True
                    self.queue.put_nowait([])  # wake the sender so it can disconnect
                    return
                self._room.clear()
                await self._room.wait()
            self.queue.put_nowait(events)
            self.queued += len(events)
            self.cursor = events[-1].key

    async def get(self, timeout: float) -> list[Event] | None:
        """The next events, ``None`` on heartbeat timeout; raises TooSlow on overflow."""
        try:
            events = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None
        if not events and self.overflowed:
            raise TooSlow
        self.queued -= len(events)
        self._room.set()
        return events


def _start_cursor(request: web.Request, feed: TopicFeed) -> EventKey:
    since = request.query.get("since") or request.headers.get("Last-Event-ID")
    if since:
        return parse_id(since.strip())
    return feed.last_key


@contextlib.asynccontextmanager
async def _following(request: web.Request) -> AsyncIterator[tuple[str, ClientPump]]:
    topic = topics.check_name(request.match_info["name"])
    since = request.query.get("since") or request.headers.get("Last-Event-ID")
    if since:
        parse_id(since.strip())  # 400 before any upgrade
    feeds = request.app[FEEDS]
    feed = await feeds.acquire(topic)
    capacity = request.app[SETTINGS].client_buffer_events
    pump = ClientPump(feed, _start_cursor(request, feed), capacity)
    task = asyncio.create_task(pump.run(), name=f"pump:{topic}")
    try:
        yield topic, pump
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await feeds.release(feed)


async def websocket(request: web.Request) -> web.WebSocketResponse:
    settings = request.app[SETTINGS]
    async with _following(request) as (_topic, pump):
        ws = web.WebSocketResponse(
            heartbeat=settings.heartbeat_seconds, max_msg_size=4096, compress=False
        )
        await ws.prepare(request)
        last_sent: str | None = None
        reader = asyncio.create_task(_drain_incoming(ws))
        try:
            while not ws.closed and not reader.done():
                try:
                    events = await pump.get(settings.heartbeat_seconds)
                except TooSlow:
                    resume = last_sent or "the id of the last event you received"
                    await ws.close(
                        code=WSCloseCode.TRY_AGAIN_LATER,
                        message=f"too slow; resume with since={resume}".encode()[:120],
                    )
                    break
                if events is None:
                    continue  # aiohttp's heartbeat pings keep the connection alive
                await ws.send_str(pump.feed.ws_message(events))
                last_sent = events[-1].id
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await ws.close()
    return ws


async def _drain_incoming(ws: web.WebSocketResponse) -> None:
    """Read (and ignore) client messages so close frames and pongs are processed."""
    async for _msg in ws:
        pass


async def server_sent_events(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    async with _following(request) as (topic, pump):
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await resp.prepare(request)
        await resp.write(b"retry: 1000\n\n")
        last_sent: str | None = None
        try:
            while True:
                try:
                    events = await pump.get(settings.heartbeat_seconds)
                except TooSlow:
                    resume = last_sent or ""
                    await resp.write(
                        b"event: error\ndata: too slow; resume with Last-Event-ID: "
                        + resume.encode() + b"\n\n"
                    )
                    break
                if events is None:
                    await resp.write(b": heartbeat\n\n")
                    continue
                await resp.write(
                    b"".join(
                        b"id: %s\ndata: %s\n\n" % (e.id.encode(), e.json(topic)) for e in events
                    )
                )
                last_sent = events[-1].id
        except (ConnectionResetError, asyncio.CancelledError):
            pass
    return resp


def setup(app: web.Application) -> None:
    app.router.add_get("/topics/{name}/ws", websocket)
    app.router.add_get("/topics/{name}/events", server_sent_events)

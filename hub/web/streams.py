"""Live streams of a topic's changes: WebSocket (``/ws``) and server-sent events (``/events``).

Both replay from ``?since=ID`` (or SSE's ``Last-Event-ID``), or from ``?since=TIME`` (an ISO
8601 time: the events the hub received at or after it, :mod:`hub.core.resume_points`), and
then follow live. Without either they start at the current end. Several topics on one
connection are :mod:`hub.web.multiplex`'s. An event is the stored change as JSON with its ``id``
and ``topic`` (:func:`hub.core.events.with_id`); a WebSocket text message is a JSON array of one
or more of them, an SSE event carries one.

Back-pressure: a client replaying history pulls it at its own pace. Once it has caught up
with the live end, the feed pushes new events into its queue, bounded by
``client_buffer_events``; a client whose queue fills is too slow for the stream: it is
disconnected (WebSocket close code 1013, SSE ``event: error``) with a reason naming the
id to resume from, and loses nothing by resuming from its last received id. A WebSocket
client so dropped is also told when to come back, and gets its close frame behind its
backlog and then a FIN while it goes on reading (:mod:`hub.web.lagging_close`). A client that
reads nothing at all is cut off after one heartbeat interval. A dropped client gets
``stream_close_seconds`` to take its close frame (or last event); then its connection is
aborted, since a graceful close would wait forever for a client that stopped reading.

When an operator deletes the topic (admin API), its streams end: WebSocket close code 1000
with reason ``topic deleted``, SSE ``event: deleted``. When the process shuts down
(SIGTERM), every stream ends at once with its resume point, so its client reconnects to
another process without a gap: WebSocket close code 1001 (going away) with reason
``shutdown; resume with since=ID``, SSE a final ``event: shutdown`` with ``retry:`` and
``id: ID`` (see :class:`Closing`). A private topic's streams need a read
token (:mod:`hub.web.access`).

A stream opened with a signed read token ends when the token does (its ``exp`` plus the
10 s leeway): WebSocket close code 4401 with reason ``token expired; renew the token and
resume with since=ID``, SSE a last ``event: error`` saying the same with ``Last-Event-ID``.
A WebSocket client may go on without a gap by sending, before then, a text message
``{"access_token": "<new token>"}``: the stream then ends with the new token (or never,
for a token that does not expire). A token the hub refuses closes the stream at once, with
code 4000 + the HTTP status the token gets (4401, 4403 for a token of other topics) and the
refusal as the reason. Any other message is ignored, as before.

An SSE stream's bytes, from its first to its last event, are
:class:`hub.core.sse_stream.SseStream`'s, as on the lean path (:mod:`hub.web.lean_sse`):
:func:`server_sent_events` reads the client's events and writes what the stream returns.

A stream of a private topic whose token the operator revokes (``POST /admin/revocations``,
on any hub process sharing the Redis) ends within a second: WebSocket close code 4403 with
reason ``token revoked; use another token and resume with since=ID``, SSE a last ``event:
error`` saying the same with ``Last-Event-ID`` (:mod:`hub.live.client_streams`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import orjson
from aiohttp import WSCloseCode, WSMessage, WSMsgType, hdrs, web

from hub.core import metrics
from hub.core.events import Event, EventFilter, EventKey, parse_id
from hub.core.exceptions import BadRequest, DamagedData, Gone, RequestError
from hub.core.lag_retry import retry_after, ws_reason
from hub.core.resume_points import parse_since
from hub.core.sse_stream import SSE_HEADERS, SseStream, SseTerms
from hub.core.sse_stream import resume_from as named_resume
from hub.core.stream_endings import DELETED, EXPIRED, REVOKED, SHUTDOWN, TOO_SLOW
from hub.core.tasks import cancel_and_wait
from hub.core.topics import check_name
from hub.live.client_streams import (
    DIRECT_WRITE_LIMIT,
    EXPIRED_CLOSE_CODE,
    REVOKED_CLOSE_CODE,
    Closing,
    Streaming,
    closed,
    ending,
    opened,
    resume_point,
    sse_ending,
)
from hub.live.feed import ClientStream, Writer
from hub.live.heartbeats import PingedSocket
from hub.web.access import ACCESS, read_grant
from hub.web.lagging_close import close_lagging

__all__ = [
    "STREAMING",
    "Closing",
    "EventStream",
    "Streaming",
    "check_since",
    "close_within",
    "heard",
    "heartless_websocket",
    "renewal",
    "resume_from",
    "server_sent_events",
    "websocket",
]

STREAMING = web.AppKey("streaming", Streaming)

log = logging.getLogger(__name__)


async def _until_overflow_or_done(
    pump: ClientStream, closing: Closing, *tasks: asyncio.Task[None]
) -> str | None:
    """Wait until one task ends, the pump overflows, the topic is deleted or the process
    shuts down; cancel the rest. Returns :data:`TOO_SLOW`, :data:`DELETED`,
    :data:`SHUTDOWN` or None (a task ended).

    All three ends resolve the pump's one ``stopped`` future: no waiter task per stream
    (measured: three tasks per idle connection were most of its memory and accept time).
    """
    stop = pump.stopped
    for task in tasks:  # a task that ends ends the stream: one future to wait on
        task.add_done_callback(lambda _task: pump.stop())
    try:
        if not stop.done():
            await stop
    finally:
        await cancel_and_wait(list(tasks))
    for task in tasks:
        if not task.cancelled() and isinstance(task.exception(), DamagedData):
            # Events of the topic that Redis holds in another shape: said, not silent.
            log.warning("stream of topic %r ended: %s", pump.feed.topic, task.exception())
    pump.writer = None  # nothing more is written behind the last event id we name
    return ending(pump, closing)


def resume_from(request: web.Request) -> tuple[str, str] | None:
    """The request's resume point and what named it (:func:`hub.core.sse_stream.resume_from`:
    ``Last-Event-ID`` wins over ``?since=``)."""
    return named_resume(request.headers.get("Last-Event-ID"), request.query.get("since"))


async def check_since(
    request: web.Request, topic: str, since: str, what: str = "since"
) -> EventKey:
    """Where a stream of ``topic`` resumes from ``since`` (an event id, or a time:
    :mod:`hub.core.resume_points`), which must lie within the stream: 400 when an id is
    beyond the topic's last id (a typo, or a position from another hub, would otherwise
    wait forever), 410 when retention removed events after it (``0`` asks for what is
    retained). A time is never beyond: a moment with nothing after it yet is no typo."""
    point = parse_since(since, what)
    key = point.key
    if key == (0, 0):
        return key
    ctx = request.app[STREAMING]
    facts = await ctx.store.facts(topic)
    last = facts.last_id
    if not point.moment and (last is None or key > parse_id(last)):
        raise BadRequest(
            f"{what}={since} is beyond the last event id of topic {topic} "
            f"({last or 'none: nothing published yet'}); resume from an id this hub gave out, "
            "or pass 0 for everything retained",
            last_id=last,
        )
    trimmed = facts.trimmed_through
    if trimmed is not None and key < parse_id(trimmed):
        resourcelist = ctx.urls.resourcelist(topic)
        after = "at or after" if point.moment else "after"
        raise Gone(
            f"events {after} {since} are no longer retained (trimmed through {trimmed}); "
            f"re-baseline from {resourcelist} and resume from its position, or pass since=0 "
            "for what is retained",
            trimmed_through=trimmed,
            resourcelist=resourcelist,
        )
    return key


@contextlib.asynccontextmanager
async def _following(
    request: web.Request, transport: str
) -> AsyncIterator[tuple[str, ClientStream]]:
    name = request.match_info["name"]
    if "," in name or "*" in name:  # several topics, asked for the way other hubs take them
        raise BadRequest(
            f"{name[:140]!r} is not a topic name: several topics are one stream at "
            f"/{'ws' if transport == 'ws' else 'events'}?topic=a&topic=b (or topic=a,b), and "
            "the topics under a prefix at ?topic_prefix=PREFIX"
        )
    topic = check_name(name)
    grant = read_grant(request, topic, query_token=True)
    resume = resume_from(request)
    start = None
    if resume is not None:
        start = await check_since(request, topic, *resume)  # 400/410 before any upgrade
    event_filter = EventFilter.from_query(request.query, request.query.getall("prefix", []))
    ctx = request.app[STREAMING]
    feed = await ctx.feeds.acquire(topic)
    cursor = feed.last_key if start is None else start
    client = opened(ctx, feed, cursor, event_filter, transport, grant)
    try:
        yield topic, client
    finally:
        closed(ctx, client, transport, request.transport)
        await ctx.feeds.release(feed)


async def write_last(
    resp: web.StreamResponse, request: web.Request, last: bytes, within: float
) -> None:
    """An SSE stream's last event (if any), given ``within`` seconds to be taken: it queues
    behind whatever the client has not read, so one that reads nothing is cut off."""
    if not last:
        return
    try:
        await asyncio.wait_for(resp.write(last), within)
    except (TimeoutError, ConnectionError):
        if request.transport is not None:
            request.transport.abort()


async def close_within(
    ws: web.WebSocketResponse,
    request: web.Request,
    within: float,
    *,
    code: int = WSCloseCode.OK,
    reason: str = "",
) -> None:
    """A close handshake bounded by ``within`` seconds, then the connection is aborted:
    the close frame queues behind whatever the client has not read, so a client that reads
    nothing would never get it."""
    if ws.closed:
        return
    try:
        await asyncio.wait_for(ws.close(code=code, message=reason.encode()[:120]), within)
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()


async def websocket(request: web.Request) -> web.WebSocketResponse:
    ctx = request.app[STREAMING]
    settings = ctx.settings
    within = settings.stream_close_seconds
    async with _following(request, "ws") as (topic, pump):
        ws = heartless_websocket(within)
        await ws.prepare(request)
        beats = None
        if request.transport is not None:
            pump.writer = _ws_writer(ws, request.transport, pump)
            beats = PingedSocket(ctx.heartbeats, request.transport, pump.stop)

        async def send() -> None:
            with contextlib.suppress(ConnectionError):  # the client went away: just end
                while not ws.closed:
                    # No timeout: aiohttp's heartbeat pings keep the line alive, and a closed
                    # socket ends _drain_incoming, hence the stream (measured: a timer and a
                    # wake-up per idle WebSocket per heartbeat interval, for nothing).
                    events = await pump.next(None)
                    if events:  # [] when a filter took everything
                        # A shared message: no per-client re-encoding. send_frame writes before
                        # it waits for the connection to drain, so batches stay in order.
                        await ws.send_frame(pump.message(events), WSMsgType.TEXT)
                        metrics.stream_messages("ws")
                        pump.last_sent = events[-1].id

        try:
            ended = await _until_overflow_or_done(
                pump,
                ctx.closing,
                asyncio.create_task(send()),
                asyncio.create_task(_incoming(ws, request, topic, pump, beats)),
            )
        finally:
            if beats is not None:
                beats.cancel()
        if ended == SHUTDOWN:
            reason = f"shutdown; resume with since={resume_point(pump)}"
            await close_within(
                ws,
                request,
                min(within, settings.shutdown_streams_seconds),
                code=WSCloseCode.GOING_AWAY,
                reason=reason,
            )
        elif ended == DELETED:
            await close_within(ws, request, within, reason=DELETED)
        elif ended in (EXPIRED, REVOKED):
            code = EXPIRED_CLOSE_CODE if ended == EXPIRED else REVOKED_CLOSE_CODE
            reason = f"{ended} and resume with since={resume_point(pump)}"
            await close_within(ws, request, within, code=code, reason=reason)
        elif ended == TOO_SLOW:  # its close frame behind its backlog, then a FIN
            reason = ws_reason(pump.resume_id(), retry_after(settings.lag_retry_spread_seconds))
            if not await close_lagging(ws, request, reason, within):
                code = WSCloseCode.TRY_AGAIN_LATER
                await close_within(ws, request, within, code=code, reason=reason)
        await close_within(ws, request, within)
    return ws


def _ws_writer(
    ws: web.WebSocketResponse, transport: asyncio.Transport, pump: ClientStream
) -> Writer:
    """The feed's fan-out loop calls this for every live WebSocket client: one transport
    write of the shared frame, or False to leave the batch to the sender task. The feed
    counts the message, once per batch for all clients. Everything it calls is looked up
    once, here: it runs once per client and publish (measured: a fifth of the fan-out's
    Python time went to attribute and method lookups)."""
    frame = pump.feed.ws_frame if pump.filter is None else pump.frame
    write, is_closing = transport.write, transport.is_closing
    buffered = transport.get_write_buffer_size

    def write_now(events: list[Event]) -> bool:
        if ws.closed or is_closing() or buffered() > DIRECT_WRITE_LIMIT:
            return False
        write(frame(events))
        return True

    return write_now


def _sse_writer(
    resp: web.StreamResponse, transport: asyncio.Transport, pump: ClientStream
) -> Writer:
    """The SSE twin of the WebSocket's direct write: the feed's fan-out loop writes a live
    batch straight to the connection, the shared encoding (an HTTP chunk when the response
    is chunked) in one ``transport.write``; False (left to the sender task, which waits for
    the connection to drain) once ``DIRECT_WRITE_LIMIT`` bytes are waiting.

    Measured: SSE went through a sender task per client (a wake-up, an ``await`` and
    aiohttp's chunked ``writelines`` per batch) and its publish-to-receive p50 was 3.2x
    Nchan's, where WebSockets, written directly, were at par.
    """
    chunked = resp.headers.get(hdrs.TRANSFER_ENCODING) == "chunked"
    encode = pump.feed.sse_events if pump.filter is None else pump.sse_events
    write, is_closing = transport.write, transport.is_closing
    buffered = transport.get_write_buffer_size

    def write_now(events: list[Event]) -> bool:  # the feed counts the message
        if is_closing() or buffered() > DIRECT_WRITE_LIMIT:
            return False
        write(encode(events, chunked=chunked))
        return True

    return write_now


def heartless_websocket(within: float) -> web.WebSocketResponse:
    """A stream's WebSocket response, without aiohttp's heartbeat (a timer per connection,
    and a task and a timer per ping): the process's :class:`hub.live.heartbeats.Heartbeats`
    pings it, and its reader answers pings itself (:func:`heard`). ``within``: how long a
    close waits for the client's close frame."""
    return web.WebSocketResponse(
        heartbeat=None, autoping=False, max_msg_size=4096, compress=False, timeout=within
    )


async def heard(ws: web.WebSocketResponse, msg: WSMessage, beats: PingedSocket | None) -> None:
    """What a heartless WebSocket's reader does with every frame: the client is alive; a
    ping gets its pong (aiohttp's autoping is off, so that pongs reach the reader)."""
    if beats is not None:
        beats.heard()
    if msg.type is WSMsgType.PING:
        await ws.pong(msg.data)


async def _incoming(
    ws: web.WebSocketResponse,
    request: web.Request,
    topic: str,
    pump: ClientStream,
    beats: PingedSocket | None,
) -> None:
    """Read client messages so close frames and pongs are processed: a renewed token is
    taken (see the module's docstring), anything else ignored."""
    closing = request.app[STREAMING].closing
    async for msg in ws:
        await heard(ws, msg, beats)
        token = renewal(msg.data) if msg.type is WSMsgType.TEXT else None
        if token is None:
            continue
        try:
            grant = request.app[ACCESS].readers.grant(topic, f"Bearer {token}")
        except RequestError as exc:  # 4401, 4403: the status the same token gets
            code = 4000 + exc.http_status
            within = request.app[STREAMING].settings.stream_close_seconds
            await close_within(ws, request, within, code=code, reason=exc.message)
            return
        closing.granted(pump, grant)


def renewal(data: str) -> str | None:
    """The token of a ``{"access_token": "..."}`` message, else None."""
    if "access_token" not in data:  # most messages: no parse
        return None
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    token = message.get("access_token") if isinstance(message, dict) else None
    return token if isinstance(token, str) and token.strip() else None


class EventStream(web.StreamResponse):
    """An SSE response whose headers go out with its first bytes (``retry:``), in one write:
    a plain StreamResponse sends them on their own first, two syscalls per connect
    (measured: ``StreamWriter._write`` was 12% of the hub's time accepting 5,000 streams)."""

    _send_headers_immediately = False


async def server_sent_events(request: web.Request) -> web.StreamResponse:
    """I/O around :class:`hub.core.sse_stream.SseStream`: read the client's events (history,
    batches its connection could not take at once), hand them to the stream, write what it
    returns; live batches the connection can take are written by the feed's fan-out
    (:func:`_sse_writer`)."""
    ctx = request.app[STREAMING]
    async with _following(request, "sse") as (_topic, pump):
        resp = EventStream(headers=SSE_HEADERS)
        await resp.prepare(request)
        if request.method == "HEAD":  # the headers only: a body would break the connection
            await resp.write_eof()
            return resp
        loop = asyncio.get_running_loop()
        # aiohttp frames what it is given (a chunk when the response is chunked).
        stream = SseStream(SseTerms.of(ctx.settings, chunked=False), loop.time())
        await resp.write(stream.opening())  # also sends the headers
        if request.transport is not None:
            pump.writer = _sse_writer(resp, request.transport, pump)

        async def send() -> None:
            with contextlib.suppress(ConnectionError):  # the client went away: just end
                while True:
                    events = await pump.next(stream.heartbeat_in(loop.time()))
                    if events:  # else idle, or everything filtered out
                        await resp.write(stream.events(pump.sse_events(events), loop.time()))
                        metrics.stream_messages("sse")
                        pump.last_sent = events[-1].id
                        continue
                    beat = stream.heartbeat(loop.time())
                    if beat:
                        await resp.write(beat)

        ended = await _until_overflow_or_done(pump, ctx.closing, asyncio.create_task(send()))
        resp.force_close()  # a stream that ended ends its connection too
        last = sse_ending(ended, pump, ctx.settings.lag_retry_spread_seconds)
        await write_last(resp, request, *stream.end(last, ended))
    return resp

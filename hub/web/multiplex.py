"""Streams of several topics on one connection: ``GET /events`` (SSE) and ``GET /ws``.

Which topics: ``topic=NAME`` (repeatable, or ``NAME,NAME``) and ``topic_prefix=PREFIX``
(repeatable: every topic whose name starts with it, those first published while the stream
is open included), at least one of them (:class:`hub.core.topic_patterns.TopicPatterns`).
The filters of a one-topic stream apply (``change=``, ``prefix=`` on resource URIs).

Where from: ``since=`` (or SSE's ``Last-Event-ID``) is the composite id of an earlier stream
(:mod:`hub.core.stream_positions`: every topic resumes exactly), or an event id or ISO 8601
time (:mod:`hub.core.resume_points`: every topic from there); without one, every topic
starts at its current end. Checked before the stream starts: 400 for a malformed one, a
composite position beyond its topic's last id, or an event id beyond every topic's; 410
naming the topic when retention removed events after its position.

Each event names its topic (``"topic"`` in its JSON, as on a one-topic stream). SSE: one
event per change, ``id:`` the stream's composite id after it, and first an ``id:`` alone
(where the stream starts). WebSocket: each text message is ``{"id": <composite id>,
"events": [...]}``, the first with no events.

Who may read what: a named topic the token may not read is 401/403 (as a stream of that
topic); a prefix streams only the topics the token reads, open ones and the private ones
it grants, and leaves the others out, never naming them. A token is checked once at the
start: one that reads nothing is refused. On a WebSocket, ``{"access_token": "..."}``
renews it for every topic followed.

Limits: ``stream_max_topics`` topics (400 naming it when more are named or matched at
the start; a prefix that comes to match more ends the stream), ``stream_max_id_bytes`` per
id. A topic deleted while followed is dropped and the stream goes on for the others (SSE
``event: topic-deleted``, a WebSocket message with ``"topic_deleted"``:
:meth:`hub.live.multiplex.Wire.topic_deleted`). The stream ends as a one-topic stream does
(:mod:`hub.web.streams`), with its composite id as the resume point: SSE a last ``event:
shutdown`` / ``event: error`` / ``event: deleted`` (its last topic deleted), WebSocket the
close codes of a one-topic stream (a reason holds the id when it fits in a close frame: else
resume from the last message's id). A client dropped as too slow is told its own wait too
(``retry after``; SSE's ``retry:``), and a WebSocket one gets its close frame behind its
backlog, its connection held while it reads on (:mod:`hub.web.lagging_close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import WSCloseCode, WSMsgType, hdrs, web

from hub.core import frames, sse
from hub.core.events import EventFilter, format_id, parse_id
from hub.core.exceptions import BadRequest, DamagedData, Gone, RequestError
from hub.core.lag_retry import retry_after, ws_reason
from hub.core.resume_points import parse_since
from hub.core.settings import Settings
from hub.core.sse_stream import SSE_HEADERS, SseStream, SseTerms, topics_ending
from hub.core.stream_endings import (
    DELETED,
    EXPIRED,
    ID_FULL,
    REVOKED,
    SHUTDOWN,
    TOO_MANY_TOPICS,
    TOO_SLOW,
)
from hub.core.stream_positions import StreamPositions, decode, is_composite
from hub.core.tasks import cancel_and_wait
from hub.core.topic_patterns import TopicPatterns
from hub.live.client_streams import (
    DIRECT_WRITE_LIMIT,
    EXPIRED_CLOSE_CODE,
    REVOKED_CLOSE_CODE,
    Streaming,
    abort_if_stuck,
)
from hub.live.heartbeats import PingedSocket
from hub.live.multiplex import Multiplex, Wire
from hub.live.topic_directory import TopicDirectory
from hub.store.redis_connection import StoreError
from hub.web.access import ACCESS, read_grant, stream_reader
from hub.web.lagging_close import close_lagging
from hub.web.streams import (
    STREAMING,
    EventStream,
    close_within,
    heard,
    heartless_websocket,
    renewal,
    resume_from,
    write_last,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Multiplexing:
    """What streams of several topics need besides :class:`Streaming`: the topic names."""

    directory: TopicDirectory


MULTIPLEXING = web.AppKey("multiplexing", Multiplexing)

#: Bytes a WebSocket close reason may hold (RFC 6455 §5.5: 125 with the code).
_CLOSE_REASON_BYTES = 120


@contextlib.asynccontextmanager
async def _multiplexed(request: web.Request, transport: str) -> AsyncIterator[Multiplex]:
    """The request's stream, checked (400/401/403/410) before any upgrade, opened, and
    closed after."""
    ctx = request.app[STREAMING]
    settings = ctx.settings
    query = request.query
    patterns = TopicPatterns.from_query(
        query.getall("topic", []),
        query.getall("topic_prefix", []),
        max_topics=settings.stream_max_topics,
    )
    grant_of = stream_reader(request)
    for name in sorted(patterns.names):
        read_grant(request, name, query_token=True)  # 401/403 as a stream of that topic
    event_filter = EventFilter.from_query(query, query.getall("prefix", []))
    directory = request.app[MULTIPLEXING].directory
    snapshot = await directory.read() if patterns.prefixes else None
    names = set(patterns.names)
    if snapshot is not None:
        names |= {
            name
            for name in snapshot.names
            if name not in names and patterns.matches(name) and grant_of(name) is not None
        }
    if len(names) > settings.stream_max_topics:
        raise BadRequest(
            f"these topics and prefixes cover {len(names)} topics, more than the hub's limit "
            f"of {settings.stream_max_topics} for one stream (stream_max_topics, "
            "RSHUB_STREAM_MAX_TOPICS): narrow them, or open several streams",
            limit="stream_max_topics",
        )
    start = await _start(request, ctx, sorted(names))
    mux = Multiplex(
        ctx,
        patterns=patterns,
        wire=Wire(sse=transport == "sse"),
        transport=transport,
        grant_of=grant_of,
        event_filter=event_filter,
        directory=directory,
    )
    try:
        await mux.open(names, start, snapshot)
        yield mux
    finally:
        await mux.close()
        abort_if_stuck(request.transport, settings.stream_close_seconds)


async def _start(request: web.Request, ctx: Streaming, names: list[str]) -> StreamPositions | None:
    """Where the stream starts (None: at every topic's end), checked against ``names``."""
    resume = resume_from(request)
    if resume is None:
        return None
    value, what = resume
    settings = ctx.settings
    listed: dict[str, tuple[int, int]] = {}
    moment = True
    if is_composite(value):
        base, listed = decode(
            value,
            what=what,
            max_bytes=settings.stream_max_id_bytes,
            max_topics=settings.stream_max_topics,
        )
        start = StreamPositions(base, listed)
    else:
        point = parse_since(value, what)
        start, moment = StreamPositions(point.key), point.moment
    if start.base == (0, 0) and not listed:
        return start  # everything retained
    facts = await ctx.store.facts_of(names)
    lasts = {
        name: parse_id(fact.last_id)
        for name, fact in zip(names, facts, strict=True)
        if fact is not None and fact.last_id
    }
    for name, key in listed.items():
        last = lasts.get(name)
        if last is not None and key > last:
            raise BadRequest(
                f"{what}: the position of topic {name} ({format_id(key)}) is beyond its last "
                f"event id ({format_id(last)}); resume from an id this hub gave out",
                topic=name,
                last_id=format_id(last),
            )
    if not moment and not any(last >= start.base for last in lasts.values()):
        raise BadRequest(
            f"{what}={value} is beyond the last event id of every topic followed; resume "
            "from an id this hub gave out, or pass 0 for everything retained"
        )
    for name, fact in zip(names, facts, strict=True):
        trimmed = None if fact is None else fact.trimmed_through
        position = start.position(name)
        if trimmed is not None and position < parse_id(trimmed):
            resourcelist = ctx.urls.resourcelist(name)
            raise Gone(
                f"events of topic {name} after {format_id(position)} are no longer retained "
                f"(trimmed through {trimmed}); re-baseline from {resourcelist}, or follow it "
                "from since=0 (what is retained)",
                topic=name,
                trimmed_through=trimmed,
                resourcelist=resourcelist,
            )
    return start


def _direct(mux: Multiplex, transport: object, frame: Callable[[bytes], bytes]) -> None:
    """Let the topics' feeds write live batches straight to the connection (as a
    one-topic stream's do) while it has room."""
    assert isinstance(transport, asyncio.Transport)
    write, is_closing = transport.write, transport.is_closing
    buffered = transport.get_write_buffer_size
    mux.can_write = lambda: not is_closing() and buffered() <= DIRECT_WRITE_LIMIT
    mux.write_now = lambda data: write(frame(data))


def _as_is(data: bytes) -> bytes:
    return data


async def _until_done(mux: Multiplex, *tasks: asyncio.Task[None]) -> str | None:
    """Wait until the stream stops (or one task ends, which stops it); cancel the rest;
    why it stopped. Nothing is written behind the id it then names."""
    for task in tasks:
        task.add_done_callback(lambda _task: mux.stop())
    try:
        await mux.stopped
    finally:
        await cancel_and_wait(list(tasks))
        mux.can_write = mux.write_now = None
    for task in tasks:
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, DamagedData):  # said, not silent (as a one-topic stream)
            log.warning("stream of %d topics ended: %s", len(mux.subs), exc)
        elif isinstance(exc, StoreError):
            log.info("stream of %d topics ended: Redis failed: %s", len(mux.subs), exc)
        elif exc is not None and not isinstance(exc, ConnectionError):
            log.error("stream of %d topics failed", len(mux.subs), exc_info=exc)
    return mux.ending()


async def _send_all(
    mux: Multiplex, send: Callable[[bytes], Awaitable[None]], stream: SseStream | None = None
) -> None:
    with contextlib.suppress(ConnectionError):  # the client went away: just end
        await mux.run(send, stream)


def _message(ended: str, mux: Multiplex, settings: Settings) -> str:
    """What a client is told of why its stream ended (before where to resume from)."""
    if ended == TOO_MANY_TOPICS:
        return (
            f"the topic prefixes now match more than {settings.stream_max_topics} topics, "
            "the hub's limit for one stream (stream_max_topics): narrow them"
        )
    if ended == DELETED:
        return f"topic deleted: {mux.deleted_topic()}"
    return ended


async def server_sent_events(request: web.Request) -> web.StreamResponse:
    """I/O around :class:`hub.core.sse_stream.SseStream`: :meth:`Multiplex.run` says what
    to send (the opening id, events) and the stream frames it, or says a heartbeat is due;
    this writes it."""
    settings = request.app[STREAMING].settings
    async with _multiplexed(request, "sse") as mux:
        resp = EventStream(headers=SSE_HEADERS)
        await resp.prepare(request)
        if request.method == "HEAD":  # the headers only: a body would break the connection
            await resp.write_eof()
            return resp
        loop = asyncio.get_running_loop()
        # aiohttp frames what it is given; the fan-out's direct writes frame their own.
        stream = SseStream(SseTerms.of(settings, chunked=False), loop.time())
        await resp.write(stream.opening())
        if request.transport is not None:
            chunked = resp.headers.get(hdrs.TRANSFER_ENCODING) == "chunked"
            _direct(mux, request.transport, sse.http_chunk if chunked else _as_is)
        ended = await _until_done(mux, asyncio.create_task(_send_all(mux, resp.write, stream)))
        resp.force_close()  # a stream that ended ends its connection too
        last = b""
        if ended is not None:
            message = _message(ended, mux, settings)
            wait = retry_after(settings.lag_retry_spread_seconds) if ended == TOO_SLOW else 0.0
            last = topics_ending(ended, resume_id=mux.resume_id, message=message, retry_after=wait)
        await write_last(resp, request, *stream.end(last, ended))
    return resp


def _resume_reason(message: str, mux: Multiplex) -> str:
    reason = f"{message}; resume with since={mux.resume_id}"
    if len(reason.encode()) <= _CLOSE_REASON_BYTES:
        return reason
    return f"{message}; resume with since=<the id of the last message>"


_CLOSE_CODES = {
    SHUTDOWN: WSCloseCode.GOING_AWAY,
    DELETED: WSCloseCode.OK,
    EXPIRED: EXPIRED_CLOSE_CODE,
    REVOKED: REVOKED_CLOSE_CODE,
    TOO_SLOW: WSCloseCode.TRY_AGAIN_LATER,
    ID_FULL: WSCloseCode.TRY_AGAIN_LATER,
    TOO_MANY_TOPICS: WSCloseCode.POLICY_VIOLATION,
}


async def websocket(request: web.Request) -> web.WebSocketResponse:
    settings = request.app[STREAMING].settings
    within = settings.stream_close_seconds
    async with _multiplexed(request, "ws") as mux:
        ws = heartless_websocket(within)
        await ws.prepare(request)
        beats = None
        if request.transport is not None:
            _direct(mux, request.transport, frames.text_frame)
            can_write = mux.can_write
            assert can_write is not None
            mux.can_write = lambda: not ws.closed and can_write()
            beats = PingedSocket(request.app[STREAMING].heartbeats, request.transport, mux.stop)

        async def send(data: bytes) -> None:
            await ws.send_frame(data, WSMsgType.TEXT)

        try:
            ended = await _until_done(
                mux,
                asyncio.create_task(_send_all(mux, send)),
                asyncio.create_task(_incoming(ws, request, mux, beats)),
            )
        finally:
            if beats is not None:
                beats.cancel()
        if ended == TOO_SLOW:  # its close frame behind its backlog, then a FIN
            reason = ws_reason(mux.resume_id, retry_after(settings.lag_retry_spread_seconds))
            if not await close_lagging(ws, request, reason, within):
                code = WSCloseCode.TRY_AGAIN_LATER
                await close_within(ws, request, within, code=code, reason=reason)
        elif ended is not None:
            message = _message(ended, mux, settings)
            if ended == TOO_MANY_TOPICS:
                reason = message
            else:
                reason = _resume_reason(message, mux)
            if ended == SHUTDOWN:
                within = min(within, settings.shutdown_streams_seconds)
            await close_within(ws, request, within, code=_CLOSE_CODES[ended], reason=reason)
        await close_within(ws, request, within)
    return ws


async def _incoming(
    ws: web.WebSocketResponse, request: web.Request, mux: Multiplex, beats: PingedSocket | None
) -> None:
    """Read client messages so close frames and pongs are processed: a renewed token is
    taken for every topic followed (and those found later); anything else is ignored."""
    readers = request.app[ACCESS].readers
    closing = request.app[STREAMING].closing
    async for msg in ws:
        await heard(ws, msg, beats)
        token = renewal(msg.data) if msg.type is WSMsgType.TEXT else None
        if token is None:
            continue
        authorization = f"Bearer {token}"
        try:
            grant_of = stream_reader(request, authorization)
            grants = {topic: readers.grant(topic, authorization) for topic in list(mux.subs)}
        except RequestError as exc:  # 4401, 4403: the status the same token gets
            code = 4000 + exc.http_status
            within = request.app[STREAMING].settings.stream_close_seconds
            await close_within(ws, request, within, code=code, reason=exc.message)
            return
        mux.grant_of = grant_of
        for topic, grant in grants.items():
            sub = mux.subs.get(topic)
            if sub is not None:
                closing.granted(sub, grant)

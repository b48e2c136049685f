"""A plain SSE subscribe without aiohttp's per-request machinery.

Each accepted connection first gets a :class:`hub.web.lean_connection.LeanConnection`,
which parses its requests with llhttp (``httptools``; never by hand). A plain subscribe, ``GET
/topics/{name}/events`` over HTTP/1.1 to an open topic, with no query, no resume point, no
body, no upgrade and only headers that change nothing in the answer (:data:`_IGNORED`), is
served by a :class:`LeanStream`: a protocol object with slots, written to by the topic
feed's fan-out, with no task and no timer (the process's one heartbeat timer beats it,
:mod:`hub.live.heartbeats`). Anything else, including every
request the hub answers with an error, is handed to aiohttp's ``RequestHandler`` on the same
transport with the bytes received so far, and served exactly as before: the lean path
declines whatever it would have to do differently.

This module is I/O only, around the same two parts as aiohttp's path
(:mod:`hub.web.streams`): what a stream does at its start and end (feed, counts, shutdown,
why it ended) is :mod:`hub.live.client_streams`; what it sends, from its head (aiohttp's,
byte for byte: tests/hub/test_lean_sse.py compares them) to its last event, is
:class:`hub.core.sse_stream.SseStream`, with the time and the events handed in and the
bytes it returns written to the transport.

Why (``bench/peer_nchan.py --only idle``; py-spy profile "run1-idle", in the notes of
bench/results/peer_nchan.jsonl): accepting 5,000 SSE subscribers was 3.2x Nchan's time
and each idle one held 16.7 KiB (1.76x). Of the Python heap per idle stream, ~6 KiB were
aiohttp's and uvloop's per-connection objects (RequestHandler, its parser and payload
reader, BaseRequest/web.Request, StreamResponse, StreamWriter) and the rest the handler task
with its coroutine frames (handler, three middlewares, the stream's sender). With this
path, same runs alternating with main: RSS per idle SSE 18.4 -> 2.9 KiB (Nchan 10.0), and
5,000 accepts 3.29x -> 1.38x Nchan's time (medians of 5; bench/results/peer_nchan.jsonl,
the lean-sse runs). Live delivery is unchanged (the same fan-out writes both paths).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.tcp_helpers import tcp_keepalive

from hub.core import metrics
from hub.core.events import Event
from hub.core.exceptions import RequestError
from hub.core.log_format import REQUEST_ID
from hub.core.sse_stream import SseStream, SseTerms, response_head
from hub.core.topics import check_name
from hub.live.client_streams import (
    DIRECT_WRITE_LIMIT,
    Streaming,
    abort_if_stuck,
    closed,
    ending,
    opened,
    sse_ending,
)
from hub.live.feed import ClientStream, TopicFeed
from hub.web.access import ACCESS
from hub.web.observe import REQUEST_ID_HEADER, log_access, request_id
from hub.web.streams import STREAMING

log = logging.getLogger(__name__)

#: Request headers that change nothing in an SSE answer: a request with any other (an
#: ``Authorization``, ``Origin``, ``Last-Event-ID``, ``X-Request-Id``, ``Connection``, a
#: body's...) goes to aiohttp.
_IGNORED = frozenset(
    {
        b"host",
        b"accept",
        b"user-agent",
        b"cache-control",
        b"pragma",
        b"accept-encoding",
        b"accept-language",
    }
)
_ROUTE = "/topics/{name}/events"
_PREFIX, _SUFFIX = b"/topics/", b"/events"


class LeanSse:
    """What the lean path needs of the app, looked up once."""

    __slots__ = ("access_log", "ctx", "readers", "terms")

    def __init__(self, app: web.Application) -> None:
        self.ctx: Streaming = app[STREAMING]
        self.readers = app[ACCESS].readers
        self.access_log = self.ctx.settings.access_log
        #: Every lean stream's: chunked, as it writes to the socket itself.
        self.terms = SseTerms.of(self.ctx.settings, chunked=True)

    def topic(self, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]]) -> str | None:
        """The topic of a plain subscribe the lean path serves as aiohttp would, else None."""
        if method != b"GET" or not url.startswith(_PREFIX) or not url.endswith(_SUFFIX):
            return None
        name = url[len(_PREFIX) : -len(_SUFFIX)]  # check_name refuses "/", "%", "?"...
        seen: set[bytes] = set()
        for key, value in headers:
            name_ = key.lower()
            if name_ not in _IGNORED or name_ in seen or not value.isascii():
                return None
            seen.add(name_)
        try:
            topic = check_name(name.decode("ascii"))
        except (RequestError, UnicodeDecodeError):
            return None  # aiohttp answers it (400)
        return topic if self.readers.is_open(topic) else None


class Releasing(Protocol):
    """What a :class:`LeanStream` reports to the connection guard
    (:class:`hub.web.listener.ConnectionGuard`): its connection ended. Its own, so that this
    module needs nothing of :mod:`hub.web.lean_connection`, which makes the streams."""

    def released(self, conn: object) -> None: ...


class LeanStream(SseStream, asyncio.Protocol):
    """One plain SSE subscriber: the feed's fan-out writes to its transport; a batch the
    connection cannot take waits in its :class:`ClientStream` until ``resume_writing``.

    It is its :class:`hub.core.sse_stream.SseStream` (what to send, and when), with the I/O
    around it: one object per idle connection (measured: RSS per idle stream). Its guard
    is told once its connection is lost (the guard's count).
    """

    __slots__ = (
        "_ended",
        "_guard",
        "_lean",
        "_paused",
        "_pump",
        "_request_id",
        "_started",
        "_transport",
    )

    def __init__(self, lean: LeanSse, guard: Releasing, transport: asyncio.Transport) -> None:
        super().__init__(lean.terms, asyncio.get_running_loop().time())
        self._lean = lean
        #: The guard itself, not its bound ``released``: a method object per idle stream
        #: was 64 bytes more (measured, RSS per idle stream).
        self._guard = guard
        self._transport = transport
        self._started = time.perf_counter()
        self._pump: ClientStream | None = None
        self._paused = False
        self._ended = False
        #: Kept for the access log line only.
        self._request_id: str | None = None

    def begin(self, feed: TopicFeed) -> None:
        lean, transport = self._lean, self._transport
        pump = self._pump = opened(lean.ctx, feed, feed.last_key, None, "sse")
        pump.go_live()
        pump.writer = self._write_now
        pump.stopped.add_done_callback(self._stopped)
        # As aiohttp's connections (TCP_NODELAY: asyncio and uvloop set it on every TCP
        # transport already; aiohttp setting it again cost 8% of the accept, py-spy).
        tcp_keepalive(transport)
        transport.set_write_buffer_limits(high=DIRECT_WRITE_LIMIT)
        rid = request_id("")
        if lean.access_log:
            self._request_id = rid
        head = response_head(
            date=rfc822_formatted_time(),  # cached by aiohttp for the second
            server=SERVER_SOFTWARE,
            request_id_header=REQUEST_ID_HEADER,
            request_id=rid,
        )
        transport.write(head + self.opening())
        lean.ctx.heartbeats.add(self)  # the process's one timer: none of its own

    def _write_now(self, events: list[Event]) -> bool:
        if self._paused or self._transport.is_closing():
            return False
        pump = self._pump
        assert pump is not None
        # Unfiltered (a lean stream has no filter): the feed's shared chunk, without the
        # pump's call in between (this runs once per client and publish).
        self._transport.write(pump.feed.sse_events(events, chunked=True))
        return True  # the feed counts the message

    def beat(self) -> bool:
        """Each interval (:class:`hub.live.heartbeats.Heartbeats`): a heartbeat when the
        stream has been quiet that long (one that could not take it, or that sent events
        since, is looked at again an interval later); False once it ended."""
        pump, transport = self._pump, self._transport
        if pump is None or pump.stopped.done() or transport.is_closing():
            return False
        if not self._paused:
            beat = self.heartbeat(asyncio.get_running_loop().time())
            if beat:
                transport.write(beat)
        return True

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        pump = self._pump
        if pump is None or self._transport.is_closing():
            return
        events = pump.take_pending()
        if events:
            now = asyncio.get_running_loop().time()
            self._transport.write(self.events(pump.sse_events(events), now))
            metrics.stream_messages("sse")
            pump.last_sent = events[-1].id

    def data_received(self, data: bytes) -> None:
        """What a subscriber sends after its request is never read, as on aiohttp's path
        (a stream's response ends its connection)."""

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        if self._pump is not None:
            self._pump.stop()  # ends in _stopped
        self._guard.released(self)

    def _stopped(self, _future: asyncio.Future[None]) -> None:
        pump = self._pump
        assert pump is not None
        ctx = self._lean.ctx
        pump.writer = None  # nothing more is written behind the last event id we name
        transport = self._transport
        if not transport.is_closing():
            ended = ending(pump, ctx.closing)
            last = sse_ending(ended, pump, ctx.settings.lag_retry_spread_seconds)
            data, within = self.end(last, ended)
            transport.write(data)
            transport.close()
            if last:  # it gets ``within`` to take it
                abort_if_stuck(transport, within)
        closed(ctx, pump, "sse", transport)
        ctx.feeds.release_soon(pump.feed)
        elapsed = time.perf_counter() - self._started
        metrics.http_request("GET", _ROUTE, 200, elapsed)
        if self._lean.access_log:
            peer = self._transport.get_extra_info("peername")
            token = REQUEST_ID.set(self._request_id or "-")
            try:
                path = f"/topics/{pump.feed.topic}/events"
                log_access("GET", path, _ROUTE, 200, elapsed, peer[0] if peer else None)
            finally:
                REQUEST_ID.reset(token)

"""A connection's requests until one is not plain: served lean, or handed to aiohttp.

Each accepted connection gets a :class:`LeanConnection`, which parses its requests with
llhttp (``httptools``; never by hand). Only a request that is plain by the one rule of
:class:`hub.core.plain_requests.PlainRequests` (HTTP/1.1, ``Host``, aiohttp's size limits,
no framing headers...) can be served lean: a plain SSE subscribe becomes a
:class:`hub.web.lean_sse.LeanStream` (the connection is then the stream's); a plain
publish (:mod:`hub.web.lean_publish`) is answered here, and the next request on the
kept-alive connection is parsed again. Anything else, including every request the hub
answers with an error, is handed to aiohttp's ``RequestHandler`` on the same transport with
the bytes of that request received so far, read by read as they came (aiohttp's parser
drops a request that ends in the same read as a malformed one begins, so joined reads
would be answered differently), and served exactly as before: the lean paths decline
whatever they would have to do differently, and decide before any side effect.

A request's body has one deadline, ``body_timeout_seconds`` from the request's first
byte: a lean publish whose body is late at it is handed over then, with its first byte's
time, and aiohttp's path answers 408 at once (:mod:`hub.web.request_body`).

While a publish is stored, bytes that arrive (a pipelined request) are kept and reading is
paused, so the next request's bytes are always the handed-over request's own. Reading is
paused only then, not for every publish: a pause and resume cost the loop two ``epoll_ctl``
calls, where a client that waits for its answer sends nothing meanwhile. The peer's end of
sending seen meanwhile takes effect once the publish is answered, as it did when reading
was paused.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol, cast

import httptools
from aiohttp import web
from aiohttp.tcp_helpers import tcp_keepalive
from aiohttp.web_protocol import RequestHandler

from hub.core.plain_requests import HEAD_BYTES, PlainRequests
from hub.live.feed import TopicFeed
from hub.web.lean_publish import LeanPublishing, Publish, PublishHead
from hub.web.lean_sse import LeanSse, LeanStream
from hub.web.publish import PUBLISHING


class Lean:
    """What the lean paths need of the app, looked up once."""

    __slots__ = ("body_timeout", "keepalive", "plain", "publish", "server", "serving", "sse")

    def __init__(
        self, app: web.Application, server: web.Server, *, sse: bool, publish: bool
    ) -> None:
        self.server = server
        self.sse = LeanSse(app) if sse else None
        self.publish = LeanPublishing(app) if publish else None
        settings = app[PUBLISHING].settings
        #: How long a kept-alive connection may wait for its next request's head.
        self.keepalive = settings.keepalive_timeout_seconds
        #: How long a request's body may take, from the request's first byte: a lean
        #: publish still without its body then is aiohttp's, which answers 408 at once.
        self.body_timeout = settings.body_timeout_seconds
        #: The rule for which requests the lean paths may take, with the limits of
        #: aiohttp's parser (as its request handler holds them).
        limits = server()
        self.plain = PlainRequests(
            max_line_size=limits.max_line_size,
            max_field_size=limits.max_field_size,
            max_headers=limits.max_headers,
        )
        #: Lean publishes being stored: tasks, or the store's calls (a reference keeps
        #: each task alive).
        self.serving: set[asyncio.Future[Any]] = set()

    async def finished(self, timeout: float) -> None:
        """Wait (``timeout`` at most) for the publishes being stored to be answered: at
        shutdown, after the listener closed and before Redis is, so a publish whose append
        began gets its 202 rather than a closed connection (aiohttp's shutdown waits for its
        own handlers the same way)."""
        if self.serving:
            await asyncio.wait(set(self.serving), timeout=timeout)

    def connection(self, guard: Guard) -> LeanConnection:
        return LeanConnection(self, guard)


class LeanConnection(asyncio.Protocol):
    """A connection while its requests are plain (see the module docstring)."""

    __slots__ = (
        "_began",
        "_body",
        "_busy",
        "_complete",
        "_eof",
        "_guard",
        "_headers",
        "_later",
        "_lean",
        "_messages",
        "_mine",
        "_parser",
        "_paused",
        "_publish",
        "_reads",
        "_received",
        "_served",
        "_started",
        "_storing",
        "_storing_on",
        "_timer",
        "_topic",
        "_url",
        "_waiting",
        "transport",
    )

    def __init__(self, lean: Lean, guard: Guard) -> None:
        self._lean = lean
        self._guard = guard
        self.transport: asyncio.Transport | None = None
        #: Counted by the guard as this object's (until handed over or streaming).
        self._mine = True
        #: A publish being stored: reading is paused.
        self._busy = False
        #: Reads received while busy (the next request's); reading is paused at the first.
        self._later: list[bytes] = []
        self._paused = False
        #: The peer's end of sending, seen while busy: it takes effect once answered.
        self._eof = False
        #: Waiting for the topic's feed to start (its first subscriber in this process).
        self._waiting = False
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        #: Publishes answered lean on this connection.
        self._served = 0
        #: The publish being stored without a task, its transport and start.
        self._storing: Publish | None = None
        self._storing_on: asyncio.Transport | None = None
        self._started = 0.0
        #: A publish's body deadline (armed at its complete head).
        self._timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        #: The request's reads so far, as they came (handed to aiohttp as they came), and
        #: their length together.
        self._reads: list[bytes] = []
        self._received = 0
        #: When the request's first byte came (the loop's clock): its body deadline's start.
        self._began: float | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._messages = 0
        self._complete = False
        #: The topic once the head makes it a plain subscribe; "" once it is nothing lean.
        self._topic: str | None = None
        self._publish: PublishHead | None = None

    # -- llhttp callbacks
    def on_message_begin(self) -> None:
        self._messages += 1
        if self._began is None:
            self._began = asyncio.get_running_loop().time()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        lean, topic = self._lean, None
        named = None
        if self._messages == 1:
            received = b"".join(self._reads)  # (one read, as a rule: that read itself)
            named = lean.plain.plain(received, self._url, self._headers)
        if named is not None:
            method = parser.get_method()
            if method == b"POST" and lean.publish is not None:
                self._publish = lean.publish.head(self._url, named)
                if self._publish is not None:
                    topic = self._publish.topic
                    self._guard.request_head(self)  # the body's deadline is ours
            elif lean.sse is not None:
                topic = lean.sse.topic(method, self._url, self._headers)
        self._topic = topic or ""

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True

    # -- protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if self._busy:  # the next request's start: kept, and no more read until answered
            self._later.append(data)
            if not self._paused and self.transport is not None:
                self._paused = True
                self.transport.pause_reading()
            return
        if parser is None:
            if self._waiting:  # a pipelined request: aiohttp's then
                self._reads.append(data)
                self._messages += 1
            return
        self._reads.append(data)
        self._received += len(data)
        try:
            parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self._hand_over()
            return
        if self._topic == "" or (self._topic is None and self._received > HEAD_BYTES):
            self._hand_over()
        elif self._complete and self._topic:
            if self._messages > 1:  # pipelined: aiohttp queues the next request
                self._hand_over()
            elif self._publish is not None:
                self._start_publish(self._publish)
            else:
                self._start_stream(self._topic)
        elif self._publish is not None and self._timer is None:  # the body is on its way
            loop = asyncio.get_running_loop()
            assert self._began is not None
            due = self._began + self._lean.body_timeout
            self._timer = loop.call_at(due, self._body_late)

    def eof_received(self) -> bool | None:
        if self._busy:  # answered first, as when reading was paused for every publish
            self._eof = True
            return True
        return None  # the transport closes

    def _eof_now(self, transport: asyncio.Transport) -> None:
        """The end seen while busy, where reading would have seen it: handed to whichever
        protocol the connection has now."""
        self._eof = False
        protocol = cast(asyncio.Protocol, transport.get_protocol())
        if not transport.is_closing() and not protocol.eof_received():
            transport.close()

    def _body_late(self) -> None:
        self._timer = None
        if self.transport is not None and self._parser is not None and not self._busy:
            self._hand_over()

    # -- publish
    def _start_publish(self, head: PublishHead) -> None:
        lean = self._lean.publish
        assert lean is not None and self.transport is not None
        started = time.perf_counter()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        publish = lean.decide(head, b"".join(self._body))
        if publish is None:  # an error, or anything unusual: aiohttp's path answers it
            self._hand_over()
            return
        transport = self.transport
        self._busy = True
        if not self._served:  # once, as aiohttp's connection_made
            tcp_keepalive(transport)
        self._served += 1
        pending = lean.begin(publish)
        if pending is None:  # the topic's first publish here, say
            self._serve_in_task(publish, transport, started)
            return
        # No task: answered from the store call's own callback.
        self._storing, self._storing_on, self._started = publish, transport, started
        self._lean.serving.add(pending)
        pending.add_done_callback(self._stored)

    def _serve_in_task(
        self, publish: Publish, transport: asyncio.Transport, started: float
    ) -> None:
        lean = self._lean.publish
        assert lean is not None
        task = asyncio.get_running_loop().create_task(lean.serve(publish, transport, started))
        self._lean.serving.add(task)
        task.add_done_callback(self._published)

    def _stored(self, pending: asyncio.Future[Any]) -> None:
        """:meth:`LeanPublishing.begin`'s store call is done: answered as by the task."""
        self._lean.serving.discard(pending)
        lean, publish, transport = self._lean.publish, self._storing, self._storing_on
        assert lean is not None and publish is not None and transport is not None
        self._storing = self._storing_on = None
        if pending.cancelled():
            self._answered(False)
            return
        outcome = lean.finish(publish, pending, transport, self._started)
        if outcome == "again":  # nothing ran: the task's path stores it (loading the script)
            self._serve_in_task(publish, transport, self._started)
        else:
            self._answered(outcome)

    def _published(self, task: asyncio.Future[bool | None]) -> None:
        self._lean.serving.discard(task)
        if task.cancelled() or task.exception() is not None:
            self._answered(False)
        else:
            self._answered(task.result())

    def _answered(self, outcome: bool | None) -> None:
        """A publish was answered (None: refused by the store having stored nothing)."""
        self._busy = False
        later, self._later = self._later, []
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if outcome is False:
            transport.close()
            return
        if outcome is None:  # refused by the store, nothing stored: aiohttp's answer
            self._reads += later
            self._hand_over()
        else:
            self._reset()
            self._guard.waiting(self, self._lean.keepalive)
            if self._paused:
                self._paused = False
                transport.resume_reading()
            for data in later:
                self.data_received(data)
        if self._eof:
            self._eof_now(transport)

    # -- SSE
    def _start_stream(self, topic: str) -> None:
        sse = self._lean.sse
        assert sse is not None
        feed = sse.ctx.feeds.acquire_nowait(topic)
        if feed is not None:
            self._serve_stream(feed)
            return
        # The topic's first subscriber in this process: its feed starts.
        self._parser = None
        self._waiting = True
        task = asyncio.ensure_future(sse.ctx.feeds.acquire(topic))
        _STARTING.add(task)
        task.add_done_callback(self._feed_started)

    def _feed_started(self, task: asyncio.Future[TopicFeed]) -> None:
        _STARTING.discard(task)
        self._waiting = False
        transport = self.transport
        gone = transport is None or transport.is_closing()
        if task.cancelled() or task.exception() is not None:
            # Its store is out, say: aiohttp's path tries again and answers the error.
            if not gone:
                self._hand_over()
            return
        feed = task.result()
        if gone or self._messages > 1:
            assert self._lean.sse is not None
            self._lean.sse.ctx.feeds.release_soon(feed)
            if not gone:
                self._hand_over()
        else:
            self._serve_stream(feed)

    def _serve_stream(self, feed: TopicFeed) -> None:
        transport, sse = self.transport, self._lean.sse
        assert transport is not None and sse is not None
        self._parser = None
        self._reads = []
        self._mine = False  # the stream's now, released when it ends
        self._guard.request_started(self)
        stream = LeanStream(sse, self._guard, transport)
        transport.set_protocol(stream)
        stream.begin(feed)

    # -- ending
    def connection_lost(self, exc: BaseException | None) -> None:
        self._parser = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._mine:
            self._mine = False
            self._guard.released(self)
        self.transport = None

    def force_close(self) -> None:
        """The header (or keep-alive) deadline passed."""
        if self.transport is not None and not self._busy:
            self.transport.close()

    def _hand_over(self) -> None:
        transport, reads = self.transport, self._reads
        assert transport is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._parser = None
        self._reads = []
        self._mine = False
        handler = self._lean.server()
        self._guard.handed_over(self, handler, self._began)
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self._paused:
            self._paused = False
            transport.resume_reading()
        for data in reads:  # read by read, as aiohttp would have had them
            if transport.is_closing():
                break
            handler.data_received(data)


#: Feeds being started for a first request (a reference keeps each task alive).
_STARTING: set[asyncio.Future[TopicFeed]] = set()


class Guard(Protocol):
    """What :class:`LeanConnection` reports to the connection guard
    (:class:`hub.web.listener.ConnectionGuard`); a :class:`hub.web.lean_sse.LeanStream`
    needs only ``released`` (:class:`hub.web.lean_sse.Releasing`, its module's own, so that
    it imports nothing of this one)."""

    def released(self, conn: object) -> None: ...
    def handed_over(
        self, first: LeanConnection, handler: RequestHandler, began: float | None
    ) -> None: ...
    def request_started(self, handler: object) -> None: ...
    def request_head(self, conn: LeanConnection) -> None: ...
    def waiting(self, conn: LeanConnection, seconds: float) -> None: ...

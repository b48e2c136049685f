"""The hub's outgoing HTTP/1.1: keep-alive POSTs and GETs, on bare asyncio protocols and llhttp.

Hand-written because deliveries are the hub's hottest path and aiohttp's client is not lean
enough for it; answers are parsed by llhttp (``httptools``), not by hand, since a callback's
bytes are another party's. The few GETs (WebSub verifications, publish-ping fetches) use the
same connections, checks and bounds: the hub has one HTTP client.
``bench/callback_connections.py`` measures client CPU per POST (100 callbacks, 1.3 KB body,
one POST in flight per callback, 20,000 POSTs, 2026-11-24; the figures move by ~10% between
runs on this shared 2-core machine):

=====================================  =========  =========  =========  =========
client, loop and scheme                uv http    aio http   uv https   aio https
=====================================  =========  =========  =========  =========
aiohttp ``ClientSession``              101 µs     115 µs     114 µs     145 µs
hand-written parser (until 2026-11-24) 19.1 µs    22.5 µs    30.2 µs    43.3 µs
llhttp (``httptools``, this module)    16.6 µs    20.1 µs    27.5 µs    38.7 µs
=====================================  =========  =========  =========  =========

At 100 callbacks per publish that is the difference between a ~12 ms and a ~2 ms fan-out.

What it does, and no more:

* one request per connection at a time; idle connections are kept per ``(scheme, host,
  port)`` and reused, newest first, for ``idle_seconds``, at most ``max_idle_per_origin``
  per origin and ``max_idle`` in all;
* the request is built as one ``bytes`` (head and body) and written with one call; its
  target is percent-encoded (RFC 3987 §3.1) and its host IDNA-encoded here too, so an odd
  callback URL fails its delivery instead of raising;
* a POST's answer is complete as soon as the status line and headers are in: the body (which
  deliveries ignore) is drained in the background, up to ``max_body_bytes`` and for at most
  the POST's timeout after the head, and the connection goes back to the pool only once its
  body has ended; past either bound, on a parse error, on bytes beyond the answer, or when
  the answer does not keep the connection alive, the connection is closed instead;
* a GET's answer is complete with its body, read up to the GET's ``limit`` and within its
  timeout (which bounds the whole exchange); a body longer than ``limit`` is cut there and
  its connection closed, never reused;
* every phase has a deadline: connecting (TLS handshake included) and the head within the
  request's timeout, a POST's body drain within the timeout again; the head (interim 1xx
  answers included) is capped at :data:`MAX_HEAD_BYTES` and :data:`MAX_INTERIM_ANSWERS`;
* llhttp is strict except for two leniencies RFC 9112 asks of a client: folded header lines
  (obs-fold, §5.2) and bare-LF line ends in the head (§2.2). Connections are per origin, so a
  callback's odd bytes can only ever misframe its own answers;
* a reused connection that the callback closed while it was idle fails before any byte
  of an answer; the request is then sent once more on a new connection;
* without ``allow_private``, every address a name resolves to is checked
  (:func:`hub.core.addresses.refusal`) right before the connection is made to it, so DNS
  answers that change after the subscribe-time check are caught too.

Everything that goes wrong before an answer is complete (a POST's head, a GET's body up to
its limit) raises :class:`CallbackFailed`.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import cast
from urllib.parse import quote, urlsplit

import httptools

from hub.core.addresses import refusal
from hub.core.exceptions import CallbackFailed
from hub.core.tasks import Tasks

#: The longest response head (status line and headers, interim answers included) accepted.
MAX_HEAD_BYTES = 64 * 1024
#: Interim (1xx) answers accepted before the final one.
MAX_INTERIM_ANSWERS = 16
#: How often requests in flight are checked against their deadline (its precision).
_SWEEP_SECONDS = 0.5
#: What a request target keeps as it is: RFC 3986's unreserved and reserved characters and
#: ``%`` (escapes already made). Anything else (non-ASCII, space, ``"<>\\^`{|}``) is
#: percent-encoded from UTF-8.
_TARGET_SAFE = "!#$%&'()*+,/:;=?@[]~"
_WHITESPACE = re.compile(r"[ \t]+")

Origin = tuple[str, str, int]  # scheme, host, port
Head = tuple[int, dict[str, str]]
#: An answer: status, headers (names lower-case) and body (empty for a POST: skipped).
Reply = tuple[int, dict[str, str], bytes]

_HEAD, _BODY, _IDLE = 0, 1, 2


def tls_context(
    ca_file: Path | None = None, client_cert: Path | None = None, client_key: Path | None = None
) -> ssl.SSLContext:
    """The client TLS context for https callbacks: the system's CAs plus ``ca_file`` (if
    any), and a client certificate for callbacks that ask for one (mTLS)."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    if client_cert is not None:
        context.load_cert_chain(str(client_cert), str(client_key) if client_key else None)
    return context


class _Target:
    """What a callback URL needs parsed, once: origin, request target and Host header."""

    __slots__ = ("line", "origin")

    def __init__(self, url: str) -> None:
        try:
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            host = parts.hostname
            port = parts.port
            if host and not host.isascii():
                host = host.encode("idna").decode("ascii")
        except (ValueError, UnicodeError) as exc:
            raise CallbackFailed(f"not a usable URL ({exc}): {url[:200]!r}") from None
        if scheme not in ("http", "https") or not host:
            raise CallbackFailed(f"not an http(s) URL: {url[:200]!r}")
        default = 443 if scheme == "https" else 80
        port = port or default
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        target = quote(target, safe=_TARGET_SAFE, errors="backslashreplace")
        shown = f"[{host}]" if ":" in host else host
        authority = shown if port == default else f"{shown}:{port}"
        self.origin: Origin = (scheme, host, port)
        #: The request line after its method, and the Host header.
        self.line = f" {target} HTTP/1.1\r\nHost: {authority}\r\n".encode("ascii")


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one answer at a time, parsed by llhttp; a POST's body is
    dropped, a GET's kept up to its limit."""

    def __init__(self, pool: CallbackConnections, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.parser.set_dangerous_leniencies(
            lenient_headers=True, lenient_optional_cr_before_lf=True
        )
        self.waiter: asyncio.Future[Reply] | None = None
        #: _HEAD: a request waits for its answer's head; _BODY: draining the body; _IDLE.
        self.state = _IDLE
        self.headers: dict[str, str] = {}
        self.head_bytes = 0
        self.interim = 0
        self.keep_alive = True
        self.closed = False
        self.idle_since = 0.0
        self.got_bytes = False
        self.discarded = 0
        #: A GET's body is kept, up to this many bytes (None: a POST, whose body is dropped).
        self.keep: int | None = None
        self.body: list[bytes] = []
        self.kept = 0
        self.status = 0
        #: When the head (state _HEAD) or the body drain (state _BODY) is due.
        self.deadline = 0.0
        self.timeout = 0.0

    @property
    def reading_body(self) -> bool:
        return self.state == _BODY

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            if self.state == _HEAD and self.head_bytes + len(data) > MAX_HEAD_BYTES:
                room = MAX_HEAD_BYTES - self.head_bytes
                self.parser.feed_data(data[:room])
                if self.state == _HEAD:
                    raise CallbackFailed(f"response head longer than {MAX_HEAD_BYTES} bytes")
                data = data[room:]
            self.head_bytes += len(data)
            self.parser.feed_data(data)
        except CallbackFailed as exc:
            self._fail(exc)
        except httptools.HttpParserUpgrade:
            self._fail(CallbackFailed("callback switched protocols (101)"))
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, _Cut):
                return  # a GET's answer was cut at its limit; its connection is closing
            self._fail(cause if isinstance(cause, CallbackFailed) else _malformed(exc))

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        if self.state == _BODY and self.keep is not None and self.waiter is not None:
            if self._ends_at_close():  # a GET's body delimited by the close
                self._complete()
            elif not self.waiter.done():
                self.waiter.set_exception(CallbackFailed("connection closed before the body ended"))
        if self.waiter is not None and not self.waiter.done():
            why = f": {exc}" if exc else ""
            self.waiter.set_exception(
                _Reset(f"connection closed before an answer{why}", retry=not self.got_bytes)
            )

    # -- llhttp's callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.state != _HEAD:  # bytes nobody asked for: the stream is out of step
            raise CallbackFailed("callback sent bytes outside of an answer")
        self.headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state != _HEAD:
            return  # a chunked body's trailers
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        if "\t" in text or "  " in text:  # a folded line: its fold counts as one SP
            text = _WHITESPACE.sub(" ", text)
        headers = self.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:
            if status == 101:
                raise CallbackFailed("callback switched protocols (101)")
            self.interim += 1
            if self.interim > MAX_INTERIM_ANSWERS:
                raise CallbackFailed(f"more than {MAX_INTERIM_ANSWERS} interim (1xx) answers")
            return  # an interim answer (100 Continue, 103): the real one follows
        self.state = _BODY
        self.keep_alive = self.parser.should_keep_alive()
        self.discarded = 0
        assert self.transport is not None and self.waiter is not None
        if self.keep is not None:  # a GET: its answer is complete with its body
            self.status = status
            return
        # The body gets the POST's timeout again to drain; then the connection is closed.
        self.deadline = self.pool._now() + self.timeout
        self.pool._draining.add(self)
        self.waiter.set_result((status, self.headers, b""))

    def on_body(self, body: bytes) -> None:
        keep = self.keep
        if keep is not None:
            room = keep - self.kept
            if len(body) > room:  # past the limit: the answer ends here, the connection too
                self.body.append(body[:room])
                self.keep_alive = False
                self._complete()
                raise _Cut  # no more parsing: the connection is closing
            self.body.append(body)
            self.kept += len(body)
            return
        self.discarded += len(body)
        if self.discarded > self.pool.max_body_bytes:
            raise CallbackFailed("callback answered with a body too large to skip")

    def on_message_complete(self) -> None:
        if self.state != _BODY:
            return  # an interim answer ended
        if self.keep is not None:
            self._complete()
            return
        self.state = _IDLE
        self.waiter = None
        self.pool._draining.discard(self)
        if self.keep_alive:
            self.pool._release(self)
        else:
            self.close()

    def _ends_at_close(self) -> bool:
        """The answer's body is delimited by the connection's end (RFC 9112 §6.3 item 8)."""
        coding = self.headers.get("transfer-encoding", "").rsplit(",", 1)[-1].strip().lower()
        return "content-length" not in self.headers and coding != "chunked"

    def _complete(self) -> None:
        """A GET's answer is in (its body ended, or reached the limit): hand it over."""
        assert self.waiter is not None
        body = b"".join(self.body)
        self.body, self.kept, self.keep = [], 0, None
        self.state = _IDLE
        waiter, self.waiter = self.waiter, None
        if not waiter.done():
            waiter.set_result((self.status, self.headers, body))
        if self.closed:
            return
        if self.keep_alive:
            self.pool._release(self)
        else:
            self.close()

    # -- requests ----------------------------------------------------------------------

    def send(self, request: bytes, keep: int | None = None) -> asyncio.Future[Reply]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.state = _HEAD
        self.keep = keep
        self.body, self.kept = [], 0
        self.got_bytes = False
        self.head_bytes = 0
        self.interim = 0
        self.transport.write(request)
        return self.waiter

    def close(self) -> None:
        self.keep_alive = False
        self.closed = True
        self.pool._draining.discard(self)
        if self.transport is not None:
            self.transport.close()

    def give_up(self) -> None:
        """The deadline passed before the answer was complete."""
        what = "answer's body not complete" if self.state == _BODY else "no answer"
        self._fail(CallbackFailed(f"{what} within {self.timeout:g} s"))

    def _fail(self, exc: CallbackFailed) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.close()


class _Cut(Exception):
    """Raised in llhttp's body callback to stop parsing a GET's answer cut at its limit."""


class _Reset(CallbackFailed):
    """The connection ended before an answer; ``retry``: before any byte of one."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def _post_request(target: _Target, body: bytes, headers: Mapping[str, str]) -> bytes:
    lines = [b"POST", target.line, *_header_lines(headers)]
    lines.append(length_line(body))
    lines.append(body)
    return b"".join(lines)


def length_line(body: bytes) -> bytes:
    """The ``Content-Length`` line that ends a POST's head before ``body``."""
    return b"Content-Length: %d\r\n\r\n" % len(body)


def header_block(headers: Mapping[str, str]) -> bytes:
    """``headers`` as request header lines, as a POST carries them; raises
    :class:`CallbackFailed` for a value holding a line break."""
    return b"".join(_header_lines(headers))


class Prefix:
    """What every POST to one callback starts with, encoded once
    (:meth:`CallbackConnections.prefix`): the request line, ``Host`` and fixed headers."""

    __slots__ = ("head", "target")

    def __init__(self, target: _Target, head: bytes) -> None:
        self.target = target
        self.head = head


class Started:
    """A POST :meth:`CallbackConnections.begin_post` wrote, its answer still to come."""

    __slots__ = ("connection", "deadline", "request", "target", "timeout", "waiter")

    def __init__(
        self,
        target: _Target,
        request: bytes,
        deadline: float,
        timeout: float,
        connection: _Connection,
        waiter: asyncio.Future[Reply],
    ) -> None:
        self.target = target
        self.request = request
        self.deadline = deadline
        self.timeout = timeout
        self.connection = connection
        self.waiter = waiter


def _header_lines(headers: Mapping[str, str]) -> list[bytes]:
    lines = []
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            raise CallbackFailed(f"header {name} holds a line break")
        # UTF-8 (a foreign topic URI in Link may be an IRI); never raises
        lines.append(f"{name}: {value}\r\n".encode("utf-8", "backslashreplace"))
    return lines


def _malformed(exc: httptools.HttpParserError) -> CallbackFailed:
    """llhttp's reason, named by the part of the answer it is about."""
    reason = str(exc)
    lowered = reason.lower()
    if isinstance(exc, httptools.HttpParserInvalidStatusError) or "status" in lowered:
        part = "status code"
    elif "http/" in lowered or "version" in lowered or "response line" in lowered:
        part = "status line"
    elif "content-length" in lowered:
        part = "Content-Length"
    elif "chunk" in lowered:
        part = "chunked body"
    elif "header" in lowered:
        part = "header line"
    else:
        part = "answer"
    return CallbackFailed(f"malformed {part} from callback ({reason})")


class CallbackConnections:
    """The pool of keep-alive connections to callbacks (see the module docstring)."""

    def __init__(
        self,
        *,
        allow_private: bool,
        idle_seconds: float = 30.0,
        max_idle_per_origin: int = 256,
        max_idle: int = 1024,
        max_body_bytes: int = 1 << 20,
        tls: ssl.SSLContext | None = None,
        tasks: Tasks | None = None,
    ) -> None:
        self.allow_private = allow_private
        #: Where the sweeper runs: the hub's task tree (standalone, e.g. in a benchmark, a
        #: bare asyncio task).
        self.tasks = tasks
        self.idle_seconds = idle_seconds
        self.max_idle_per_origin = max_idle_per_origin
        #: Idle connections kept in all (each is a file descriptor): a hub with many
        #: subscriptions on many callback hosts keeps only its busiest ones warm.
        self.max_idle = max_idle
        self.idle_count = 0
        self.max_body_bytes = max_body_bytes
        self._idle: dict[Origin, list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}
        self._ssl = tls
        self._open: set[_Connection] = set()
        self._busy: set[_Connection] = set()
        #: Connections draining a body after their answer's head (closed past deadline).
        self._draining: set[_Connection] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _now(self) -> float:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop.time()

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Head:
        """POST ``body``; the status and headers of the answer (its body is skipped).

        ``timeout`` bounds the whole exchange, connecting included. Answers are timed by
        one sweep over the requests in flight (:meth:`_sweep`) rather than a timer per
        request: arming and cancelling a timer per POST cost more than the POST's own write.
        """
        target = self._target(url)
        request = _post_request(target, body, headers)
        status, answer_headers, _ = await self._request(target, request, timeout, None)
        return status, answer_headers

    def begin_post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> Started | None:
        """:meth:`post`, its request written before this returns, on an idle keep-alive
        connection to the callback's origin; None (nothing sent) when there is none.

        Lets a publish's fan-out write every delivery in one loop turn, before any worker
        task runs. The caller must hand what this returns to :meth:`finish` or
        :meth:`abandon`, exactly once. Raises :class:`CallbackFailed` (nothing sent) for a
        URL or header :meth:`post` would fail on.
        """
        target = self._target(url)
        request = _post_request(target, body, headers)
        connection = self._reuse(target.origin)
        if connection is None:
            return None
        deadline = self._now() + timeout
        waiter = self._send(connection, request, deadline, timeout, None)
        return Started(target, request, deadline, timeout, connection, waiter)

    def prefix(self, url: str, headers: Mapping[str, str]) -> Prefix:
        """The start of every POST of ``headers`` to ``url``, for :meth:`begin_built`:
        the request then is ``head``, more header lines, :func:`length_line` and the body,
        byte for byte what :meth:`post` writes. Raises :class:`CallbackFailed` where
        :meth:`post` would fail on the URL or a header."""
        target = self._target(url)
        return Prefix(target, b"".join([b"POST", target.line, *_header_lines(headers)]))

    def begin_built(self, prefix: Prefix, request: bytes, timeout: float) -> Started | None:
        """:meth:`begin_post` of a request built from ``prefix`` by the caller (a publish's
        fan-out builds its body and shared header lines once, not once per callback)."""
        connection = self._reuse(prefix.target.origin)
        if connection is None:
            return None
        deadline = self._now() + timeout
        waiter = self._send(connection, request, deadline, timeout, None)
        return Started(prefix.target, request, deadline, timeout, connection, waiter)

    async def finish(self, started: Started) -> Head:
        """The answer to a :meth:`begin_post` (sent once more on a fresh connection if the
        callback had closed the reused one, as :meth:`post` does)."""
        try:
            status, headers, _ = await self._answer(started.connection, started.waiter)
        except _Reset as exc:
            if not exc.retry:
                raise
            status, headers, _ = await self._fresh(
                started.target, started.request, started.deadline, started.timeout, None
            )
        return status, headers

    def abandon(self, started: Started) -> None:
        """A :meth:`begin_post` nobody will :meth:`finish`: its connection is closed."""
        started.waiter.cancel()
        self._busy.discard(started.connection)
        started.connection.close()

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = _Target(url)
            if len(self._targets) < 100_000:
                self._targets[url] = target
        return target

    async def get(self, url: str, headers: Mapping[str, str], timeout: float, limit: int) -> Reply:
        """GET ``url``; the status, headers and at most ``limit`` bytes of the body.

        ``timeout`` bounds the whole exchange, body included. A longer body is cut at
        ``limit`` (the connection is then closed); redirects are answers like any other.
        """
        target = _Target(url)  # not cached: verification URLs are one-off (their challenge)
        request = b"".join([b"GET", target.line, *_header_lines(headers), b"\r\n"])
        return await self._request(target, request, timeout, limit)

    async def _request(
        self, target: _Target, request: bytes, timeout: float, keep: int | None
    ) -> Reply:
        deadline = self._now() + timeout
        connection = self._reuse(target.origin)
        if connection is not None:
            try:
                waiter = self._send(connection, request, deadline, timeout, keep)
                return await self._answer(connection, waiter)
            except _Reset as exc:
                if not exc.retry:
                    raise
            # the callback closed the idle connection as we reused it: once more, fresh
        return await self._fresh(target, request, deadline, timeout, keep)

    async def _fresh(
        self, target: _Target, request: bytes, deadline: float, timeout: float, keep: int | None
    ) -> Reply:
        try:
            async with asyncio.timeout_at(deadline):
                connection = await self._connect(target.origin)
        except TimeoutError:
            raise CallbackFailed(f"could not connect within {timeout:g} s") from None
        return await self._answer(
            connection, self._send(connection, request, deadline, timeout, keep)
        )

    def _send(
        self,
        connection: _Connection,
        request: bytes,
        deadline: float,
        timeout: float,
        keep: int | None,
    ) -> asyncio.Future[Reply]:
        connection.deadline, connection.timeout = deadline, timeout
        if not self._start_sweeper():
            connection.close()
            raise CallbackFailed("the hub is shutting down")
        self._busy.add(connection)
        return connection.send(request, keep)

    async def _answer(self, connection: _Connection, waiter: asyncio.Future[Reply]) -> Reply:
        try:
            return await waiter
        except BaseException:  # failed, timed out or cancelled: never reuse it
            if connection.waiter is waiter:
                connection.close()
            raise
        finally:
            # A complete answer may have put the connection back in the pool, and another
            # request taken it, before this task resumed: that request is its business now.
            if connection.waiter is waiter or connection.waiter is None:
                self._busy.discard(connection)

    def _start_sweeper(self) -> bool:
        """Make sure the sweeper runs; False once the hub's task tree is stopping (then
        nothing may start that only the sweeper would time out)."""
        if self._sweeper is None:
            if self.tasks is None:
                self._sweeper = asyncio.create_task(self._sweep(), name="callback-connections")
            elif self.tasks.stopping.is_set():
                return False
            else:
                self._sweeper = self.tasks.spawn("callback-connections", self._sweep())
        return True

    async def _sweep(self) -> None:
        """Twice a second, while any connection is busy, draining or idle: fail the
        requests past their deadline, close the connections whose body is not drained by
        its deadline, and those idle for ``idle_seconds``."""
        try:
            while self._busy or self._draining or self.idle_count:
                await asyncio.sleep(_SWEEP_SECONDS)
                now = self._now()
                for connection in [c for c in self._busy if c.deadline <= now]:
                    self._busy.discard(connection)
                    connection.give_up()
                for connection in [c for c in self._draining if c.deadline <= now]:
                    connection.close()  # its answer counted; its body is not worth waiting for
                self._close_stale(time.monotonic() - self.idle_seconds)
        finally:
            self._sweeper = None

    def _close_stale(self, idle_before: float) -> None:
        for origin, idle in list(self._idle.items()):
            while idle and idle[0].idle_since < idle_before:  # oldest first
                self.idle_count -= 1
                idle.pop(0).close()
            if not idle:
                del self._idle[origin]

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for connection in list(self._open):
            connection.close()
        self._idle.clear()
        self._draining.clear()
        self.idle_count = 0

    # -- the pool ----------------------------------------------------------------------

    def _reuse(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the newest: the likeliest to be still open
            self.idle_count -= 1
            if not connection.closed and now - connection.idle_since < self.idle_seconds:
                return connection
            connection.close()
        return None

    def _release(self, connection: _Connection) -> None:
        idle = self._idle.setdefault(connection.origin, [])
        if len(idle) >= self.max_idle_per_origin or self.idle_count >= self.max_idle:
            connection.close()
            return
        if not self._start_sweeper():
            connection.close()
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)
        self.idle_count += 1

    def _forget(self, connection: _Connection) -> None:
        """The connection closed (either side): not open, not idle any more."""
        self._open.discard(connection)
        self._draining.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)
            self.idle_count -= 1

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = await self._tls() if scheme == "https" else None
        name = host if tls is not None else None
        try:
            if self.allow_private:
                _, connection = await loop.create_connection(
                    lambda: _Connection(self, origin), host, port, ssl=tls, server_hostname=name
                )
            else:
                connection = await self._connect_public(origin, tls)
        except CallbackFailed:
            raise
        except ssl.SSLCertVerificationError as exc:
            raise CallbackFailed(
                f"TLS certificate of {host}:{port} not trusted: {exc.verify_message}"
                " (a private CA goes in RSHUB_CALLBACK_CA_FILE)"
            ) from None
        # UnicodeError: a host the resolver's own IDNA step refuses (a ping URL's non-ASCII
        # host, which IDNA2008 took): a failed connect, never a 500.
        except (OSError, ssl.SSLError, UnicodeError) as exc:
            raise CallbackFailed(f"cannot connect to {host[:100]}:{port}: {exc}") from None
        self._open.add(connection)
        return connection

    async def _connect_public(self, origin: Origin, tls: ssl.SSLContext | None) -> _Connection:
        _, host, port = origin
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        refused: list[str] = []
        error: OSError | None = None
        for family, type_, proto, _, sockaddr in infos:
            why = refusal(str(sockaddr[0]))
            if why is not None:
                refused.append(f"refusing to connect to {sockaddr[0]}: {why}")
                continue
            sock = socket.socket(family, type_, proto)
            try:
                sock.setblocking(False)
                await loop.sock_connect(sock, sockaddr)
                _, connection = await loop.create_connection(
                    lambda: _Connection(self, origin),
                    sock=sock,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
                return connection
            except OSError as exc:
                sock.close()
                error = exc
            except BaseException:  # cancelled (a timeout): no socket left behind
                sock.close()
                raise
        if error is not None:
            raise error
        raise CallbackFailed(
            "; ".join(refused or [f"{host} has no address"]) + " (RSHUB_ALLOW_PRIVATE_CALLBACKS)"
        )

    async def prepare_tls(self) -> None:
        """Make the system's TLS context in a thread (loading the CAs takes tens of ms of
        CPU), so that neither the hub's start nor an https callback waits for it on the loop
        (the runtime makes it soon after the start; a first https callback before that
        makes it then)."""
        if self._ssl is None:
            context = await asyncio.to_thread(ssl.create_default_context)
            if self._ssl is None:
                self._ssl = context

    async def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            await self.prepare_tls()
        assert self._ssl is not None
        return self._ssl

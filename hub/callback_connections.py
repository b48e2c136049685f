"""Keep-alive HTTP/1.1 POSTs to WebSub callbacks, on bare asyncio protocols.

Hand-written because it is the hub's hottest path and aiohttp's client is not lean enough
for it: ``bench/callback_connections.py`` measures 117 µs of client CPU per POST with
aiohttp's ``ClientSession`` and 20 µs with this, both on uvloop (158 µs and 24 µs on
asyncio), which at 100 callbacks per publish is the difference between a 12 ms and a 2 ms
fan-out.

What it does, and no more:

* one request per connection at a time; idle connections are kept per ``(scheme, host,
  port)`` and reused, newest first, for ``idle_seconds``, at most ``max_idle_per_origin``
  per origin and ``max_idle`` in all;
* the request is built as one ``bytes`` (head and body) and written with one call;
* the answer is complete as soon as the status line and headers are in: the body (which
  deliveries ignore) is read and thrown away in the background, up to ``max_body_bytes``,
  and the connection goes back to the pool only once its body has ended (Content-Length,
  chunked, or a bodiless status); a body that ends at close, ``Connection: close``, or an
  HTTP/1.0 answer closes the connection instead;
* a reused connection that the callback closed while it was idle fails before any byte
  of an answer; the request is then sent once more on a new connection;
* without ``allow_private``, every address a name resolves to is checked
  (:func:`hub.addresses.refusal`) right before the connection is made to it, so DNS
  answers that change after the subscribe-time check are caught too.

Everything that goes wrong before a complete head raises :class:`CallbackFailed`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

from .addresses import refusal
from .exceptions import CallbackFailed

#: The longest response head (status line and headers) accepted.
MAX_HEAD_BYTES = 64 * 1024
#: How often requests in flight are checked against their deadline (its precision).
_SWEEP_SECONDS = 0.5

Origin = tuple[str, str, int]  # scheme, host, port
Head = tuple[int, dict[str, str]]


class _Target:
    """What a callback URL needs parsed, once: origin, request target and Host header."""

    __slots__ = ("origin", "start")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise CallbackFailed(f"not an http(s) URL: {url!r}")
        host = parts.hostname
        default = 443 if scheme == "https" else 80
        port = parts.port or default
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        shown = f"[{host}]" if ":" in host else host
        authority = shown if port == default else f"{shown}:{port}"
        self.origin: Origin = (scheme, host, port)
        self.start = f"POST {target} HTTP/1.1\r\nHost: {authority}\r\n".encode("latin-1")


class _Connection(asyncio.Protocol):
    """One keep-alive connection: parses one response head at a time, discards bodies."""

    def __init__(self, pool: CallbackConnections, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Head] | None = None
        #: Bytes of body still to discard; -1: chunked; None: until the connection closes.
        self.body_left: int | None = 0
        self.reading_body = False
        self.keep_alive = True
        self.closed = False
        self.idle_since = 0.0
        self.got_bytes = False
        self.discarded = 0
        self.deadline = 0.0
        self.timeout = 0.0

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.buffer += data
        try:
            self._parse()
        except CallbackFailed as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        if self.waiter is not None and not self.waiter.done():
            why = f": {exc}" if exc else ""
            self.waiter.set_exception(
                _Reset(f"connection closed before an answer{why}", retry=not self.got_bytes)
            )

    # -- requests ----------------------------------------------------------------------

    def send(self, request: bytes) -> asyncio.Future[Head]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.got_bytes = False
        self.transport.write(request)
        return self.waiter

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()

    def give_up(self, why: str) -> None:
        self._fail(CallbackFailed(why))

    def _fail(self, exc: CallbackFailed) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.close()

    def _parse(self) -> None:
        while True:
            if self.reading_body:
                if not self._discard_body():
                    return
                self.reading_body = False
                self.waiter = None
                if self.keep_alive and not self.buffer:
                    self.pool._release(self)
                else:  # closing, or bytes beyond the answer: the stream is out of step
                    self.close()
                return
            if self.waiter is None or self.waiter.done():
                if self.buffer:  # bytes nobody asked for: the stream is out of step
                    raise CallbackFailed("callback sent bytes outside of an answer")
                return
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0 and len(self.buffer) <= MAX_HEAD_BYTES:
                return
            if end < 0 or end > MAX_HEAD_BYTES:
                raise CallbackFailed(f"response head longer than {MAX_HEAD_BYTES} bytes")
            head = bytes(self.buffer[:end])
            del self.buffer[: end + 4]
            status, headers, http10 = _parse_head(head)
            if 100 <= status < 200:
                if status == 101:
                    raise CallbackFailed("callback switched protocols (101)")
                continue  # an interim answer (100 Continue, 103): the real one follows
            self.body_left = _body_length(status, headers)
            connection = headers.get("connection", "").lower()
            self.keep_alive = (
                "keep-alive" in connection if http10 else "close" not in connection
            ) and self.body_left is not None
            self.reading_body = True
            self.discarded = 0
            self.waiter.set_result((status, headers))

    def _discard_body(self) -> bool:
        """Drop body bytes from the buffer; True once the body has ended."""
        if self.body_left is None:  # until close: connection_lost ends it
            self._count(len(self.buffer))
            self.buffer.clear()
            return False
        if self.body_left >= 0:
            taken = min(self.body_left, len(self.buffer))
            self._count(taken)
            del self.buffer[:taken]
            self.body_left -= taken
            return self.body_left == 0
        return self._discard_chunks()

    def _discard_chunks(self) -> bool:
        buffer = self.buffer
        while True:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                if len(buffer) > 4096:
                    raise CallbackFailed("malformed chunked body from callback")
                return False
            size_text = bytes(buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise CallbackFailed("malformed chunk size from callback") from None
            if size == 0:  # last chunk, then optional trailers and an empty line
                if buffer[line_end + 2 : line_end + 4] == b"\r\n":
                    del buffer[: line_end + 4]
                    return True
                trailers_end = buffer.find(b"\r\n\r\n", line_end)
                if trailers_end < 0:
                    if len(buffer) > MAX_HEAD_BYTES:
                        raise CallbackFailed("chunked trailers too long")
                    return False
                del buffer[: trailers_end + 4]
                return True
            needed = line_end + 2 + size + 2
            if len(buffer) < needed:
                return False
            self._count(size)
            del buffer[:needed]

    def _count(self, size: int) -> None:
        self.discarded += size
        if self.discarded > self.pool.max_body_bytes:
            raise CallbackFailed("callback answered with a body too large to skip")


class _Reset(CallbackFailed):
    """The connection ended before an answer; ``retry``: before any byte of one."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """Status, headers (lower-case names; repeated ones joined by ``,``), and HTTP/1.0."""
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
        raise CallbackFailed(f"malformed status line from callback: {lines[0][:100]!r}")
    code = status_line[1]
    if len(code) != 3 or not code.isdigit():
        raise CallbackFailed(f"malformed status code from callback: {code[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise CallbackFailed(f"malformed header line from callback: {line[:100]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return int(code), headers, status_line[0] == "HTTP/1.0"


def _body_length(status: int, headers: Mapping[str, str]) -> int | None:
    """0 (none), n bytes, -1 (chunked) or None (until the connection closes); RFC 9112 §6.3."""
    if status in (204, 304):
        return 0
    coding = headers.get("transfer-encoding")
    if coding is not None:
        if coding.lower().rsplit(",", 1)[-1].strip() == "chunked":
            return -1
        return None
    length = headers.get("content-length")
    if length is None:
        return None
    values = {v.strip() for v in length.split(",")}
    if len(values) != 1 or not (value := values.pop()).isdigit():
        raise CallbackFailed(f"malformed Content-Length from callback: {length[:40]!r}")
    return int(value)


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
    ) -> None:
        self.allow_private = allow_private
        self.idle_seconds = idle_seconds
        self.max_idle_per_origin = max_idle_per_origin
        #: Idle connections kept in all (each is a file descriptor): a hub with many
        #: subscriptions on many callback hosts keeps only its busiest ones warm.
        self.max_idle = max_idle
        self.idle_count = 0
        self.max_body_bytes = max_body_bytes
        self._idle: dict[Origin, list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}
        self._ssl: ssl.SSLContext | None = None
        self._open: set[_Connection] = set()
        self._busy: set[_Connection] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Head:
        """POST ``body``; the status and headers of the answer (its body is skipped).

        ``timeout`` bounds the whole exchange, connecting included. Answers are timed by
        one sweep over the requests in flight (:meth:`_sweep`) rather than a timer per
        request: arming and cancelling a timer per POST cost more than the POST's own write.
        """
        deadline = asyncio.get_running_loop().time() + timeout
        target = self._targets.get(url)
        if target is None:
            target = _Target(url)
            if len(self._targets) < 100_000:
                self._targets[url] = target
        lines = [target.start]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise CallbackFailed(f"header {name} holds a line break")
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        lines.append(b"Content-Length: %d\r\n\r\n" % len(body))
        lines.append(body)
        request = b"".join(lines)
        connection = self._reuse(target.origin)
        if connection is not None:
            try:
                return await self._exchange(connection, request, deadline, timeout)
            except _Reset as exc:
                if not exc.retry:
                    raise
            # the callback closed the idle connection as we reused it: once more, fresh
        try:
            async with asyncio.timeout_at(deadline):
                connection = await self._connect(target.origin)
        except TimeoutError:
            raise CallbackFailed(f"could not connect within {timeout:g} s") from None
        return await self._exchange(connection, request, deadline, timeout)

    async def _exchange(
        self, connection: _Connection, request: bytes, deadline: float, timeout: float
    ) -> Head:
        connection.deadline, connection.timeout = deadline, timeout
        self._busy.add(connection)
        self._start_sweeper()
        try:
            return await connection.send(request)
        except BaseException:  # failed, timed out or cancelled: never reuse it
            connection.close()
            raise
        finally:
            self._busy.discard(connection)

    def _start_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="callback-connections")

    async def _sweep(self) -> None:
        """Twice a second, while any connection is busy or idle: fail the requests past
        their deadline, and close the connections idle for ``idle_seconds``."""
        loop = asyncio.get_running_loop()
        try:
            while self._busy or self.idle_count:
                await asyncio.sleep(_SWEEP_SECONDS)
                now = loop.time()
                for connection in [c for c in self._busy if c.deadline <= now]:
                    self._busy.discard(connection)
                    connection.give_up(f"no answer within {connection.timeout:g} s")
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
        connection.idle_since = time.monotonic()
        idle.append(connection)
        self.idle_count += 1
        self._start_sweeper()

    def _forget(self, connection: _Connection) -> None:
        """The connection closed (either side): not open, not idle any more."""
        self._open.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)
            self.idle_count -= 1

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = self._tls() if scheme == "https" else None
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
        except (OSError, ssl.SSLError) as exc:
            raise CallbackFailed(f"cannot connect to {host}:{port}: {exc}") from None
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

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

"""The hub's listening socket, guarded: a connection cap and a deadline for request headers.

aiohttp waits for a new connection's first request forever, so a peer could hold thousands
of connections open by sending nothing, or one header byte at a time. :class:`GuardedSite`
is the hub's TCP site: every accepted connection counts against ``max_connections`` (over
the cap it is answered ``503`` and closed at once), and one that has not sent complete request
headers within ``header_timeout_seconds`` is closed. Later requests on a kept-alive
connection are bounded by aiohttp's ``keepalive_timeout``; request bodies by
``body_timeout_seconds`` where handlers read them (:mod:`hub.web.request_body`), from the
request's first byte where the lean connection saw it (the guard hands that time on).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from hub.web.request_body import REQUEST_BEGAN

if TYPE_CHECKING:
    from hub.web.lean_connection import Lean, LeanConnection

log = logging.getLogger(__name__)

#: Not a kept-alive lean connection (see ``ConnectionGuard._idle``).
_NOT_IDLE = object()
#: Handed-over connections whose first request's start is kept before the ended ones are
#: dropped (one that aiohttp refused before any handler never collects its own); then
#: twice those left, so that dropping stays linear in the hand-overs.
_BEGAN_KEPT = 256

_BUSY_BODY = b'{"error": "too many connections; retry later", "status": 503}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
) % (len(_BUSY_BODY), _BUSY_BODY)


class _Refuse(asyncio.Protocol):
    """A connection over the cap: answered 503 and closed, never parsed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        tcp.write(_BUSY)
        tcp.close()


class ConnectionGuard:
    """The cap and the header deadline; one per app, shared by its site and middleware."""

    def __init__(self, max_connections: int, header_timeout: float) -> None:
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.refused = 0
        #: Connections still owing their first request's headers, with their deadline.
        #: (Request handlers take no weak references; an entry lives until its deadline at
        #: most.)
        self._pending: dict[object, asyncio.TimerHandle] = {}
        #: Connections that aiohttp's server does not count: accepted but not yet made, or
        #: held by the lean paths (hub.web.lean_connection: its parsers and its streams).
        self._held = 0
        #: Shutting down: a lean connection that answered its publish is closed.
        self._closed = False
        #: Kept-alive lean connections: when each stops waiting for its next request's head
        #: (None while it serves one). Its timer in ``_pending`` is not re-armed per request
        #: but when it fires early (a timer made and cancelled per publish was ~2% of the
        #: lean publish's CPU).
        self._idle: dict[object, float | None] = {}
        #: Connections handed over by the lean paths: when the request they were reading
        #: began (its first byte), for its body deadline; collected at its dispatch.
        self._began: dict[RequestHandler, float] = {}
        self._began_kept = _BEGAN_KEPT

    def protocol_factory(
        self, server: web.Server, lean: Lean | None = None
    ) -> Callable[[], asyncio.Protocol]:
        """Each accepted connection's protocol: aiohttp's request handler, or with ``lean``,
        a :class:`hub.web.lean_connection.LeanConnection` (which hands it to aiohttp at its
        first request that is not a plain SSE subscribe or publish)."""
        loop = asyncio.get_running_loop()

        def accept() -> asyncio.Protocol:
            # The server counts a connection once its connection_made has run,
            # which the loop schedules after the accept: a burst accepted in one go would
            # all pass a check on it alone. ``_held`` counts those still on their way.
            # (``_connections``: the ``connections`` property copies it into a list, per
            # accept: quadratic in the connections held.)
            if len(server._connections) + self._held >= self.max_connections:
                self.refused += 1
                return _Refuse()
            self._held += 1
            conn: RequestHandler | LeanConnection
            if lean is None:
                loop.call_soon(self._made)  # runs just before the handler's connection_made
                conn = server()
            else:
                conn = lean.connection(self)
            self._pending[conn] = loop.call_later(self.header_timeout, self._deadline, conn)
            return conn

        return accept

    def _made(self) -> None:
        self._held -= 1

    def released(self, conn: object) -> None:
        """A lean-path connection (first request or stream) ended."""
        self._held -= 1
        self.request_started(conn)

    def handed_over(
        self, first: LeanConnection, handler: RequestHandler, began: float | None
    ) -> None:
        """``first`` is now ``handler``'s (counted by aiohttp from its connection_made on),
        with the header deadline it had, and its request's start (``began``: the loop's
        time of its first byte; None before any byte)."""
        self._held -= 1
        if began is not None:
            if len(self._began) >= self._began_kept:
                self._began = {h: t for h, t in self._began.items() if h.transport is not None}
                self._began_kept = max(_BEGAN_KEPT, 2 * len(self._began))
            self._began[handler] = began
        due = self._idle.pop(first, _NOT_IDLE)
        timer = self._pending.pop(first, None)
        if timer is not None:
            timer.cancel()
            # None: it was serving a request (its timer a stale one).
            when = timer.when() if due is _NOT_IDLE else cast("float | None", due)
            if when is not None:
                loop = asyncio.get_running_loop()
                self._pending[handler] = loop.call_at(when, self._deadline, handler)

    def waiting(self, conn: LeanConnection, seconds: float) -> None:
        """A lean connection kept alive waits ``seconds`` at most for its next request's
        head (aiohttp's ``keepalive_timeout`` for its own)."""
        if self._closed:
            conn.force_close()
            return
        loop = asyncio.get_running_loop()
        due = self._idle[conn] = loop.time() + seconds
        if conn not in self._pending:
            self._pending[conn] = loop.call_at(due, self._deadline, conn)

    def request_head(self, conn: LeanConnection) -> None:
        """A lean connection has its request's head: no deadline for its next head (the
        timer stays; :meth:`waiting` sets the deadline again)."""
        if conn in self._idle:
            self._idle[conn] = None
        else:
            self.request_started(conn)

    def dispatched(self, request: web.Request) -> None:
        """The request's headers are complete: its connection's header deadline is moot
        (called first by the hub's one middleware, :func:`hub.web.observe.observe_middleware`).
        The first request of a connection the lean paths handed over gets its start."""
        handler = request.protocol
        if self._began:
            began = self._began.pop(handler, None)
            if began is not None:
                request[REQUEST_BEGAN] = began
        self.request_started(handler)

    def request_started(self, handler: object) -> None:
        self._idle.pop(handler, None)
        timer = self._pending.pop(handler, None)
        if timer is not None:
            timer.cancel()

    def _deadline(self, conn: RequestHandler | LeanConnection) -> None:
        if self._pending.pop(conn, None) is None or conn.transport is None:
            self._idle.pop(conn, None)
            return
        if conn in self._idle:
            due = self._idle[conn]
            if due is None:  # serving a request: :meth:`waiting` arms the next deadline
                return
            loop = asyncio.get_running_loop()
            if due > loop.time():  # it served requests since: wait on
                self._pending[conn] = loop.call_at(due, self._deadline, conn)
                return
            del self._idle[conn]
        log.debug("closing a connection that sent no complete request headers in time")
        conn.force_close()

    def close(self) -> None:
        self._closed = True
        for conn, timer in self._pending.items():
            timer.cancel()
            if self._idle.get(conn, 0.0) is None:  # serving a request: it ends as before
                continue
            if not isinstance(conn, RequestHandler):  # aiohttp's shutdown closes its own
                cast("LeanConnection", conn).force_close()
        self._pending.clear()
        self._idle.clear()


class GuardedSite(web.BaseSite):
    """A TCP site whose connections pass through a :class:`ConnectionGuard`."""

    def __init__(
        self,
        runner: web.BaseRunner,
        guard: ConnectionGuard,
        host: str,
        port: int,
        *,
        reuse_port: bool = False,
        lean: Lean | None = None,
        shutdown_timeout: float = 5.0,
    ) -> None:
        super().__init__(runner, backlog=1024)
        #: How long :meth:`stop` waits for lean publishes being stored.
        self._shutdown_timeout = shutdown_timeout
        #: Serve plain SSE subscribes and publishes on the lean paths (hub.web.lean_connection).
        self._lean = lean
        self._guard = guard
        self._host = host
        self._port = port
        #: SO_REUSEPORT: several hub processes share the port (``rshub serve --workers``).
        self._reuse_port = reuse_port

    async def stop(self) -> None:
        """Stop listening, then let the lean publishes being stored finish (the runner's
        shutdown, which waits for aiohttp's own handlers, does not know of them)."""
        await super().stop()
        if self._lean is not None:
            await self._lean.finished(self._shutdown_timeout)

    @property
    def name(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        runner = self._runner
        assert isinstance(runner, web.AppRunner)
        factory = self._guard.protocol_factory(server, self._lean)
        bound = self._bind_address()
        if bound is not None:
            self._server = await loop.create_server(factory, sock=bound, backlog=self._backlog)
            return
        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_port=self._reuse_port or None,
            reuse_address=True,
            family=socket.AF_INET6 if ":" in self._host else socket.AF_UNSPEC,
        )

    def _bind_address(self) -> socket.socket | None:
        """A socket bound to the host when it is an IP address, with the options the loop's
        ``create_server`` sets; None for a host name (the loop resolves it). uvloop looks
        even an address up in its thread pool: ~10 ms of a restart's way to serving."""
        try:
            ip = ipaddress.ip_address(self._host)
        except ValueError:
            return None
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self._reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:  # this address only, as create_server does
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            address = (self._host, self._port)
            try:
                sock.bind(address)
            except OSError as exc:
                reason = (exc.strerror or str(exc)).lower()
                raise OSError(
                    exc.errno, f"error while attempting to bind on address {address!r}: {reason}"
                ) from None
        except BaseException:
            sock.close()
            raise
        return sock


class ClientGone(web.Response):
    """The answer to a client that went away mid-request: preparing it reports the
    disconnect to aiohttp, which then ends the connection quietly (a DEBUG line)."""

    async def prepare(self, request: web.BaseRequest) -> None:
        raise ConnectionResetError("the client went away")

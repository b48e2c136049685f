"""CORS in the web layer: preflight answers and grants, by :class:`hub.core.cors.CorsPolicy`.

One small middleware rather than ``aiohttp-cors``: that package wants every route
registered with it one by one (and an OPTIONS route added per resource), answers every
response through its own signal, and would be one more dependency for ~40 lines. Installed
only when origins are configured, and then it costs a request without ``Origin`` one
header lookup. It covers what a browser client uses: topics (documents, streams, publish;
and streams of several topics),
the Source Description, the hub URL (publish, pings, WebSub) and ``/openapi.json``; never
the admin API, ``/metrics`` or the dashboard. A WebSocket is not subject to CORS, but a
browser does send ``Origin`` with its handshake: with origins configured, one from an
origin neither listed nor the hub's own is refused (403), as a cross-origin read would be.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from hub.core.cors import CorsPolicy
from hub.core.exceptions import Forbidden
from hub.core.topics import WELL_KNOWN

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[..., Awaitable[web.StreamResponse]]

#: Request key: the ``Origin`` this request's answer grants.
_GRANTED = web.RequestKey("cors_origin", str)
#: Streams of several topics (``/events``, ``/ws``) are topics' streams too.
_EXACT = frozenset({WELL_KNOWN, "/openapi.json", "/events", "/ws"})


def _shared(request: web.Request) -> bool:
    """A URL browsers on other origins may use (``/`` for POSTs: its GET is the dashboard)."""
    path = request.path
    if path == "/":
        return request.method not in ("GET", "HEAD")
    return path.startswith("/topics/") or path in _EXACT


def _own_origin(request: web.Request, origin: str) -> bool:
    """``origin`` is the hub itself as this request reached it (scheme aside: a proxy may
    end TLS in front of the hub)."""
    host = origin.partition("://")[2]
    return bool(host) and host == request.host


def cors_middleware(policy: CorsPolicy) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin is None or not _shared(request):
            return await handler(request)
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            return _preflight(request, policy, origin)
        if policy.allows(origin):
            request[_GRANTED] = origin
        elif request.headers.get("Upgrade", "").lower() == "websocket" and not _own_origin(
            request, origin
        ):
            raise Forbidden(
                f"origin {origin[:100]!r} may not open WebSockets to this hub "
                "(it is not in RSHUB_CORS_ORIGINS)"
            )
        return await handler(request)

    return middleware


def _preflight(request: web.Request, policy: CorsPolicy, origin: str) -> web.Response:
    exc = request.match_info.http_exception
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = exc.allowed_methods
    elif exc is not None:
        raise exc  # 404: no such URL
    else:
        allowed = {request.method}
    if request.path == "/":
        allowed = {"POST"} & set(allowed)  # GET / is the dashboard: not shared
    headers = policy.preflight(
        origin,
        request.headers.get("Access-Control-Request-Method", ""),
        request.headers.get("Access-Control-Request-Headers", ""),
        allowed,
    )
    return web.Response(status=204, headers={**headers, "Vary": "Origin"})


def grant_signal(
    policy: CorsPolicy,
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """``on_response_prepare``: the grant on an allowed origin's answer (errors included,
    so a page can read why it was refused), and ``Vary: Origin`` on every shared answer so
    no cache hands one origin's answer to another."""

    async def grant(request: web.Request, response: web.StreamResponse) -> None:
        if not _shared(request):
            return
        origin = request.get(_GRANTED)
        if origin is not None:
            response.headers.update(policy.grant(origin))
        vary = response.headers.get("Vary")
        if vary is None:
            response.headers["Vary"] = "Origin"
        elif "origin" not in vary.lower():
            response.headers["Vary"] = f"{vary}, Origin"

    return grant

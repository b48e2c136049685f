"""Per-request observation: request ids, HTTP metrics, publish metrics, the access log.

:func:`observe_middleware` wraps every request (outside the error mapping, so it sees the
final status): it gives the request an id (the client's ``X-Request-Id`` when sane, else a
new one), sets it in :data:`hub.core.log_format.REQUEST_ID` for every log line of the request,
times it by route *pattern* (``/topics/{name}``, never the raw path, so the series stay
bounded), counts failed publishes, and writes the opt-in access log line.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from random import getrandbits

from aiohttp import web

from hub.core import metrics
from hub.core.log_format import ACCESS_LOGGER, REQUEST_ID

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[..., Awaitable[web.StreamResponse]]

REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID_KEY = web.RequestKey("rshub_request_id", str)
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_FORM = "application/x-www-form-urlencoded"

access_log = logging.getLogger(ACCESS_LOGGER)


def route_of(request: web.Request) -> str:
    """The matched route's pattern, or ``(unmatched)``: a bounded label."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "(unmatched)"


def is_publish(request: web.Request, route: str) -> bool:
    if request.method != "POST":
        return False
    return route == "/topics/{name}" or (route == "/" and request.content_type != _FORM)


#: Credentials in a request's path or query: an ``access_token=`` value (browsers' streams
#: send it in the query) wherever it stands, after ``?``, ``&``, ``;`` or inside the path,
#: up to the next separator; and anything shaped like a JWT (``eyJ...``), named or not.
_SECRET = re.compile(
    r"(access_token=)[^&;/?#\s]*|(?-i:eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*)?)",
    re.IGNORECASE,
)


def logged_path(request: web.Request) -> str:
    """The path and query for the access log, with token values replaced by ``***``: an
    access log is read by more people than may read private topics."""
    path = request.path_qs
    if "token=" in path.lower() or "eyJ" in path:
        return _SECRET.sub(lambda m: (m[1] or "") + "***", path)
    return path


def request_id(given: str) -> str:
    """The request's id: the client's ``X-Request-Id`` when sane, else a new one.

    An id names a request in the logs, it guards nothing: the process's random generator
    (reseeded in a forked worker) serves, without a getrandom call each."""
    return given if given and _SANE_ID.match(given) else getrandbits(64).to_bytes(8).hex()


def log_access(
    method: str, path: str, route: str, status: int, elapsed: float, remote: str | None
) -> None:
    """The access log line of one request (``path``: as :func:`logged_path` gives it)."""
    access_log.info(
        "%s %s %s %.1fms",
        method,
        path,
        status,
        elapsed * 1000,
        extra={
            "method": method,
            "route": route,
            "path": path,
            "status": status,
            "duration_ms": round(elapsed * 1000, 2),
            "remote": remote,
        },
    )


def observed(method: str, route: str, status: int, elapsed: float, *, publish: bool) -> None:
    """A request's metrics (also the lean paths'): by route, and a publish's own."""
    if not publish:
        metrics.http_request(method, route, status, elapsed)
        return
    metrics.publish_timed(method, route, status, elapsed)
    if status >= 400:
        metrics.publish_failed(status)


#: What the observed request runs: the hub's error mapping around the route's handler.
Inner = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def observe_middleware(
    *,
    access_log_on: bool,
    first: Callable[[web.Request], None] | None = None,
    inner: Inner | None = None,
) -> Middleware:
    """Request ids, request metrics, and (``access_log_on``) one access-log line each.

    ``first`` runs before anything else, ``inner`` (the error mapping) inside the
    observation: one aiohttp middleware layer where three made a partial, a coroutine and
    an ``await`` each per request, on the publish path.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if first is not None:
            first(request)
        given = request_id(request.headers.get(REQUEST_ID_HEADER, ""))
        request[_REQUEST_ID_KEY] = given
        token = REQUEST_ID.set(given)
        started = time.perf_counter()
        status = 500
        try:
            response = await (handler(request) if inner is None else inner(request, handler))
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            elapsed = time.perf_counter() - started
            route = route_of(request)
            observed(request.method, route, status, elapsed, publish=is_publish(request, route))
            if access_log_on:
                log_access(
                    request.method, logged_path(request), route, status, elapsed, request.remote
                )
            REQUEST_ID.reset(token)

    return middleware


def add_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """Part of the hub's ``on_response_prepare`` (:func:`hub.web.app.response_headers`):
    every response (streams and errors too) names its id."""
    request_id = request.get(_REQUEST_ID_KEY)
    if request_id is not None:
        response.headers[REQUEST_ID_HEADER] = request_id

"""The one place where exceptions become HTTP responses."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from redis.exceptions import RedisError

from resourcesync import DocumentError

from .exceptions import RequestError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, message: str, **detail: object) -> web.Response:
    body: dict[str, object] = {"error": message, "status": status}
    body.update({k: v for k, v in detail.items() if v is not None})
    return web.json_response(body, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestError as exc:
        return error_response(exc.http_status, exc.message, **exc.detail)
    except DocumentError as exc:
        detail = {
            "rule": getattr(exc, "rule", None),
            "document": getattr(exc, "document", None),
            "index": getattr(exc, "index", None),
        }
        return error_response(getattr(exc, "http_status", 400), str(exc), **detail)
    except RedisError as exc:
        log.warning("storage error on %s %s: %s", request.method, request.path, exc)
        return error_response(
            503,
            f"storage unavailable ({exc}); a publish may or may not have been stored: "
            "retry it with the same Idempotency-Key",
        )
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            return error_response(exc.status, exc.reason if not exc.text else exc.text)
        raise

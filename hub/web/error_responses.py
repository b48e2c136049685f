"""The hub's error answers: the JSON body every 4xx/5xx carries, and the 503 of a storage
failure, shared by aiohttp's error mapping (:func:`hub.web.app.error_handling`) and the lean
publish path (:mod:`hub.web.lean_publish`), which cannot hand a request over once its
append has begun."""

from __future__ import annotations

import logging

from aiohttp import web

from hub.core import metrics
from hub.core.health import RedisHealth
from hub.store.redis_connection import StoreError
from hub.store.replicas import NotReplicated

log = logging.getLogger("hub.web.app")


def error_response(status: int, message: str, **detail: object) -> web.Response:
    body: dict[str, object] = {"error": message, "status": status}
    body.update({k: v for k, v in detail.items() if v is not None})
    return web.json_response(body, status=status)


def storage_failure(
    exc: NotReplicated | StoreError, health: RedisHealth, method: str, path: str
) -> web.Response:
    """The 503 of a request whose store failed (a StoreError also marks Redis unhealthy)."""
    if isinstance(exc, NotReplicated):
        # Redis answered: a replication shortfall, not a store outage (/healthz stays ok).
        log.warning("publish not replicated on %s %r: %s", method, path, exc)
        return error_response(
            503, f"storage unavailable ({exc}); retry it with the same Idempotency-Key"
        )
    metrics.redis_error()
    health.failed(str(exc))
    log.warning("storage error on %s %r: %s", method, path, exc)
    return error_response(
        503,
        f"storage unavailable ({exc}); a publish may or may not have been stored: "
        "retry it with the same Idempotency-Key",
    )

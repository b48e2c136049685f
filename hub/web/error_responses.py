"""The hub's error answers: the JSON body every 4xx/5xx carries, and the 503 of a storage
failure, shared by aiohttp's error mapping (:func:`hub.web.app.error_handling`) and the lean
publish path (:mod:`hub.web.lean_publish`), which cannot hand a request over once its
append has begun."""

from __future__ import annotations

import logging

from aiohttp import web

from hub.core import metrics
from hub.core.api_bodies import ErrorBody, dump
from hub.core.exceptions import DamagedData
from hub.core.health import RedisHealth
from hub.store import keys
from hub.store.redis_connection import StoreError
from hub.store.replicas import NotReplicated

log = logging.getLogger("hub.web.app")


def error_response(status: int, message: str, **detail: object) -> web.Response:
    """The JSON error body (:class:`hub.core.api_bodies.ErrorBody`) with ``status``: the
    message, the status, and each detail that is not None."""
    shown = {k: v for k, v in detail.items() if v is not None}
    body = ErrorBody.model_validate({**shown, "error": message, "status": status})
    return web.json_response(dump(body), status=status)


def damaged_data(exc: DamagedData | StoreError, method: str, path: str) -> web.Response:
    """The 500 of a request that needs data Redis holds in another shape than the hub
    wrote it: not an outage (Redis stays healthy, retrying will not help), one warning line
    naming it, and an answer saying what the operator can do."""
    log.warning("damaged data on %s %r: %s", method, path, exc)
    return error_response(
        500,
        f"stored data is damaged ({exc}); the hub's operator can delete the topic "
        "(DELETE /admin/topics/{name}) or, for a subscription, re-subscribe it",
    )


def storage_failure(
    exc: NotReplicated | StoreError, health: RedisHealth, method: str, path: str
) -> web.Response:
    """The 503 of a request whose store failed (a StoreError also marks Redis unhealthy);
    the 500 of :func:`damaged_data` when Redis refused a command for what a key holds."""
    if keys.is_damage(exc):
        return damaged_data(exc, method, path)
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

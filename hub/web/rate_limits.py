"""``PUT|DELETE /admin/subscriptions/{id}/rate-limit``: an operator's delivery rate limit.

The override wins over the subscriber's ``hub.rate_limit`` and the default
(``RSHUB_DELIVERY_RATE_PER_SECOND``/``_BURST``) and survives re-subscriptions; DELETE
removes it. The record is saved as a re-subscription is, so the process that delivers the
subscription restarts its worker with the new limit at once.
"""

from __future__ import annotations

import math

import orjson
from aiohttp import web

from hub.core import token_bucket
from hub.core.api_bodies import SubscriptionRateLimit, dump
from hub.core.exceptions import BadRequest, UnsupportedMediaType
from hub.core.placement import subscription_id
from hub.core.settings import Settings
from hub.store.subscriptions import Subscription
from hub.web.access import check_operator
from hub.web.operator import OPERATING, subscription_by_id
from hub.web.request_body import read_body
from hub.web.subscription_terms import SETTINGS, rate_limit_in_force

__all__ = ["SETTINGS", "delete_rate_limit", "get_rate_limit", "put_rate_limit"]
_MAX_BODY = 4096


def _answer(sub: Subscription, settings: Settings) -> web.Response:
    answer = SubscriptionRateLimit.model_validate(
        {
            "id": subscription_id(sub.topic, sub.callback),
            "topic": sub.topic,
            "callback": sub.callback,
            **rate_limit_in_force(sub, settings),
        }
    )
    return web.json_response(dump(answer))


async def _limit(request: web.Request) -> token_bucket.RateLimit:
    if request.content_type != "application/json":
        raise UnsupportedMediaType(
            'send a JSON object {"per_second": 2, "burst": 5}, got Content-Type '
            f"{request.content_type!r}"
        )
    if (request.content_length or 0) > _MAX_BODY:
        raise BadRequest(f"the body must be under {_MAX_BODY} bytes")
    try:
        raw = orjson.loads(await read_body(request, request.app[SETTINGS], limit=_MAX_BODY))
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(raw, dict) or set(raw) - {"per_second", "burst"}:
        raise BadRequest('the body must be an object {"per_second": <number>, "burst": <int>}')
    per_second, burst = raw.get("per_second"), raw.get("burst")
    if isinstance(per_second, bool) or not isinstance(per_second, int | float):
        raise BadRequest("per_second: a number of deliveries per second is required")
    if burst is None:
        burst = max(1, math.ceil(per_second)) if math.isfinite(per_second) else 1
    if isinstance(burst, bool) or not isinstance(burst, int):
        raise BadRequest("burst: a whole number of deliveries is required")
    return token_bucket.check(float(per_second), burst, "rate limit")


async def put_rate_limit(request: web.Request) -> web.Response:
    check_operator(request)
    limit = await _limit(request)
    sub = await subscription_by_id(request)
    sub.admin_rate_limit = [limit.per_second, limit.burst]
    await request.app[OPERATING].subscriptions.activate(sub, None)
    return _answer(sub, request.app[SETTINGS])


async def delete_rate_limit(request: web.Request) -> web.Response:
    check_operator(request)
    sub = await subscription_by_id(request)
    if sub.admin_rate_limit is not None:
        sub.admin_rate_limit = None
        await request.app[OPERATING].subscriptions.activate(sub, None)
    return _answer(sub, request.app[SETTINGS])


async def get_rate_limit(request: web.Request) -> web.Response:
    check_operator(request)
    return _answer(await subscription_by_id(request), request.app[SETTINGS])

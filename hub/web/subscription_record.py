"""``GET /admin/subscriptions/{id}``: one subscription's record, for its operator or itself.

State, cursor, lag, last success, last error and the last delivery attempts
(:mod:`hub.store.attempts`), by the stable id every delivery carries
(``X-RSHub-Subscription``). The admin token reads any record (on an open hub without one,
a direct loopback client does); a subscriber reads its own by signing the request with
its ``hub.secret`` (:mod:`hub.core.self_service`), each signature accepted once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import web

from hub.core import self_service
from hub.core.api_bodies import Attempt, FailedVerification, SubscriptionRecord, dump
from hub.core.exceptions import Forbidden, NotFound, Unauthorized
from hub.core.placement import subscription_id
from hub.core.settings import Settings
from hub.store.attempts import AttemptStore
from hub.store.event_store import EventStore
from hub.store.redis_connection import Client
from hub.store.subscriptions import Subscription, SubscriptionStore
from hub.store.topic_admin import TopicAdmin
from hub.store.used_signatures import first_use
from hub.web.access import check_operator, is_admin
from hub.web.operator import subscription_by_id, subscription_row


@dataclass(frozen=True, slots=True)
class Records:
    """What a subscription's record is read from."""

    settings: Settings
    redis: Client
    store: EventStore
    subscriptions: SubscriptionStore
    topic_admin: TopicAdmin
    attempts: AttemptStore


RECORDS = web.AppKey("subscription_records", Records)


def _iso(seconds: float | None) -> str | None:
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


async def _authorize(request: web.Request) -> Subscription:
    """The subscription, once the request proved it may read it (see the module doc)."""
    if is_admin(request):
        try:
            return await subscription_by_id(request)
        except NotFound as exc:
            raise await _unverified(request, exc, signed=False) from None
    timestamp = request.headers.get(self_service.TIMESTAMP_HEADER)
    signature = request.headers.get(self_service.SIGNATURE_HEADER)
    if not self_service.signed(timestamp, signature):
        try:
            check_operator(request)
        except (Unauthorized, Forbidden) as exc:
            raise type(exc)(
                f"{exc.message}; a subscriber may instead sign the request with its "
                f"hub.secret ({self_service.TIMESTAMP_HEADER}, {self_service.SIGNATURE_HEADER})",
                **exc.detail,
            ) from None
        return await subscription_by_id(request)
    try:
        sub = await subscription_by_id(request)
    except NotFound as exc:
        raise await _unverified(request, exc, signed=True) from None
    await _check_signature(request, sub.secret)
    return sub


async def _check_signature(request: web.Request, secret: str | None) -> None:
    ctx = request.app[RECORDS]
    tolerance = ctx.settings.self_service_tolerance_seconds
    timestamp = request.headers.get(self_service.TIMESTAMP_HEADER)
    signature = request.headers.get(self_service.SIGNATURE_HEADER)
    digest = self_service.check(
        secret, request.path, timestamp, signature, now=time.time(), tolerance=tolerance
    )
    if not await first_use(ctx.redis, digest, tolerance):
        raise Forbidden("this signature was used before: sign each request anew")


async def _unverified(request: web.Request, missing: NotFound, *, signed: bool) -> Exception:
    """What to answer for an id with no subscription: why its last request was not verified,
    while that is kept (to the operator, or to a request signed with that request's
    ``hub.secret``), else ``missing``."""
    failed = await request.app[RECORDS].subscriptions.failed_verification(request.match_info["id"])
    if failed is None:
        return missing
    if signed:
        await _check_signature(request, failed.secret)
    return NotFound(
        f"{missing.message}: its last {failed.mode} request to {failed.topic!r} was not "
        f"verified at {_iso(failed.at)}: {failed.reason}",
        failed_verification={**failed.public(), "time": _iso(failed.at)},
    )


async def subscription_record(request: web.Request) -> web.Response:
    sub = await _authorize(request)
    ctx = request.app[RECORDS]
    topic, callback = sub.topic, sub.callback
    cursor = await ctx.subscriptions.cursor(topic, callback)
    first, last = await ctx.store.first_id(topic), await ctx.store.last_id(topic)
    lag = await ctx.topic_admin.count_after(topic, cursor)
    attempts, success = await ctx.attempts.read(topic, callback)
    row = subscription_row(sub, cursor, first, last, lag, success, ctx.settings, time.time())
    failed = await ctx.subscriptions.failed_verification(subscription_id(topic, callback))
    record = SubscriptionRecord(
        **dict(row),
        failed_verification=(
            None
            if failed is None
            else FailedVerification.model_validate({**failed.public(), "time": _iso(failed.at)})
        ),
        attempts=[
            Attempt(
                at=a.at,
                time=_iso(a.at),
                status=a.status,
                latency_ms=round(a.latency_ms, 3),
                error=a.error,
                first_event_id=a.first_event_id,
                last_event_id=a.last_event_id,
                events=a.events,
            )
            for a in attempts
        ],
    )
    return web.json_response(dump(record), headers={"Cache-Control": "no-store"})

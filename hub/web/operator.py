"""The admin API: topics and subscriptions as operators see them, and what they may change.

=========================================  ================================================
``GET /admin/topics``                      every topic: length, first/last id, last publish,
                                           subscription count
``GET /admin/topics/{name}``               one topic, plus Change List pages and Resource
                                           List size
``DELETE /admin/topics/{name}``            the topic with every key, subscription and
                                           live stream of it
``GET /admin/subscriptions``               subscriptions (``?topic=``, ``?state=``) with
                                           cursor, lag, last success and their terms
                                           (:mod:`hub.web.subscription_terms`)
``POST /admin/subscriptions/resume``       a subscription back to active, now
``DELETE /admin/subscriptions``            one subscription
=========================================  ================================================

The last two take ``topic`` and ``callback`` as a form or a JSON object. Every route needs
the admin token (``--admin-token``); without one, only loopback clients of an open hub may
use them (:mod:`hub.core.access`). Answers are JSON; errors the hub's JSON error shape.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from aiohttp import web

from hub.core.api_bodies import (
    AdminSubscription,
    AdminSubscriptions,
    AdminTopic,
    AdminTopics,
    LastSuccess,
    SubscriptionDeleted,
    TopicDeleted,
    TopicSummary,
    dump,
)
from hub.core.api_bodies import Subscription as SubscriptionBody
from hub.core.events import id_ms, parse_id
from hub.core.exceptions import BadRequest, NotFound, UnsupportedMediaType
from hub.core.placement import subscription_id
from hub.core.settings import Settings
from hub.core.topics import check_name
from hub.store.attempts import AttemptStore, Success
from hub.store.event_store import EventStore
from hub.store.pages import PageChain
from hub.store.subscriptions import State, Subscription, SubscriptionStore
from hub.store.topic_admin import LAG_CAP, TopicAdmin
from hub.store.topic_admin import TopicSummary as StoredTopic
from hub.web import presence as web_presence
from hub.web import subscription_terms
from hub.web.access import check_operator, request_urls
from hub.web.request_body import read_body, read_form


@dataclass(frozen=True, slots=True)
class Operating:
    """What the admin API needs: topics and subscriptions as stored, and how this process
    forgets a deleted topic (:meth:`hub.live.runtime.Runtime.topic_removed`)."""

    store: EventStore
    subscriptions: SubscriptionStore
    topic_admin: TopicAdmin
    pages: PageChain
    topic_removed: Callable[[str], Awaitable[None]]
    #: Each subscription's last success (the attempt log's).
    attempts: AttemptStore


OPERATING = web.AppKey("operating", Operating)

_MAX_BODY = 16 * 1024


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _summary(row: StoredTopic) -> TopicSummary:
    return TopicSummary(
        name=row.name,
        length=row.length,
        first_id=row.first_id,
        last_id=row.last_id,
        last_publish=_iso(row.last_publish_ms),
        last_publish_ms=row.last_publish_ms,
        subscriptions=row.subscriptions,
    )


async def _known_topics(request: web.Request) -> list[str]:
    """Topics published to, and topics that only have subscriptions (e.g. derived ones)."""
    published = set(await request.app[OPERATING].store.topics())
    subscribed = set(await request.app[OPERATING].subscriptions.subscribed_topics()) - published
    if subscribed:
        rows = await request.app[OPERATING].topic_admin.summaries(sorted(subscribed))
        published.update(row.name for row in rows if row.subscriptions)
    return sorted(published)


async def _topic(request: web.Request) -> StoredTopic:
    name = check_name(request.match_info["name"])
    (row,) = await request.app[OPERATING].topic_admin.summaries([name])
    if not await request.app[OPERATING].store.exists(name) and not row.subscriptions:
        raise NotFound(f"unknown topic {name!r}", topic=name)
    return row


async def topics(request: web.Request) -> web.Response:
    check_operator(request)
    rows = await request.app[OPERATING].topic_admin.summaries(await _known_topics(request))
    return web.json_response(dump(AdminTopics(topics=[_summary(row) for row in rows])))


async def topic(request: web.Request) -> web.Response:
    check_operator(request)
    row = await _topic(request)
    admin = request.app[OPERATING].topic_admin
    pages = 0
    if row.length or row.last_id:
        await request.app[OPERATING].pages.advance(row.name)
        pages = await admin.closed_pages(row.name) + 1
    subs = await request.app[OPERATING].subscriptions.for_topic(row.name)
    answer = AdminTopic.model_validate(
        {
            **dict(_summary(row)),
            "changelist_pages": pages,
            "resourcelist_size": await admin.resources(row.name),
            "presence": await web_presence.of_topic(request.app, row.name, subs),
        }
    )
    return web.json_response(dump(answer))


async def delete_topic(request: web.Request) -> web.Response:
    check_operator(request)
    row = await _topic(request)
    removed = await request.app[OPERATING].topic_admin.delete(row.name)
    # Every process (this one too) hears of it through the change stream; end ours now.
    await request.app[OPERATING].topic_removed(row.name)
    answer = TopicDeleted(
        topic=row.name, deleted=True, keys=removed, subscriptions=row.subscriptions
    )
    return web.json_response(dump(answer))


# -- subscriptions --------------------------------------------------------------------------


def _state(request: web.Request) -> State | None:
    text = request.query.get("state")
    if not text:
        return None
    try:
        return State(text)
    except ValueError:
        states = ", ".join(s.value for s in State)
        raise BadRequest(f"state must be one of {states}, got {text[:40]!r}") from None


def _lag_seconds(cursor: str | None, first: str | None, last: str | None) -> float:
    """Seconds from the cursor's event to the topic's last one; a cursor before every
    retained event (``0-0``: from the start) counts from the first retained one."""
    if last is None or first is None:
        return 0.0
    since = cursor or "0-0"
    if parse_id(since) < parse_id(first):
        return max(0, id_ms(last) - id_ms(first)) / 1000
    return max(0, id_ms(last) - id_ms(since)) / 1000


async def subscriptions(request: web.Request) -> web.Response:
    check_operator(request)
    state = _state(request)
    wanted = request.query.get("topic")
    app = request.app
    ctx = app[OPERATING]
    subs, store, admin = ctx.subscriptions, ctx.store, ctx.topic_admin
    settings, now = app[subscription_terms.SETTINGS], time.time()
    names = [_topic_name(request, wanted)] if wanted else await subs.subscribed_topics()
    out: list[AdminSubscription] = []
    for name in names:
        found = [s for s in await subs.for_topic(name) if state is None or s.state is state]
        if not found:
            continue
        cursors = await subs.cursors(name)
        successes = await ctx.attempts.last_successes(name)
        first, last = await store.first_id(name), await store.last_id(name)
        for sub in sorted(found, key=lambda s: s.callback):
            cursor = cursors.get(sub.callback)
            lag = await admin.count_after(name, cursor)
            success = successes.get(sub.callback)
            out.append(subscription_row(sub, cursor, first, last, lag, success, settings, now))
    return web.json_response(dump(AdminSubscriptions(subscriptions=out)))


def subscription_row(
    sub: Subscription,
    cursor: str | None,
    first: str | None,
    last: str | None,
    lag: int,
    success: Success | None,
    settings: Settings,
    now: float,
) -> AdminSubscription:
    """A subscription as operators see it (never its secrets): the admin list's rows and
    the base of a subscription's record (:mod:`hub.web.subscription_record`)."""
    return AdminSubscription.model_validate(
        {
            "topic": sub.topic,
            "topic_url": sub.topic_url,
            "callback": sub.callback,
            "id": subscription_id(sub.topic, sub.callback),
            "state": sub.state.value,
            "cursor": cursor,
            "last_id": last,
            "lag_events": lag,
            "lag_capped": lag >= LAG_CAP,
            "lag_seconds": _lag_seconds(cursor, first, last),
            "failures": sub.failures,
            "last_error": sub.last_error,
            "gaps": sub.gaps,
            "last_gap": sub.last_gap,
            "retry_at": sub.retry_at or None,
            "expires_at": sub.expires_at,
            "expires": _iso(int(sub.expires_at * 1000)),
            "lease_seconds": sub.lease_seconds,
            "created_at": sub.created_at,
            "secret": bool(sub.secret),
            **subscription_terms.terms(sub, settings, now),
            "last_success": _success(success),
        }
    )


def subscription_body(sub: Subscription, cursor: str | None) -> SubscriptionBody:
    """A subscription's stored record as its topic's operators see it: field by field, so
    that what the store adds to a record (a token's fingerprint, say) is never shown until
    the model shows it."""
    return SubscriptionBody(
        topic=sub.topic,
        topic_url=sub.topic_url,
        callback=sub.callback,
        id=subscription_id(sub.topic, sub.callback),
        state=sub.state.value,
        lease_seconds=sub.lease_seconds,
        expires_at=sub.expires_at,
        created_at=sub.created_at,
        secret=bool(sub.secret),
        failures=sub.failures,
        last_error=sub.last_error,
        retry_at=sub.retry_at,
        gaps=sub.gaps,
        last_gap=sub.last_gap,
        untold_gap=sub.untold_gap,
        strikes=sub.strikes,
        failing_since=sub.failing_since,
        batch_failing_since=sub.batch_failing_since,
        disabled_at=sub.disabled_at,
        signature=sub.signature,
        previous_secret=bool(sub.previous_secret),
        previous_until=sub.previous_until,
        filter_changes=sub.filter_changes,
        filter_prefixes=sub.filter_prefixes,
        rate_limit=sub.rate_limit,
        admin_rate_limit=sub.admin_rate_limit,
        cursor=cursor,
    )


def _success(success: Success | None) -> LastSuccess | None:
    if success is None:
        return None
    return LastSuccess(at=success.at, time=_iso(int(success.at * 1000)), event_id=success.event_id)


def _topic_name(request: web.Request, value: str) -> str:
    """A topic given by name or by topic URL (of this hub, or a derived one)."""
    value = value.strip()
    if "://" in value:
        return request_urls(request).name_from_url(value)
    return check_name(value)


_FORM = "application/x-www-form-urlencoded"


async def _target(request: web.Request) -> Subscription:
    """The subscription a form or JSON body names with ``topic`` and ``callback``."""
    settings = request.app[subscription_terms.SETTINGS]
    if (request.content_length or 0) > _MAX_BODY:
        raise BadRequest(f"the body must be under {_MAX_BODY} bytes")
    fields: dict[str, str]
    if request.content_type not in ("application/json", _FORM):
        raise UnsupportedMediaType(
            f"name the subscription in a JSON object or an {_FORM} form, got Content-Type "
            f"{request.content_type!r}"
        )
    if request.content_type == "application/json":
        try:
            body = await read_body(request, settings, limit=_MAX_BODY)
            raw = orjson.loads(body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"the body is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise BadRequest("the JSON body must be an object with topic and callback")
        fields = {k: v for k, v in raw.items() if isinstance(v, str)}
    else:
        fields = dict(await read_form(request, settings, limit=_MAX_BODY))
    for name in ("topic", "callback"):
        if not fields.get(name, "").strip():
            raise BadRequest(f"missing field {name!r}", field=name)
    topic, callback = _topic_name(request, fields["topic"]), fields["callback"].strip()
    sub = await request.app[OPERATING].subscriptions.get(topic, callback)
    if sub is None:
        raise NotFound(f"no subscription of {callback!r} to topic {topic!r}", topic=topic)
    return sub


async def subscription_by_id(request: web.Request) -> Subscription:
    """The subscription the path's ``{id}`` names (:func:`hub.core.placement.subscription_id`)."""
    sub_id = request.match_info["id"]
    if len(sub_id) != 12 or any(c not in "0123456789abcdef" for c in sub_id):
        raise BadRequest(f"a subscription id is 12 lowercase hex digits, got {sub_id[:40]!r}")
    sub = await request.app[OPERATING].subscriptions.find(sub_id)
    if sub is None:
        raise NotFound(f"no subscription with id {sub_id!r}")
    return sub


async def resume_subscription(request: web.Request) -> web.Response:
    """Back to active at once: the owning process restarts its worker with this record."""
    check_operator(request)
    sub = await _target(request)
    sub.recovered()
    cursor = await request.app[OPERATING].subscriptions.activate(sub, None)
    return web.json_response(dump(subscription_body(sub, cursor)))


async def delete_subscription(request: web.Request) -> web.Response:
    check_operator(request)
    sub = await _target(request)
    await request.app[OPERATING].subscriptions.delete(sub.topic, sub.callback)
    answer = SubscriptionDeleted(topic=sub.topic, callback=sub.callback, deleted=True)
    return web.json_response(dump(answer))

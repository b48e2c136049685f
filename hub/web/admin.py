"""Operators' view: health, subscription state per topic, Prometheus metrics, overview.

``GET /topics/{name}/subscriptions`` lists a topic's WebSub subscriptions (never their
secrets) with state, lease expiry, failures, last error and delivery cursor. It needs the
admin token or a token that may publish to the topic; on a hub without tokens, only direct
loopback clients may ask, never through a proxy (callback URLs are not for everyone's
eyes). ``GET /admin/overview.json`` is the dashboard's data for the whole hub, under the
same rule with a hub-wide token; it leaves out private topics the token may not read.
``GET /metrics`` is the Prometheus text format (:mod:`hub.core.metrics`), with bounded label
cardinality, no callback URLs, and an optional token of its own. ``GET /healthz`` says
only ok or not to anyone; its details are for those who may see the overview.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Any

import orjson
from aiohttp import web

from hub.core import metrics
from hub.core.access import MetricsAccess
from hub.core.api_bodies import EmbeddedRedisStatus, Health, Subscriptions, dump
from hub.core.auth import PublisherAuth
from hub.core.events import parse_id
from hub.core.exceptions import Forbidden, TokenRevoked, Unauthorized
from hub.core.health import RedisHealth
from hub.core.overview import Overview, SubscriptionRow, lag_seconds
from hub.core.placement import subscription_id
from hub.core.presence import stream_totals
from hub.core.topics import check_name
from hub.core.version import __version__
from hub.live.ownership import Ownership
from hub.store.embedded_redis import EmbeddedRedis
from hub.store.event_store import EventStore
from hub.store.redis_connection import Connections, StoreError
from hub.store.stream_stats import StreamStats, backlog_cap
from hub.store.subscriptions import Subscription, SubscriptionStore
from hub.web import presence as web_presence
from hub.web.access import check_operator, check_read, is_admin, sight
from hub.web.operator import subscription_body


@dataclass(frozen=True, slots=True)
class Observing:
    """What health, metrics and the overview need: Redis's health, this node's ownership,
    the stored topics and subscriptions, and who may see what."""

    health: RedisHealth
    connections: Connections
    ownership: Ownership
    embedded: EmbeddedRedis | None
    auth: PublisherAuth
    metrics_access: MetricsAccess
    store: EventStore
    subscriptions: SubscriptionStore
    stats: StreamStats


OBSERVING = web.AppKey("observing", Observing)

log = logging.getLogger(__name__)

#: Health and metrics answer per request (who asks decides what they show): never cached.
_NO_STORE = {"Cache-Control": "no-store"}


async def healthz(request: web.Request) -> web.Response:
    """``{"status": "ok"}`` (200) or ``{"status": "degraded"}`` (503) for anyone; the
    details (Redis, node, pid, embedded Redis) only for those who may see the overview."""
    ctx = request.app[OBSERVING]
    details = _may_operate(request)
    extra: dict[str, Any] = {}
    if details:
        extra = {"version": __version__, "pid": os.getpid()}
        extra["node"] = ctx.ownership.node
        extra["nodes"] = len(ctx.ownership.nodes)
        if ctx.embedded is not None:
            status = ctx.embedded.status.as_dict()
            extra["embedded_redis"] = EmbeddedRedisStatus.model_validate(status)
    # A recent background ping vouches for Redis (hub.core.health): no wait behind a long script.
    health, now = ctx.health, asyncio.get_running_loop().time()
    if not health.vouched(now):
        try:
            await asyncio.wait_for(ctx.connections.ping(), timeout=2.0)
        except Exception as exc:  # any failure means "not healthy"; say which
            health.failed(str(exc))
            if details:
                extra.update(hub="ok", redis=f"unreachable: {exc!s}")
            degraded = Health(status="degraded", **extra)
            return web.json_response(dump(degraded), status=503, headers=_NO_STORE)
        health.succeeded(now)
    if details:
        extra.update(hub="ok", redis="ok")
    return web.json_response(dump(Health(status="ok", **extra)), headers=_NO_STORE)


def _check_operator(request: web.Request, topic: str) -> None:
    """One topic's subscriptions: the admin token, a token that may publish to the topic,
    or (open hub without admin token) a direct loopback client; and one that may read it."""
    if is_admin(request):
        return
    auth = request.app[OBSERVING].auth
    if not auth.open:
        auth.check(topic, request.headers.get("Authorization"))
    else:
        check_operator(request)
    check_read(request, topic)


def _check_any_operator(request: web.Request) -> None:
    """Hub-wide views: the admin token, a token that may publish to every topic, or (open hub
    without admin token) a direct loopback client, never one a proxy speaks for."""
    if is_admin(request):
        return
    auth = request.app[OBSERVING].auth
    if not auth.open:
        try:
            auth.check_global(request.headers.get("Authorization"))
        except TokenRevoked:  # a hub-wide token, revoked: say so
            raise
        except Forbidden:  # name both tokens that would do (the dashboard shows this)
            raise Forbidden(
                "this needs the admin token (--admin-token) or a hub-wide token (--token)"
            ) from None
        return
    check_operator(request)


def _may_operate(request: web.Request) -> bool:
    try:
        _check_any_operator(request)
    except (Unauthorized, Forbidden):
        return False
    return True


async def subscriptions(request: web.Request) -> web.Response:
    topic = check_name(request.match_info["name"])
    _check_operator(request, topic)
    subs = request.app[OBSERVING].subscriptions
    cursors = await subs.cursors(topic)
    out = [
        subscription_body(sub, cursors.get(sub.callback))
        for sub in sorted(await subs.for_topic(topic), key=lambda s: s.callback)
    ]
    last_id = await request.app[OBSERVING].store.last_id(topic)
    answer = Subscriptions(topic=topic, last_id=last_id, subscriptions=out)
    return web.json_response(dump(answer))


async def gather_overview(app: web.Application) -> Overview:
    """The hub's state now, from Redis (the same from every hub process) and this process."""
    ctx = app[OBSERVING]
    store, subs, stats = ctx.store, ctx.subscriptions, ctx.stats
    now_ms = int(time.time() * 1000)
    topics = await stats.topic_rows(await store.topics())
    by_topic: dict[str, list[Subscription]] = {}
    for sub in await subs.all():
        by_topic.setdefault(sub.topic, []).append(sub)
    rows: list[SubscriptionRow] = []
    cap = backlog_cap(sum(len(members) for members in by_topic.values()))
    for topic, members in sorted(by_topic.items()):
        members.sort(key=lambda s: s.callback)
        cursors = await subs.cursors(topic)
        positions = [cursors.get(s.callback) or "0-0" for s in members]
        backlogs = await stats.backlogs(topic, positions, cap)
        for sub, backlog in zip(members, backlogs, strict=True):
            first_ms = parse_id(backlog.first_id)[0] if backlog.first_id else None
            rows.append(
                SubscriptionRow(
                    topic=sub.topic,
                    callback=sub.callback,
                    id=subscription_id(sub.topic, sub.callback),
                    state=str(sub.state),
                    failures=sub.failures,
                    last_error=sub.last_error,
                    expires_at=sub.expires_at,
                    cursor=cursors.get(sub.callback),
                    lag_events=backlog.events,
                    lag_capped=backlog.capped,
                    lag_seconds=lag_seconds(first_ms, now_ms),
                    gaps=sub.gaps,
                )
            )
    presence = await web_presence.of_topics(app, by_topic)
    return Overview(
        presence=presence,
        topics=topics,
        subscriptions=rows,
        clients=stream_totals(presence),
        redis_ok=True,
        version=__version__,
        generated_ms=now_ms,
    )


async def metrics_endpoint(request: web.Request) -> web.Response:
    """Prometheus text: live series always; Redis-backed series when Redis answers.

    With ``RSHUB_METRICS_TOKEN`` set, only its bearer (or the admin token's) may scrape.
    Private topics the request's token may not read are folded under ``(private)``.
    """
    request.app[OBSERVING].metrics_access.check(request.headers.get("Authorization"))
    overview: Overview | None
    try:
        overview = await gather_overview(request.app)
    except StoreError as exc:
        log.warning("metrics: Redis-backed series left out: %s", exc)
        metrics.redis_error()
        overview = None
    if not metrics.loaded():  # a scrape within a second of the start (hub.live.runtime)
        await asyncio.to_thread(metrics.import_library)
        metrics.load()  # here, on the loop: the thread that updates the series
    metrics.flush()  # on the loop too: its tally of publishes
    # Rendered in a thread: a scrape of many series took 60-120 ms of the loop's CPU (the
    # hub's every other client waited); prometheus_client's rendering is thread-safe.
    body = await asyncio.to_thread(metrics.exposition, overview, visible=sight(request))
    return web.Response(
        body=body, headers={"Content-Type": metrics.CONTENT_TYPE, "Cache-Control": "no-store"}
    )


async def overview_json(request: web.Request) -> web.Response:
    """``GET /admin/overview.json``: the dashboard's data (operators only), without the
    private topics (and their subscriptions) the request's token may not read."""
    _check_any_operator(request)
    overview = await gather_overview(request.app)
    visible = sight(request)
    presence = {t: p for t, p in overview.presence.items() if visible(t)}
    shown = replace(
        overview,
        topics=[t for t in overview.topics if visible(t.name)],
        subscriptions=[s for s in overview.subscriptions if visible(s.topic)],
        presence=presence,
        clients=stream_totals(presence),
    )
    return web.Response(
        body=orjson.dumps(shown.to_json()),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )

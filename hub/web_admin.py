"""Operators' view: health, subscription state per topic, Prometheus metrics, overview.

``GET /topics/{name}/subscriptions`` lists a topic's WebSub subscriptions (never their
secrets) with state, lease expiry, failures, last error and delivery cursor. It needs a
token that may publish to the topic; on a hub without tokens, only loopback clients may
ask (callback URLs are not for everyone's eyes). ``GET /admin/overview.json`` is the
dashboard's data for the whole hub, under the same rule with a hub-wide token.
``GET /metrics`` is the Prometheus text format (:mod:`hub.metrics`), with bounded label
cardinality.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import time

import orjson
from aiohttp import web

from . import __version__, metrics
from .connection import StoreError
from .events import parse_id
from .exceptions import Forbidden
from .overview import Overview, SubscriptionRow, lag_seconds
from .stream_stats import backlog_cap
from .subscriptions import Subscription
from .topics import check_name
from .web_state import (
    AUTH,
    CONNECTIONS,
    EMBEDDED,
    OWNERSHIP,
    REDIS_HEALTH,
    STATS,
    STORE,
    SUBSCRIPTIONS,
)

log = logging.getLogger(__name__)


async def healthz(request: web.Request) -> web.Response:
    extra: dict[str, object] = {"version": __version__, "pid": os.getpid()}
    if OWNERSHIP in request.app:
        ownership = request.app[OWNERSHIP]
        extra["node"] = ownership.node
        extra["nodes"] = len(ownership.nodes)
    if EMBEDDED in request.app:
        extra["embedded_redis"] = request.app[EMBEDDED].status.as_dict()
    # A recent background ping vouches for Redis (hub.health): no wait behind a long script.
    health, now = request.app[REDIS_HEALTH], asyncio.get_running_loop().time()
    if not health.vouched(now):
        try:
            await asyncio.wait_for(request.app[CONNECTIONS].ping(), timeout=2.0)
        except Exception as exc:  # any failure means "not healthy"; say which
            health.failed(str(exc))
            return web.json_response(
                {"status": "degraded", "hub": "ok", "redis": f"unreachable: {exc!s}", **extra},
                status=503,
            )
        health.succeeded(now)
    return web.json_response({"status": "ok", "hub": "ok", "redis": "ok", **extra})


def _check_operator(request: web.Request, topic: str) -> None:
    auth = request.app[AUTH]
    if not auth.open:
        auth.check(topic, request.headers.get("Authorization"))
        return
    _check_loopback(request)


def _check_any_operator(request: web.Request) -> None:
    """Hub-wide views: a token that may publish to every topic; loopback on an open hub."""
    auth = request.app[AUTH]
    if not auth.open:
        auth.check_global(request.headers.get("Authorization"))
        return
    _check_loopback(request)


def _check_loopback(request: web.Request) -> None:
    try:
        loopback = ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise Forbidden("subscription details are only shown to loopback clients on an open hub")


async def subscriptions(request: web.Request) -> web.Response:
    topic = check_name(request.match_info["name"])
    _check_operator(request, topic)
    subs = request.app[SUBSCRIPTIONS]
    cursors = await subs.cursors(topic)
    out = []
    for sub in sorted(await subs.for_topic(topic), key=lambda s: s.callback):
        row = sub.public()
        row["cursor"] = cursors.get(sub.callback)
        out.append(row)
    last_id = await request.app[STORE].last_id(topic)
    return web.json_response({"topic": topic, "last_id": last_id, "subscriptions": out})


async def gather_overview(app: web.Application) -> Overview:
    """The hub's state now, from Redis (the same from every hub process) and this process."""
    store, subs, stats = app[STORE], app[SUBSCRIPTIONS], app[STATS]
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
    return Overview(
        topics=topics,
        subscriptions=rows,
        clients=metrics.live_clients(),
        redis_ok=True,
        version=__version__,
        generated_ms=now_ms,
    )


async def metrics_endpoint(request: web.Request) -> web.Response:
    """Prometheus text: live series always; Redis-backed series when Redis answers."""
    overview: Overview | None
    try:
        overview = await gather_overview(request.app)
    except StoreError as exc:
        log.warning("metrics: Redis-backed series left out: %s", exc)
        metrics.redis_error()
        overview = None
    return web.Response(
        body=metrics.exposition(overview), headers={"Content-Type": metrics.CONTENT_TYPE}
    )


async def overview_json(request: web.Request) -> web.Response:
    """``GET /admin/overview.json``: the dashboard's data (operators only)."""
    _check_any_operator(request)
    overview = await gather_overview(request.app)
    return web.Response(
        body=orjson.dumps(overview.to_json()),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )

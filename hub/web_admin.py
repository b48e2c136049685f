"""Operators' view: health, subscription state per topic, and Prometheus metrics.

``GET /topics/{name}/subscriptions`` lists a topic's WebSub subscriptions (never their
secrets) with state, lease expiry, failures, last error and delivery cursor. It needs a
token that may publish to the topic; on a hub without tokens, only loopback clients may
ask (callback URLs are not for everyone's eyes). ``GET /metrics`` is the Prometheus text
format, with bounded label cardinality (no per-subscriber labels).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os

from aiohttp import web

from . import __version__
from .exceptions import Forbidden
from .subscriptions import State
from .topics import check_name
from .web_state import (
    AUTH,
    CONNECTIONS,
    DELIVERY,
    EMBEDDED,
    FEEDS,
    OWNERSHIP,
    STORE,
    SUBSCRIPTIONS,
)


async def healthz(request: web.Request) -> web.Response:
    extra: dict[str, object] = {"version": __version__, "pid": os.getpid()}
    if OWNERSHIP in request.app:
        ownership = request.app[OWNERSHIP]
        extra["node"] = ownership.node
        extra["nodes"] = len(ownership.nodes)
    if EMBEDDED in request.app:
        extra["embedded_redis"] = request.app[EMBEDDED].status.as_dict()
    try:
        await asyncio.wait_for(request.app[CONNECTIONS].ping(), timeout=2.0)
    except Exception as exc:  # any failure means "not healthy"; say which
        return web.json_response(
            {"status": "degraded", "hub": "ok", "redis": f"unreachable: {exc!s}", **extra},
            status=503,
        )
    return web.json_response({"status": "ok", "hub": "ok", "redis": "ok", **extra})


def _check_operator(request: web.Request, topic: str) -> None:
    auth = request.app[AUTH]
    if not auth.open:
        auth.check(topic, request.headers.get("Authorization"))
        return
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


async def metrics(request: web.Request) -> web.Response:
    workers = list(request.app[DELIVERY].workers.values())
    suspended = sum(1 for w in workers if w.sub.state is State.SUSPENDED)
    lines = [
        "# HELP rshub_topics Topics that have been published to.",
        "# TYPE rshub_topics gauge",
        f"rshub_topics {len(await request.app[STORE].topics())}",
        "# HELP rshub_subscriptions Running WebSub delivery workers by state.",
        "# TYPE rshub_subscriptions gauge",
        f'rshub_subscriptions{{state="active"}} {len(workers) - suspended}',
        f'rshub_subscriptions{{state="suspended"}} {suspended}',
        "# HELP rshub_delivered_changes_total Changes delivered to callbacks (2xx).",
        "# TYPE rshub_delivered_changes_total counter",
        f"rshub_delivered_changes_total {sum(w.delivered for w in workers)}",
        "# HELP rshub_stream_consumers Live consumers (streams and workers) of topic feeds.",
        "# TYPE rshub_stream_consumers gauge",
        f"rshub_stream_consumers {request.app[FEEDS].consumer_count}",
    ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

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

from aiohttp import web

from . import __version__
from .exceptions import Forbidden
from .subscriptions import State
from .topics import check_name
from .web_state import AUTH, CONNECTIONS, DELIVERY, FEEDS, REDIS_HEALTH, STORE, SUBSCRIPTIONS


async def healthz(request: web.Request) -> web.Response:
    # A recent background ping vouches for Redis (hub.health): no wait behind a long script.
    health, now = request.app[REDIS_HEALTH], asyncio.get_running_loop().time()
    if not health.vouched(now):
        try:
            await asyncio.wait_for(request.app[CONNECTIONS].ping(), timeout=2.0)
        except Exception as exc:  # any failure means "not healthy"; say which
            health.failed(str(exc))
            return web.json_response(
                {"status": "degraded", "hub": "ok", "redis": f"unreachable: {exc!s}"}, status=503
            )
        health.succeeded(now)
    return web.json_response({"status": "ok", "hub": "ok", "redis": "ok", "version": __version__})


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

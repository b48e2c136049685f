"""The hub's aiohttp application: routes and the lifecycle of its long-lived resources."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from redis.asyncio import Redis
from redis.exceptions import RedisError

from . import __version__, documents, ingest, introspection, streams, websub_http
from .auth import PublisherAuth
from .errors import error_middleware
from .settings import Settings
from .state import HTTP, REDIS, REDIS_URL, SETTINGS, STORE
from .store import EventStore
from .tasks import cancel_and_wait

log = logging.getLogger(__name__)


async def healthz(request: web.Request) -> web.Response:
    redis = request.app[REDIS]
    try:
        await asyncio.wait_for(redis.ping(), timeout=2.0)
    except Exception as exc:  # any failure means "not healthy"; say which
        return web.json_response(
            {"status": "degraded", "hub": "ok", "redis": f"unreachable: {exc!s}"}, status=503
        )
    return web.json_response({"status": "ok", "hub": "ok", "redis": "ok", "version": __version__})


async def _redis_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    redis = Redis.from_url(
        app[REDIS_URL], max_connections=512, health_check_interval=30, socket_timeout=10
    )
    app[REDIS] = redis
    app[STORE] = EventStore(
        redis,
        retention_seconds=settings.retention_seconds,
        retention_max_events=settings.retention_max_events,
        idempotency_seconds=settings.idempotency_seconds,
        topic_retention_seconds=settings.topic_retention_seconds,
        topic_retention_max_events=settings.topic_retention_max_events,
    )
    sweeper = asyncio.create_task(_sweep_retention(app), name="retention")
    yield
    await cancel_and_wait([sweeper])
    await app[STORE].close()
    await redis.aclose()


async def _sweep_retention(app: web.Application) -> None:
    store, every = app[STORE], app[SETTINGS].retention_sweep_seconds
    while True:
        await asyncio.sleep(every)
        try:
            for topic in await store.topics():
                await store.trim(topic)
        except RedisError as exc:
            log.warning("retention sweep failed: %s", exc)


async def _http_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    connector = aiohttp.TCPConnector(limit=settings.delivery_concurrency, limit_per_host=0)
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=settings.delivery_timeout),
        auto_decompress=False,
    )
    app[HTTP] = session
    yield
    await session.close()


def create_app(settings: Settings, redis_url: str) -> web.Application:
    """Build the hub for ``settings`` on the Redis at ``redis_url``."""
    app = web.Application(
        middlewares=[error_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[REDIS_URL] = redis_url
    app[ingest.AUTH] = PublisherAuth(settings)
    app.cleanup_ctx.append(_redis_ctx)
    app.cleanup_ctx.append(_http_ctx)
    # The hot routes first: aiohttp tries dynamic resources in registration order.
    app.router.add_post("/topics/{name}", ingest.publish_to_named_topic)
    app.router.add_post("/", websub_http.hub_endpoint)
    app.router.add_get("/healthz", healthz)
    websub_http.setup(app)
    documents.setup(app)
    streams.setup(app)
    introspection.setup(app)
    return app

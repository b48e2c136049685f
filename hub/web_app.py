"""The hub's aiohttp application: the one owner of its lifecycle, routes and error mapping.

:func:`create_app` is the only place where long-lived resources are made and closed (one
``cleanup_ctx``), where background tasks start and stop (:class:`Periodic`, stopped one
way), where routes are added (one table), and where exceptions become HTTP responses
(:func:`error_middleware`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from resourcesync import DocumentError, Limits

from . import (
    metrics,
    web_access,
    web_admin,
    web_documents,
    web_observe,
    web_operator,
    web_pages,
    web_publish,
    web_streams,
    web_websub,
)
from .access import MetricsAccess, OperatorAccess, ReadAccess
from .auth import PublisherAuth
from .connection import Connections, StoreError
from .delivery import DeliveryService
from .embedded_redis import EmbeddedRedis
from .exceptions import RequestError, RequestTimeout
from .feed import FeedHub
from .forwarding import TrustedPeers
from .health import PING_TIMEOUT, RedisHealth
from .leases import Leases
from .ownership import Ownership
from .pages import PageChain
from .parsing import DocumentParser
from .settings import Settings
from .snapshots import ResourceSnapshots
from .store import EventStore, Retention
from .stream_stats import StreamStats
from .subscriptions import SubscriptionStore
from .tasks import cancel_and_wait
from .topic_admin import TopicAdmin
from .topics import WELL_KNOWN, HubUrls, loopback_aliases
from .web_cache import ByteCache
from .web_client import HttpClient
from .web_connections import (
    ClientGone,
    ConnectionGuard,
    GuardedSite,
    install_client_fault_filter,
    started_middleware,
)
from .web_state import (
    AUTH,
    CLIENT,
    CONNECTIONS,
    DELIVERY,
    DOC_CACHE,
    EMBEDDED,
    FEEDS,
    GUARD,
    METRICS_ACCESS,
    OPERATORS,
    OWNERSHIP,
    PAGES,
    PARSER,
    READERS,
    REDIS_HEALTH,
    REDIS_URL,
    SETTINGS,
    SNAPSHOTS,
    STATS,
    STORE,
    SUBSCRIPTIONS,
    TOPIC_ADMIN,
    TRUSTED_PEERS,
    URLS,
)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- errors ---------------------------------------------------------------------------------


def error_response(status: int, message: str, **detail: object) -> web.Response:
    body: dict[str, object] = {"error": message, "status": status}
    body.update({k: v for k, v in detail.items() if v is not None})
    return web.json_response(body, status=status)


async def _answer_and_close(
    request: web.Request, response: web.StreamResponse
) -> web.StreamResponse:
    """Send ``response``, then close the connection without reading the rest of the body."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()
    return response


def _reason(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}: {message}"[:300]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one place where exceptions become HTTP responses."""
    response = await _answer(request, handler)
    if (
        response.status >= 400
        and "Content-Encoding" in request.headers
        and not request.content.is_eof()
    ):
        # Refused before its encoded body was read: draining it would decode it (and log a
        # traceback if it does not decode). Close instead.
        return await _answer_and_close(request, response)
    return response


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestTimeout as exc:
        # The rest of a body that is this slow is not worth waiting for: answer and close.
        return await _answer_and_close(request, error_response(exc.http_status, exc.message))
    except RequestError as exc:
        return error_response(exc.http_status, exc.message, **exc.detail)
    except DocumentError as exc:
        detail = {
            "rule": getattr(exc, "rule", None),
            "document": getattr(exc, "document", None),
            "index": getattr(exc, "index", None),
        }
        return error_response(getattr(exc, "http_status", 400), str(exc), **detail)
    except StoreError as exc:
        metrics.redis_error()
        request.app[REDIS_HEALTH].failed(str(exc))
        log.warning("storage error on %s %r: %s", request.method, request.path, exc)
        return error_response(
            503,
            f"storage unavailable ({exc}); a publish may or may not have been stored: "
            "retry it with the same Idempotency-Key",
        )
    except ConnectionError as exc:
        # The client went away (mid-body, mid-stream, mid-document): routine, not an error.
        log.debug("client went away during %s %r: %r", request.method, request.path, exc)
        return ClientGone(status=499)
    except (RequestPayloadError, HttpProcessingError) as exc:
        # A body that cannot be read as declared (e.g. Content-Encoding: gzip that is not).
        cause = exc.__cause__ or exc.__context__ or exc
        # The rest of that body is unreadable too: answer, then close the connection rather
        # than let aiohttp drain the body (which would log the same error as a traceback).
        return await _answer_and_close(
            request, error_response(400, f"the request body cannot be read: {_reason(cause)}")
        )
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            return error_response(exc.status, exc.reason if not exc.text else exc.text)
        raise


# -- background tasks -----------------------------------------------------------------------


class Periodic:
    """Background loops that run every ``interval`` seconds until the app stops.

    Stopped by an event, not by ``cancel()`` alone: a cancellation landing inside a Redis
    call can be swallowed by the client. Whatever does not stop in time is cancelled and
    left behind with a warning, so shutdown never hangs.
    """

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def every(self, interval: float, name: str, step: Callable[[], Awaitable[None]]) -> None:
        self._tasks.append(asyncio.create_task(self._loop(interval, name, step), name=name))

    async def _loop(self, interval: float, name: str, step: Callable[[], Awaitable[None]]) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)
            if self._stop.is_set():
                return
            try:
                await step()
            except StoreError as exc:  # Redis away for a moment: try again next round
                metrics.redis_error()
                log.warning("%s failed: %s", name, exc)

    async def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if not self._tasks:
            return
        _, stuck = await asyncio.wait(self._tasks, timeout=timeout)
        for task in stuck:
            log.warning("background task %s did not stop in time; cancelling", task.get_name())
            task.cancel()


def _when_leading(
    ownership: Ownership, step: Callable[[], Awaitable[None]]
) -> Callable[[], Awaitable[None]]:
    """``step``, run only while this process leads (see :mod:`hub.leases`)."""

    async def run() -> None:
        if ownership.leader:
            await step()

    return run


async def _sweep_retention(store: EventStore) -> None:
    for topic in await store.topics():
        await store.trim(topic)


async def _check_redis(connections: Connections, health: RedisHealth) -> None:
    """One health ping (see :mod:`hub.health`); never raises."""
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(connections.ping(), timeout=PING_TIMEOUT)
    except Exception as exc:  # any failure means "not healthy"; say which
        health.failed(f"{type(exc).__name__}: {exc}")
    else:
        health.succeeded(loop.time())


async def _scan_pages(store: EventStore, chain: PageChain) -> None:
    """Advance every topic's page chain, so boundaries are recorded before retention trims."""
    for topic in await store.topics():
        await chain.advance(topic)


# -- lifecycle ------------------------------------------------------------------------------


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Open every long-lived resource in dependency order; close them in reverse."""
    settings = app[SETTINGS]
    connections = app[CONNECTIONS] = Connections(app[REDIS_URL], cluster=settings.redis_cluster)
    try:
        await connections.wait_ready(settings.redis_startup_seconds)
    except BaseException:
        await connections.close()
        raise
    store = EventStore(
        connections.main,
        blocking=connections.blocking,
        retention=Retention(
            settings.retention_seconds,
            settings.retention_max_events,
            settings.topic_retention_seconds,
            settings.topic_retention_max_events,
            hold_max_events=settings.retention_hold_max_events,
            hold_seconds=settings.retention_hold_seconds,
        ),
        idempotency_seconds=settings.idempotency_seconds,
    )
    subscriptions = SubscriptionStore(
        connections.main, scripts=store.scripts, blocking=connections.blocking
    )
    pages = PageChain(
        store.scripts,
        window_seconds=settings.changelist_page_seconds,
        max_entries=settings.changelist_page_entries,
    )
    client = HttpClient(settings)
    feeds = FeedHub(store)
    node = uuid.uuid4().hex[:16]
    delivery = DeliveryService(settings, client, subscriptions, feeds, store.last_id, node=node)
    ownership = Ownership(
        Leases(store.scripts, node, int(settings.ownership_lease_seconds * 1000)),
        subscriptions,
        delivery,
        lease_seconds=settings.ownership_lease_seconds,
        reconcile_seconds=settings.ownership_reconcile_seconds,
    )
    delivery.on_worker_end = ownership.changed

    async def topic_removed(topic: str) -> None:
        store.forget(topic)
        await feeds.end(topic)

    ownership.on_topic_removed = topic_removed
    app[TOPIC_ADMIN] = TopicAdmin(connections.main, store.scripts, subscriptions)
    app[STORE], app[SUBSCRIPTIONS], app[PAGES] = store, subscriptions, pages
    app[SNAPSHOTS] = ResourceSnapshots(
        connections.main,
        store.scripts,
        page_entries=settings.resourcelist_page_entries,
        reuse_seconds=settings.resourcelist_snapshot_seconds,
        ttl_seconds=settings.resourcelist_snapshot_ttl_seconds,
    )
    app[DOC_CACHE] = ByteCache(settings.document_cache_bytes)
    app[CLIENT], app[FEEDS], app[DELIVERY], app[OWNERSHIP] = client, feeds, delivery, ownership
    app[STATS] = StreamStats(connections.main, store.scripts)
    parser = app[PARSER] = DocumentParser(
        max_bytes=settings.max_body_bytes,
        limits=Limits(
            max_entries=settings.publish_max_entries,
            max_attributes=settings.publish_max_attributes,
            max_value_chars=settings.publish_max_value_chars,
            max_links=settings.publish_max_links,
        ),
        inline_bytes=settings.parse_inline_bytes,
        workers=settings.parse_workers,
        kind=settings.parse_pool,
    )
    health = app[REDIS_HEALTH] = RedisHealth()

    # Hub-wide jobs run on the leading process only (they are atomic scripts, so a second
    # runner during a handover merely repeats work).
    background = Periodic()
    background.every(1.0, "redis-health", lambda: _check_redis(connections, health))
    background.every(
        settings.retention_sweep_seconds,
        "retention",
        _when_leading(ownership, lambda: _sweep_retention(store)),
    )
    if settings.changelist_scan_seconds:
        background.every(
            settings.changelist_scan_seconds,
            "page-scan",
            _when_leading(ownership, lambda: _scan_pages(store, pages)),
        )
    supervisor = None
    if EMBEDDED in app:
        supervisor = asyncio.create_task(app[EMBEDDED].supervise(), name="redis-supervisor")
    try:
        await ownership.start()
        # Not "ready" yet: the socket is bound after this; serve() says so once it is.
        log.debug("background tasks started")
        yield
    finally:
        log.info("shutdown: stopping background tasks, deliveries and Redis connections")
        if supervisor is not None:
            await cancel_and_wait([supervisor])
        await background.stop()
        await ownership.close()
        app[GUARD].close()
        await parser.close()
        await delivery.close()
        await feeds.close()
        await client.close()
        await store.close()
        await connections.close()
        log.info("shutdown complete")


async def _shutdown_started(app: web.Application) -> None:
    log.info("shutdown started: no new connections; closing open streams")


def create_app(
    settings: Settings, redis_url: str, embedded: EmbeddedRedis | None = None
) -> web.Application:
    """Build the hub for ``settings`` on the Redis at ``redis_url``.

    ``embedded``: the redis-server behind ``redis_url`` when this process started it; the
    app then supervises it (restarts it if it dies) and reports it in ``/healthz``.
    """
    install_client_fault_filter()
    guard = ConnectionGuard(settings.max_connections, settings.header_timeout_seconds)
    app = web.Application(
        middlewares=[started_middleware(guard), web_observe.observe_middleware, error_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[GUARD] = guard
    app[SETTINGS] = settings
    aliases = [u.rstrip("/") for u in settings.alias_urls]
    aliases += [u for u in loopback_aliases(settings.host, settings.port) if u not in aliases]
    app[URLS] = HubUrls(settings.public_url, tuple(a for a in aliases if a != settings.public_url))
    app[AUTH] = PublisherAuth(settings)
    app[READERS] = ReadAccess(settings)
    app[OPERATORS] = OperatorAccess(settings, hub_open=app[AUTH].open)
    app[METRICS_ACCESS] = MetricsAccess(settings)
    app[TRUSTED_PEERS] = TrustedPeers(settings.forwarded_allow_ips)
    app.on_response_prepare.append(web_access.private_cache_control)
    app[REDIS_URL] = redis_url
    if embedded is not None:
        app[EMBEDDED] = embedded
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_shutdown_started)
    app.on_response_prepare.append(web_observe.add_request_id)

    # The hot routes first: aiohttp tries dynamic resources in registration order.
    post, get = app.router.add_post, app.router.add_get
    post("/topics/{name}", web_publish.publish_to_named_topic)
    post("/", web_websub.hub_endpoint)
    get("/healthz", web_admin.healthz)
    get("/topics/{name}/ws", web_streams.websocket)
    get("/topics/{name}/events", web_streams.server_sent_events)
    get(WELL_KNOWN, web_documents.source_description)
    get("/topics/{name}", web_documents.topic_uri)
    get("/topics/{name}/capabilitylist.xml", web_documents.capability_list)
    get("/topics/{name}/changelist.xml", web_documents.changelist_index)
    get(r"/topics/{name}/changelist/{page:[^/]+}.xml", web_documents.changelist_page)
    get("/topics/{name}/resourcelist.xml", web_documents.resource_list)
    get(r"/topics/{name}/resourcelist/{page:[^/]+}.xml", web_documents.resource_list_page)
    get("/topics/{name}/subscriptions", web_admin.subscriptions)
    get("/metrics", web_admin.metrics_endpoint)
    get("/admin/overview.json", web_admin.overview_json)
    get("/admin/topics", web_operator.topics)
    get("/admin/topics/{name}", web_operator.topic)
    app.router.add_delete("/admin/topics/{name}", web_operator.delete_topic)
    get("/admin/subscriptions", web_operator.subscriptions)
    post("/admin/subscriptions/resume", web_operator.resume_subscription)
    app.router.add_delete("/admin/subscriptions", web_operator.delete_subscription)
    get("/", web_pages.dashboard)
    get("/dashboard/{file}", web_pages.dashboard_asset)
    get("/openapi.json", web_pages.openapi_json)
    get("/docs", web_pages.docs_page)
    return app


async def start(
    app: web.Application, *, shutdown_timeout: float = 5.0
) -> tuple[web.AppRunner, GuardedSite]:
    """Set ``app`` up and listen on its settings' host and port, guarded
    (:mod:`hub.web_connections`). Raises ``OSError`` when the address cannot be bound."""
    settings = app[SETTINGS]
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=shutdown_timeout,
        keepalive_timeout=settings.keepalive_timeout_seconds,
    )
    await runner.setup()
    site = GuardedSite(
        runner, app[GUARD], settings.host, settings.port, reuse_port=settings.reuse_port
    )
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site


async def serve(settings: Settings, redis_url: str, embedded: EmbeddedRedis | None) -> None:
    """Serve the hub until SIGINT/SIGTERM (``rshub serve``)."""
    runner, site = await start(create_app(settings, redis_url, embedded))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log.info("listening on %s (public URL %s)", site.name, settings.public_url)
    log.info("hub ready at %s", settings.public_url)
    if settings.gc_young_threshold:
        _freeze_startup_heap()
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await runner.cleanup()


def _freeze_startup_heap() -> None:
    """Collect the reference cycles start-up left behind, once, and move what survives out
    of the collector's way (as ``rshub serve`` does before the app exists).

    Creating the app leaves some 21,500 objects in cycles; the first full collection found
    them in the middle of a fan-out and held the loop 20-80 ms (``gc.callbacks`` in the hub
    during bench/hub.py), the WebSocket p99 outliers.
    """
    gc.collect()
    gc.freeze()


def loop_factory(use_uvloop: bool) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when wanted and installed, else None (asyncio's default loop)."""
    if not use_uvloop:
        return None
    try:
        import uvloop
    except ImportError:
        log.info("uvloop is not installed; running on the asyncio event loop")
        return None
    return uvloop.new_event_loop


def run(
    settings: Settings,
    redis_url: str,
    embedded: EmbeddedRedis | None = None,
    *,
    use_uvloop: bool = True,
) -> None:
    """Serve the hub until SIGINT/SIGTERM (``rshub serve``)."""
    with asyncio.Runner(loop_factory=loop_factory(use_uvloop)) as runner:
        runner.run(serve(settings, redis_url, embedded))

"""The hub's aiohttp application: the one owner of its lifecycle, routes and error mapping.

:func:`create_app` adds the routes (one table) and one ``cleanup_ctx`` that opens the
process's :class:`hub.live.runtime.Runtime` (every long-lived component and background
task) and hands each handler module its own small context (``Publishing``, ``Subscribing``,
``Streaming``, ``Reading``, ``Operating``, ``Observing``, ``Access``); exceptions become
HTTP responses in one place (:func:`error_handling`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from pydantic import ValidationError

from hub.core import collector
from hub.core.access import MetricsAccess, OperatorAccess, ReadAccess
from hub.core.api_bodies import answer_damage
from hub.core.auth import PublisherAuth
from hub.core.cors import CorsPolicy
from hub.core.exceptions import (
    DamagedData,
    RequestError,
    RequestTimeout,
    SnapshotPending,
    TooManyRequests,
)
from hub.core.forwarding import TrustedPeers
from hub.core.health import RedisHealth
from hub.core.own_site import OwnSite
from hub.core.revocations import Revocations
from hub.core.settings import Settings
from hub.core.topics import WELL_KNOWN, HubUrls, loopback_aliases
from hub.live.dead_letter_replay import Replays
from hub.live.heartbeats import Heartbeats
from hub.live.runtime import Runtime
from hub.live.topic_directory import TopicDirectory
from hub.store.embedded_redis import EmbeddedRedis
from hub.store.redis_connection import StoreError
from hub.store.rendered_pages import RenderedPages
from hub.store.replicas import NotReplicated
from hub.web import access as web_access
from hub.web import admin as web_admin
from hub.web import cors as web_cors
from hub.web import dashboard as web_pages
from hub.web import dead_letters as web_dead_letters
from hub.web import documents as web_documents
from hub.web import latest_changes as web_latest_changes
from hub.web import multiplex as web_multiplex
from hub.web import observe as web_observe
from hub.web import operator as web_operator
from hub.web import presence as web_presence
from hub.web import publish as web_publish
from hub.web import rate_limits as web_rate_limits
from hub.web import request_body as web_request_body
from hub.web import request_headers as web_request_headers
from hub.web import revocations as web_revocations
from hub.web import streams as web_streams
from hub.web import subscription_record as web_record
from hub.web import topic_content as web_topic_content
from hub.web import websub as web_websub
from hub.web.cache import Builds, ByteCache
from hub.web.error_responses import damaged_data, error_response, storage_failure
from hub.web.lean_connection import Lean
from hub.web.listener import ClientGone, ConnectionGuard, GuardedSite
from hub.web.page_builds import PageBuilds
from resourcesync import DocumentError
from rsclient.client_faults import install_client_fault_filter

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- errors ---------------------------------------------------------------------------------


async def _answer_and_close(
    request: web.Request, response: web.StreamResponse
) -> web.StreamResponse:
    """Send ``response``, then close the connection without reading the rest of the body."""
    response.force_close()
    try:
        await response.prepare(request)
        await response.write_eof()
    except ConnectionError:
        # Gone meanwhile (at the body deadline, say): nothing was answered, as a 499.
        return ClientGone(status=499)
    request.protocol.force_close()
    return response


def _reason(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}: {message}"[:300]


#: Methods whose requests the hub serves without a body.
_NO_BODY = frozenset({"GET", "HEAD"})


def error_handling(health: RedisHealth) -> web_observe.Inner:
    """The one place where exceptions become HTTP responses (a storage error also marks
    Redis unhealthy in ``health``); run inside the observation of each request."""

    async def answer(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in _NO_BODY and request.body_exists:
            # No GET of the hub's reads a body: refused, and the connection closed rather
            # than drained (a stream answered first would hold the unread body open).
            refusal = f"a {request.method} request takes no body: send it without one"
            return await _answer_and_close(request, error_response(400, refusal))
        return await _answer(request, handler, health)

    return answer


async def _answer(
    request: web.Request, handler: Handler, health: RedisHealth
) -> web.StreamResponse:
    try:
        web_request_headers.check(request)  # before anything reads a header
        return await handler(request)
    except RequestTimeout as exc:
        # The rest of a body that is this slow is not worth waiting for: answer and close.
        return await _answer_and_close(request, error_response(exc.http_status, exc.message))
    except RequestError as exc:
        response = error_response(exc.http_status, exc.message, **exc.detail)
        if isinstance(exc, TooManyRequests | SnapshotPending):
            response.headers["Retry-After"] = str(exc.retry_after)
        return response
    except DocumentError as exc:
        detail = {
            "rule": getattr(exc, "rule", None),
            "document": getattr(exc, "document", None),
            "index": getattr(exc, "index", None),
        }
        return error_response(getattr(exc, "http_status", 400), str(exc), **detail)
    except DamagedData as exc:
        return damaged_data(exc, request.method, request.path)
    except ValidationError as exc:
        # Answers are built from their models (hub.core.api_bodies) out of what Redis holds:
        # a value the hub never writes there (a fractional lease, a count as text) fails
        # the model, which is damaged data, not a fault of the hub's to log as a traceback.
        return damaged_data(answer_damage(exc), request.method, request.path)
    except (NotReplicated, StoreError) as exc:
        return storage_failure(exc, health, request.method, request.path)
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


async def response_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: a private topic's cache headers, and the request id. One
    signal for both: each receiver is a coroutine made and awaited per response."""
    web_access.private_cache_control(request, response)
    web_observe.add_request_id(request, response)


# -- lifecycle ------------------------------------------------------------------------------

#: The process's composition root (:class:`hub.live.runtime.Runtime`), once the app started:
#: the supported way for tests and tools to reach the hub's components.
RUNTIME = web.AppKey("runtime", Runtime)
_SETTINGS = web.AppKey("settings", Settings)
_GUARD = web.AppKey("connection_guard", ConnectionGuard)


def _lifecycle(
    settings: Settings,
    redis_url: str,
    embedded: EmbeddedRedis | None,
    health: RedisHealth,
    guard: ConnectionGuard,
    auth: PublisherAuth,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The app's one ``cleanup_ctx``: open the runtime, hand each handler module its context,
    and on shutdown close everything in reverse (:meth:`hub.live.runtime.Runtime.close`)."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        runtime = app[RUNTIME] = await Runtime.open(
            settings, redis_url, health=health, embedded=embedded, revocations=auth.revocations
        )
        decoder = app[web_request_body.DECODER] = web_request_body.decoder()
        urls = app[web_access.ACCESS].urls
        contents = runtime.content_publishing if runtime.plain_topics else None
        app[web_topic_content.SERVING_CONTENT] = web_topic_content.ServingContent(
            runtime.plain_topics, runtime.contents
        )
        app[web_publish.PUBLISHING] = web_publish.Publishing(
            settings, auth, runtime.parser, runtime.ingest, contents
        )
        app[web_websub.SUBSCRIBING] = web_websub.Subscribing(
            settings,
            auth,
            runtime.delivery,
            runtime.client,
            runtime.parser,
            runtime.ingest,
            web_websub.ping_limit(settings),
            contents,
        )
        app[web_streams.STREAMING] = web_streams.Streaming(
            settings,
            urls,
            runtime.store,
            runtime.feeds,
            Heartbeats(settings.heartbeat_seconds),
            closing=runtime.closing,
            presence=runtime.stream_counts,
        )
        app[web_revocations.REVOKING] = web_revocations.Revoking(
            runtime.revocation_store, runtime.refresh_revocations, settings
        )
        app[web_multiplex.MULTIPLEXING] = web_multiplex.Multiplexing(
            TopicDirectory(runtime.store, runtime.feeds.tasks, settings.stream_topic_scan_seconds)
        )
        app[web_presence.PRESENCE] = runtime.presence
        closed_pages = ByteCache(settings.document_cache_bytes)
        app[web_documents.READING] = web_documents.Reading(
            urls,
            runtime.store,
            runtime.pages,
            runtime.snapshots,
            runtime.snapshot_builds,
            runtime.parser,
            closed_pages,
            Builds(settings.built_document_cache_bytes, runtime.document_builds),
            PageBuilds(
                runtime.store,
                runtime.parser,
                runtime.document_builds,
                closed_pages,
                RenderedPages(runtime.connections.main),
                max_bytes=settings.built_document_cache_bytes,
                wait_seconds=settings.document_wait_seconds,
            ),
        )
        app[web_latest_changes.LATEST] = web_latest_changes.LatestViews(
            runtime.store, runtime.parser, max_bytes=settings.built_document_cache_bytes
        )
        app[web_operator.OPERATING] = web_operator.Operating(
            runtime.store,
            runtime.subscriptions,
            runtime.topic_admin,
            runtime.pages,
            runtime.topic_removed,
            runtime.delivery.attempts.store,
        )
        app[web_record.RECORDS] = web_record.Records(
            settings,
            runtime.connections.main,
            runtime.store,
            runtime.subscriptions,
            runtime.topic_admin,
            runtime.delivery.attempts.store,
        )
        app[web_admin.OBSERVING] = web_admin.Observing(
            health,
            runtime.connections,
            runtime.ownership,
            embedded,
            auth,
            MetricsAccess(settings),
            runtime.store,
            runtime.subscriptions,
            runtime.stats,
        )
        app[web_dead_letters.DEAD_LETTERING] = web_dead_letters.DeadLettering(
            runtime.delivery.dead_letters,
            Replays(
                runtime.delivery.dead_letters,
                runtime.client,
                HubUrls(settings.public_url),
                node=runtime.node,
                max_changes=settings.delivery_batch_max_changes,
                max_bytes=settings.delivery_batch_max_bytes,
                attempts=runtime.delivery.attempts,
                plain=runtime.plain_topics,
                contents=runtime.contents,
            ),
        )
        try:
            # Not "ready" yet: the socket is bound after this; serve() says so once it is.
            log.debug("runtime started")
            yield
        finally:
            log.info("shutdown: stopping background tasks, deliveries and Redis connections")
            guard.close()
            decoder.shutdown(wait=False, cancel_futures=True)
            await runtime.close()
            log.info("shutdown complete")

    return lifecycle


async def _shutdown_started(app: web.Application) -> None:
    """SIGTERM, after the listener closed: end every stream with its resume point and, at
    the same time, hand the deliveries over (POSTs in flight finish, cursors are committed,
    leases released so other processes take them on their next tick, not after a lease)."""
    streaming = app[web_streams.STREAMING]
    log.info(
        "shutdown started: no new connections; closing %d open streams, handing over deliveries",
        streaming.closing.open,
    )
    await asyncio.gather(
        streaming.closing.close_all(streaming.settings.shutdown_streams_seconds),
        app[RUNTIME].hand_over(),
    )


def create_app(
    settings: Settings, redis_url: str, embedded: EmbeddedRedis | None = None
) -> web.Application:
    """Build the hub for ``settings`` on the Redis at ``redis_url``.

    ``embedded``: the redis-server behind ``redis_url`` when this process started it; the
    app then supervises it (restarts it if it dies) and reports it in ``/healthz``.
    """
    install_client_fault_filter()
    guard = ConnectionGuard(settings.max_connections, settings.header_timeout_seconds)
    # One view of the token revocations for every check (kept current by the runtime).
    revocations = Revocations()
    health, auth = RedisHealth(), PublisherAuth(settings, revocations)
    cors = CorsPolicy(settings.cors_origins)
    app = web.Application(
        middlewares=[
            web_observe.observe_middleware(
                access_log_on=settings.access_log,
                first=guard.dispatched,
                inner=error_handling(health),
            ),
            *([web_cors.cors_middleware(cors)] if cors else []),
        ],
        client_max_size=settings.max_body_bytes,
    )
    if cors:
        app.on_response_prepare.append(web_cors.grant_signal(cors))
    app[_GUARD], app[_SETTINGS] = guard, settings
    app[web_rate_limits.SETTINGS] = settings
    aliases = [u.rstrip("/") for u in settings.alias_urls]
    aliases += [u for u in loopback_aliases(settings.host, settings.port) if u not in aliases]
    urls = HubUrls(settings.public_url, tuple(a for a in aliases if a != settings.public_url))
    app[web_access.ACCESS] = web_access.Access(
        urls,
        ReadAccess(settings, revocations),
        OperatorAccess(settings, hub_open=auth.open),
        TrustedPeers(settings.forwarded_allow_ips),
        alias_links=settings.alias_links,
        own_site=OwnSite(
            (urls.base, *urls.aliases), listen_host=settings.host, cors_origins=cors.origins
        ),
    )
    app.cleanup_ctx.append(_lifecycle(settings, redis_url, embedded, health, guard, auth))
    app.on_shutdown.append(_shutdown_started)
    app.on_response_prepare.append(response_headers)

    # The hot routes first: aiohttp tries dynamic resources in registration order.
    post, get = app.router.add_post, app.router.add_get
    post("/topics/{name}", web_publish.publish_to_named_topic)
    post("/", web_websub.hub_endpoint)
    get("/healthz", web_admin.healthz)
    get("/topics/{name}/ws", web_streams.websocket)
    get("/topics/{name}/events", web_streams.server_sent_events)
    get("/ws", web_multiplex.websocket)
    get("/events", web_multiplex.server_sent_events)
    get(WELL_KNOWN, web_documents.source_description)
    get("/topics/{name}", web_topic_content.topic_uri)
    get("/topics/{name}/capabilitylist.xml", web_documents.capability_list)
    get("/topics/{name}/changelist.xml", web_documents.changelist_index)
    get("/topics/{name}/changes.xml", web_latest_changes.latest_changes)
    get("/topics/{name}/changes-lost", web_latest_changes.changes_lost)
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
    get("/admin/revocations", web_revocations.list_revocations)
    post("/admin/revocations", web_revocations.revoke)
    app.router.add_delete("/admin/revocations", web_revocations.lift)
    app.router.add_delete("/admin/subscriptions", web_operator.delete_subscription)
    get("/admin/subscriptions/{id}/dead-letters", web_dead_letters.list_dead_letters)
    post("/admin/subscriptions/{id}/dead-letters/replay", web_dead_letters.replay_dead_letters)

    rate_limit = "/admin/subscriptions/{id}/rate-limit"
    get(rate_limit, web_rate_limits.get_rate_limit)
    app.router.add_put(rate_limit, web_rate_limits.put_rate_limit)
    app.router.add_delete(rate_limit, web_rate_limits.delete_rate_limit)

    get("/admin/subscriptions/{id}", web_record.subscription_record)
    get("/", web_pages.dashboard)
    get("/dashboard/{file}", web_pages.dashboard_asset)
    described = web_pages.InterfaceDescription(settings.public_url)
    get("/openapi.json", described.openapi_json)
    get("/docs", described.docs_page)
    return app


#: aiohttp's own limit on a request line and on a header field.
_HTTP_LINE_BYTES = 8190


def _lean(app: web.Application, server: web.Server | None, settings: Settings) -> Lean | None:
    """The lean paths wanted (neither with CORS: its headers are aiohttp's middleware's)."""
    sse, publish = settings.lean_sse, settings.lean_publish
    if server is None or settings.cors_origins or not (sse or publish):
        return None
    return Lean(app, server, sse=sse, publish=publish)


async def start(
    app: web.Application, *, shutdown_timeout: float = 5.0
) -> tuple[web.AppRunner, GuardedSite]:
    """Set ``app`` up and listen on its settings' host and port, guarded
    (:mod:`hub.web.listener`). Raises ``OSError`` when the address cannot be bound."""
    settings = app[_SETTINGS]
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=shutdown_timeout,
        keepalive_timeout=settings.keepalive_timeout_seconds,
        # Bodies as sent: aiohttp would inflate an encoded body on the loop as it arrives,
        # read or not. Handlers decode what they read, bounded, off the loop
        # (hub.web.request_body).
        auto_decompress=False,
        # A resume id of a stream of several topics travels in a request line (since=) or
        # a header (Last-Event-ID): aiohttp's limits (8190 bytes) grow with the setting.
        max_line_size=max(_HTTP_LINE_BYTES, settings.stream_max_id_bytes + 2048),
        max_field_size=max(_HTTP_LINE_BYTES, settings.stream_max_id_bytes + 64),
    )
    await runner.setup()
    server = runner.server
    assert server is not None
    server.request_handler = web_request_headers.expectations(server.request_handler)
    site = GuardedSite(
        runner,
        app[_GUARD],
        settings.host,
        settings.port,
        reuse_port=settings.reuse_port,
        lean=_lean(app, runner.server, settings),
        shutdown_timeout=shutdown_timeout,
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
        collector.freeze_startup_heap()
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await runner.cleanup()


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

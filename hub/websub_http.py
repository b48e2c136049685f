"""``POST /``: the WebSub hub URL (subscribe, unsubscribe, publish ping) or an XML publish."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web
from redis.asyncio import Redis

from . import ingest, ping, websub
from .callbacks import check_callback_address
from .delivery import DeliveryService
from .exceptions import BadRequest
from .feed import FeedHub
from .state import DELIVERY, FEEDS, HTTP, REDIS, REDIS_URL, SETTINGS, STORE
from .subscriptions import SubscriptionStore

_FORM = "application/x-www-form-urlencoded"
_MAX_FORM_BYTES = 16 * 1024


async def _delivery_ctx(app: web.Application) -> AsyncIterator[None]:
    # Feeds block in XREAD: their own client, with no socket timeout to trip over.
    blocking = Redis.from_url(app[REDIS_URL], socket_timeout=None, health_check_interval=30)
    feeds = FeedHub(app[REDIS], blocking)
    app[FEEDS] = feeds
    service = DeliveryService(
        app[SETTINGS], app[HTTP], SubscriptionStore(app[REDIS]), feeds, app[STORE].last_id
    )
    app[DELIVERY] = service
    await service.start()
    yield
    await service.close()
    await feeds.close()
    await blocking.aclose()


def setup(app: web.Application) -> None:
    """Run feeds and delivery workers for the app's lifetime (after Redis and HTTP)."""
    app.cleanup_ctx.append(_delivery_ctx)


async def hub_endpoint(request: web.Request) -> web.StreamResponse:
    if request.content_type == _FORM:
        return await _websub_request(request)
    return await ingest.publish_to_self_link(request)


async def _websub_request(request: web.Request) -> web.Response:
    if (request.content_length or 0) > _MAX_FORM_BYTES:
        raise BadRequest(f"a WebSub request body must be under {_MAX_FORM_BYTES} bytes")
    form = {k: str(v) for k, v in (await request.post()).items()}
    settings = request.app[SETTINGS]
    service = request.app[DELIVERY]
    try:
        parsed = websub.parse_request(
            form,
            base_url=settings.public_url,
            lease_default=settings.lease_seconds_default,
            lease_min=settings.lease_seconds_min,
            lease_max=settings.lease_seconds_max,
        )
    except websub.TopicDenied as exc:
        await check_callback_address(exc.callback, allow_private=settings.private_callbacks_allowed)
        service.deny(exc.callback, exc.topic_url, exc.message)
        return web.Response(status=202, text=f"denied: {exc.message}\n")
    if isinstance(parsed, tuple):
        return await ping.publish_ping(request, parsed[1])
    await check_callback_address(parsed.callback, allow_private=settings.private_callbacks_allowed)
    await service.request(parsed)
    return web.Response(
        status=202,
        text=f"{parsed.mode} request for {parsed.topic_url} accepted; verifying intent\n",
    )


__all__ = ["hub_endpoint", "setup"]

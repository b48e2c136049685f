"""Typed application keys for the long-lived resources the app lifecycle owns."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from redis.asyncio import Redis

from .settings import Settings

if TYPE_CHECKING:
    from .delivery import DeliveryService
    from .feed import FeedHub
    from .store import EventStore

SETTINGS = web.AppKey("settings", Settings)
REDIS_URL = web.AppKey("redis_url", str)
REDIS = web.AppKey("redis", Redis)
HTTP = web.AppKey("http", aiohttp.ClientSession)
# Typed by annotation: the classes import this module, so they are named lazily here.
STORE: web.AppKey[EventStore] = web.AppKey("store")
FEEDS: web.AppKey[FeedHub] = web.AppKey("feeds")
DELIVERY: web.AppKey[DeliveryService] = web.AppKey("delivery")

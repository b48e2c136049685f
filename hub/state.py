"""Typed application keys for the long-lived resources the app lifecycle owns."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from redis.asyncio import Redis

from .settings import Settings

if TYPE_CHECKING:
    pass

SETTINGS = web.AppKey("settings", Settings)
REDIS_URL = web.AppKey("redis_url", str)
REDIS = web.AppKey("redis", Redis)
HTTP = web.AppKey("http", aiohttp.ClientSession)
STORE = web.AppKey("store", "EventStore")
FEEDS = web.AppKey("feeds", "FeedHub")
DELIVERY = web.AppKey("delivery", "DeliveryService")

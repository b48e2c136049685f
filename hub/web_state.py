"""Every typed application key: the long-lived objects :mod:`hub.web_app` creates."""

from __future__ import annotations

from aiohttp import web

from .auth import PublisherAuth
from .connection import Connections
from .delivery import DeliveryService
from .feed import FeedHub
from .health import RedisHealth
from .pages import PageChain
from .parsing import DocumentParser
from .settings import Settings
from .snapshots import ResourceSnapshots
from .store import EventStore
from .subscriptions import SubscriptionStore
from .topics import HubUrls
from .web_cache import ByteCache
from .web_client import HttpClient
from .web_connections import ConnectionGuard

SETTINGS = web.AppKey("settings", Settings)
URLS = web.AppKey("urls", HubUrls)
AUTH = web.AppKey("auth", PublisherAuth)
REDIS_URL = web.AppKey("redis_url", str)
CONNECTIONS = web.AppKey("connections", Connections)
STORE = web.AppKey("store", EventStore)
SUBSCRIPTIONS = web.AppKey("subscriptions", SubscriptionStore)
PAGES = web.AppKey("pages", PageChain)
SNAPSHOTS = web.AppKey("snapshots", ResourceSnapshots)
DOC_CACHE = web.AppKey("doc_cache", ByteCache)
CLIENT = web.AppKey("client", HttpClient)
FEEDS = web.AppKey("feeds", FeedHub)
DELIVERY = web.AppKey("delivery", DeliveryService)
PARSER = web.AppKey("parser", DocumentParser)
REDIS_HEALTH = web.AppKey("redis_health", RedisHealth)
GUARD = web.AppKey("connection_guard", ConnectionGuard)

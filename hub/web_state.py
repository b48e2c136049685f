"""Every typed application key: the long-lived objects :mod:`hub.web_app` creates."""

from __future__ import annotations

from aiohttp import web

from .access import MetricsAccess, OperatorAccess, ReadAccess
from .auth import PublisherAuth
from .connection import Connections
from .delivery import DeliveryService
from .embedded_redis import EmbeddedRedis
from .feed import FeedHub
from .forwarding import TrustedPeers
from .health import RedisHealth
from .ownership import Ownership
from .pages import PageChain
from .parsing import DocumentParser
from .settings import Settings
from .snapshots import ResourceSnapshots
from .store import EventStore
from .stream_stats import StreamStats
from .subscriptions import SubscriptionStore
from .topic_admin import TopicAdmin
from .topics import HubUrls
from .web_cache import Builds, ByteCache
from .web_client import HttpClient
from .web_connections import ConnectionGuard

SETTINGS = web.AppKey("settings", Settings)
URLS = web.AppKey("urls", HubUrls)
AUTH = web.AppKey("auth", PublisherAuth)
REDIS_URL = web.AppKey("redis_url", str)
#: The redis-server ``rshub serve`` started, if it started one (supervised by the app).
EMBEDDED = web.AppKey("embedded", EmbeddedRedis)
CONNECTIONS = web.AppKey("connections", Connections)
STORE = web.AppKey("store", EventStore)
SUBSCRIPTIONS = web.AppKey("subscriptions", SubscriptionStore)
PAGES = web.AppKey("pages", PageChain)
SNAPSHOTS = web.AppKey("snapshots", ResourceSnapshots)
DOC_CACHE = web.AppKey("doc_cache", ByteCache)
#: Whole Resource Lists, built once per version off the event loop (single flight).
BUILDS = web.AppKey("builds", Builds)
CLIENT = web.AppKey("client", HttpClient)
FEEDS = web.AppKey("feeds", FeedHub)
DELIVERY = web.AppKey("delivery", DeliveryService)
OWNERSHIP = web.AppKey("ownership", Ownership)
#: Who may read private topics, who may use /admin, whose forwarded headers count.
READERS = web.AppKey("readers", ReadAccess)
OPERATORS = web.AppKey("operators", OperatorAccess)
METRICS_ACCESS = web.AppKey("metrics_access", MetricsAccess)
TRUSTED_PEERS = web.AppKey("trusted_peers", TrustedPeers)
TOPIC_ADMIN = web.AppKey("topic_admin", TopicAdmin)
STATS = web.AppKey("stats", StreamStats)
PARSER = web.AppKey("parser", DocumentParser)
REDIS_HEALTH = web.AppKey("redis_health", RedisHealth)
GUARD = web.AppKey("connection_guard", ConnectionGuard)

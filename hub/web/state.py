"""Every typed application key: the long-lived objects :mod:`hub.web.app` creates."""

from __future__ import annotations

from aiohttp import web

from hub.core.access import MetricsAccess, OperatorAccess, ReadAccess
from hub.core.auth import PublisherAuth
from hub.core.forwarding import TrustedPeers
from hub.core.health import RedisHealth
from hub.core.settings import Settings
from hub.core.topics import HubUrls
from hub.live.delivery import DeliveryService
from hub.live.feed import FeedHub
from hub.live.http_client import HttpClient
from hub.live.ingest import Ingest
from hub.live.ownership import Ownership
from hub.live.parsing import DocumentParser
from hub.store.embedded_redis import EmbeddedRedis
from hub.store.event_store import EventStore
from hub.store.pages import PageChain
from hub.store.redis_connection import Connections
from hub.store.snapshots import ResourceSnapshots
from hub.store.stream_stats import StreamStats
from hub.store.subscriptions import SubscriptionStore
from hub.store.topic_admin import TopicAdmin
from hub.web.cache import Builds, ByteCache
from hub.web.listener import ConnectionGuard

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
#: Appends publishes and hands them to the live feed (the one path from a publish to it).
INGEST = web.AppKey("ingest", Ingest)
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

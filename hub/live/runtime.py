"""The hub process's composition root: every long-lived component, made, started and stopped
in one place.

:meth:`Runtime.open` connects to Redis and builds each component with its dependencies
passed in (nothing is wired afterwards); every long-lived task runs in the one
:class:`hub.core.tasks.Tasks` tree under :attr:`Runtime.tasks` (a group per component;
per-topic and per-subscription tasks are spawned into those). :meth:`Runtime.close` stops
everything in reverse dependency order: background jobs, ownership (workers stopped, leases
given up), parsing, delivery, feeds, the HTTP client, the store, the connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from hub.core import metrics
from hub.core.damage import DamageLog
from hub.core.exceptions import DamagedData
from hub.core.health import PING_TIMEOUT, RedisHealth
from hub.core.presence import StreamCounts
from hub.core.revocations import Revocations
from hub.core.settings import Settings
from hub.core.tasks import Tasks
from hub.core.topic_content import PlainTopics
from hub.live import client_trust
from hub.live.client_streams import Closing
from hub.live.content_publication import ContentPublishing
from hub.live.delivery import DeliveryService
from hub.live.feed import FeedHub
from hub.live.http_client import HttpClient
from hub.live.ingest import Ingest
from hub.live.ownership import Ownership
from hub.live.parsing import DocumentParser
from hub.live.presence import PresenceReporter
from hub.live.snapshot_builds import SnapshotBuilds
from hub.store import keys
from hub.store.embedded_redis import EmbeddedRedis
from hub.store.event_store import EventStore, Retention
from hub.store.leases import Leases
from hub.store.pages import PageChain
from hub.store.presence import PresenceStore
from hub.store.redis_connection import Connections, StoreError
from hub.store.revocations import RevocationStore
from hub.store.snapshots import ResourceSnapshots
from hub.store.stream_stats import StreamStats
from hub.store.subscriptions import SubscriptionStore
from hub.store.topic_admin import TopicAdmin
from hub.store.topic_contents import ContentStore
from resourcesync import Limits
from resourcesync.models import build_models

log = logging.getLogger(__name__)

#: What serving does not need is made this long after the start, not at once: it would take
#: CPU (and the GIL, even in a thread) from a restart's first requests. The system TLS
#: context (an https callback before then makes it itself), prometheus_client (its series
#: count meanwhile, see :func:`hub.core.metrics.load`), aiohttp's client trust
#: (:mod:`hub.live.client_trust`) and resourcesync's model validators.
AFTER_START_SECONDS = 1.0


class Runtime:
    """The long-lived parts of one hub process; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        connections: Connections,
        *,
        health: RedisHealth,
        embedded: EmbeddedRedis | None = None,
        revocations: Revocations | None = None,
    ) -> None:
        self.settings = settings
        self.connections = connections
        self.health = health
        #: The redis-server ``rshub serve`` started, if it did (supervised here).
        self.embedded = embedded
        self.node = uuid.uuid4().hex[:16]
        self.damage = DamageLog(log)
        #: Every long-lived task of the process, a group per component.
        self.tasks = Tasks("hub")
        self.store = EventStore(
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
            wait_replicas=settings.redis_wait_replicas,
            wait_seconds=settings.redis_wait_seconds,
            # The feeds are made below (they need the store): called only once serving.
            uncertain=lambda topic: self.feeds.unsure(topic),
        )
        self.subscriptions = SubscriptionStore(
            connections.main, scripts=self.store.scripts, blocking=connections.blocking
        )
        self.pages = PageChain(
            self.store.scripts,
            window_seconds=settings.changelist_page_seconds,
            max_entries=settings.changelist_page_entries,
        )
        self.topic_admin = TopicAdmin(connections.main, self.store.scripts, self.subscriptions)
        self.stats = StreamStats(connections.main, self.store.scripts)
        self.client = HttpClient(settings, self.tasks.group("client"))
        # Groups are stopped in reverse order of creation: feeds after delivery, delivery
        # after ownership (see close(), which stops each with its component).
        self.feeds = FeedHub(
            self.store,
            self.tasks.group("feeds", peers=True),
            push_delay_max=settings.push_delay_max_ms / 1000,
        )
        self.ingest = Ingest(self.store, self.feeds)
        #: The token revocations in force (the token checks' view, kept current here), the
        #: open streams they may end, and where Redis keeps them.
        self.revocations = Revocations() if revocations is None else revocations
        self.closing = Closing(self.revocations)
        self.revocation_store = RevocationStore(connections.main, self.store.scripts)
        self._revocations_read = asyncio.Lock()
        #: Plain WebSub topics (hub.core.topic_content): which, their latest content, and
        #: their publishes (content POSTed, or fetched on a ping).
        self.plain_topics = PlainTopics(settings.websub_topics)
        self.contents = ContentStore(connections.main)
        self.content_publishing = ContentPublishing(
            self.plain_topics, self.contents, self.ingest, self.client
        )
        wake = asyncio.Event()  # set when a worker ends: ownership reconciles
        self.delivery = DeliveryService(
            settings,
            self.client,
            self.subscriptions,
            self.feeds,
            node=self.node,
            tasks=self.tasks.group("delivery"),
            # Made next: called only once it runs.
            worker_ended=lambda key: self.ownership.worker_ended(key),
            revocations=self.revocations,
            plain=self.plain_topics,
            contents=self.contents,
        )
        self.ownership = Ownership(
            Leases(self.store.scripts, self.node, int(settings.ownership_lease_seconds * 1000)),
            self.subscriptions,
            self.delivery,
            tasks=self.tasks.group("ownership", peers=True),
            wake=wake,
            topic_removed=self.topic_removed,
            lease_seconds=settings.ownership_lease_seconds,
            reconcile_seconds=settings.ownership_reconcile_seconds,
        )
        self.parser = DocumentParser(
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
            gc_young_threshold=settings.gc_young_threshold,
        )
        self.snapshots = ResourceSnapshots(
            connections.main,
            self.store.scripts,
            page_entries=settings.resourcelist_page_entries,
            reuse_seconds=settings.resourcelist_snapshot_seconds,
            ttl_seconds=settings.resourcelist_snapshot_ttl_seconds,
            offload=self.parser.run,
        )
        #: Paged Resource List snapshots, taken in the background while the last is served.
        self.snapshot_builds = SnapshotBuilds(
            self.snapshots,
            self.tasks.group("snapshots", peers=True),
            wait_seconds=settings.document_wait_seconds,
        )
        #: Documents rendered once per version for every reader (``hub.web.cache.Builds``).
        self.document_builds = self.tasks.group("document-builds", peers=True)
        self.background = self.tasks.group("background")
        #: Live stream clients per topic: counted here, reported for every process to sum.
        self.stream_counts = StreamCounts()
        self.presence = PresenceStore(connections.main, self.store.scripts)
        self.presence_reporter = PresenceReporter(
            self.stream_counts,
            self.presence,
            self.node,
            self.tasks.group("presence"),
            every=settings.ownership_lease_seconds,
            delay=settings.presence_report_seconds,
        )

    @classmethod
    async def open(
        cls,
        settings: Settings,
        redis_url: str,
        *,
        health: RedisHealth,
        embedded: EmbeddedRedis | None = None,
        revocations: Revocations | None = None,
    ) -> Runtime:
        """Connect (waiting up to ``redis_startup_seconds``), build and start; on any
        failure, close what was opened. ``revocations``: the view the token checks hold."""
        connections = Connections(redis_url, cluster=settings.redis_cluster)
        try:
            await connections.wait_ready(settings.redis_startup_seconds)
        except BaseException:
            await connections.close()
            raise
        runtime = cls(
            settings, connections, health=health, embedded=embedded, revocations=revocations
        )
        try:
            await runtime.start()
        except BaseException:
            await runtime.close()
            raise
        return runtime

    async def start(self) -> None:
        """Start the background jobs and take up this node's share of the deliveries.

        Hub-wide jobs run on the leading process only (they are atomic scripts, so a second
        runner during a handover merely repeats work). Nothing here waits for what serving
        does not need: the delivery recovery (ownership's first round), the TLS context and
        the Prometheus series are made while the hub already answers (a restart is serving
        sooner).
        """
        settings, jobs = self.settings, self.background
        try:  # a revoked token is refused from the first request
            await self.refresh_revocations()
        except StoreError as exc:  # Redis away again: the job reads them once it answers,
            # and ends any stream a revoked token opened meanwhile
            log.warning("token revocations not read at start: %s", exc)
        jobs.every(1.0, "redis-health", self._check_redis)
        jobs.every(
            settings.revocation_check_seconds,
            "revocations",
            self.refresh_revocations,
            retry_on=StoreError,
            on_failure=_redis_error,
        )
        jobs.every(
            settings.retention_sweep_seconds,
            "retention",
            self._when_leading(self._sweep_retention),
            retry_on=StoreError,
            on_failure=_redis_error,
        )
        if settings.changelist_scan_seconds:
            jobs.every(
                settings.changelist_scan_seconds,
                "page-scan",
                self._when_leading(self._scan_pages),
                retry_on=StoreError,
                on_failure=_redis_error,
            )
        if self.embedded is not None:
            jobs.spawn("redis-supervisor", self.embedded.supervise())
        jobs.spawn("after-start", self._after_start(AFTER_START_SECONDS))
        await self.ownership.start()
        self.presence_reporter.start()

    async def hand_over(self) -> None:
        """Give this process's deliveries up (at shutdown, before the rest closes): the
        POSTs in flight finish within ``handover_grace_seconds``, cursors are committed and
        the leases released. The hub-wide jobs stop first (they run while this process
        leads). Idempotent: :meth:`close` does it too."""
        await self.background.stop()
        await self.ownership.close()

    async def close(self) -> None:
        """Stop everything, in reverse dependency order; every wait is bounded.

        Whatever a component left running in the task tree stops before the clients close:
        redis-py's pools and the outgoing connections open again on demand, so a task still
        running after them (a retry under way during a failover) left a connection open.
        A step that fails is logged and the next still runs, so that one failing close
        leaves no connection of the others open.
        """
        await self.hand_over()
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("presence", self.presence_reporter.close),
            # Builds use the parser's pool: stopped before it closes, so that none makes
            # the pool anew behind its close (a process pool nobody shuts down).
            ("snapshots", self.snapshot_builds.tasks.stop),
            ("document builds", self.document_builds.stop),
            ("parser", self.parser.close),
            ("delivery", self.delivery.close),
            ("feeds", self.feeds.close),
            ("tasks", self.tasks.stop),
            ("client", self.client.close),
            ("store", self.store.close),
            ("connections", self.connections.close),
        ]
        for name, close in steps:
            try:
                await close()
            except Exception as exc:  # the rest must still close
                log.warning("closing %s failed: %r", name, exc)

    async def refresh_revocations(self) -> None:
        """Read the token revocations if Redis holds a newer set than this process (one GET
        when not), then end this process's streams and subscriptions of tokens now revoked.
        Run every ``revocation_check_seconds`` on every process, and at once by the one
        that takes a revocation (the admin API)."""
        async with self._revocations_read:
            store, view = self.revocation_store, self.revocations
            if await store.version() == view.version:
                # Unchanged in Redis, but one held may have expired: it stops applying here
                # now, on every process alike, though the store forgets it only later.
                if view.drop_expired(time.time()):
                    log.info("token revocations: %d in force (some expired)", len(view))
                return
            first = view.version is None
            version, records = await store.load()
            view.replace(records, version)
            streams, subscriptions = self.closing.end_revoked(), self.delivery.end_revoked()
        if first and not records:  # the start of a hub that never revoked: nothing to say
            return
        log.info(
            "token revocations: %d in force (version %d); ended %d streams and %d "
            "subscriptions here",
            len(view),
            version,
            streams,
            subscriptions,
        )

    async def topic_removed(self, topic: str) -> None:
        """A topic was deleted (here or on another process): forget it, end its streams."""
        self.store.forget(topic)
        await self.feeds.end(topic)

    # -- background jobs -------------------------------------------------------------------

    async def _after_start(self, delay: float) -> None:
        await asyncio.sleep(delay)
        await self.client.connections.prepare_tls()
        await asyncio.to_thread(client_trust.load)  # aiohttp's, if rshub serve held it back
        await asyncio.to_thread(metrics.import_library)  # the slow part, off the loop
        metrics.load()
        await asyncio.to_thread(build_models)  # resourcesync's, for the first full parse

    def _when_leading(self, step: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """``step``, run only while this process leads (see :mod:`hub.store.leases`)."""

        async def run() -> None:
            if self.ownership.leader:
                await step()

        return run

    async def _check_redis(self) -> None:
        """One health ping (see :mod:`hub.core.health`); never raises."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self.connections.ping(), timeout=PING_TIMEOUT)
        except Exception as exc:  # any failure means "not healthy"; say which
            self.health.failed(f"{type(exc).__name__}: {exc}")
        else:
            self.health.succeeded(loop.time())

    async def _sweep_retention(self) -> None:
        await self._each_topic("retention", self.store.trim)

    async def _scan_pages(self) -> None:
        """Advance every topic's page chain, so boundaries are recorded before retention
        trims."""
        await self._each_topic("page scan", lambda topic: self.pages.advance(topic))

    async def _each_topic(self, job: str, step: Callable[[str], Awaitable[object]]) -> None:
        """``step`` for every topic; a topic whose keys are damaged is said once and
        skipped, not the end of the round: a sweep that stopped at one let every topic
        after it grow. An outage (any other store error) still ends the round."""
        for topic in await self.store.topics():
            try:
                await step(topic)
            except (DamagedData, StoreError) as exc:
                if isinstance(exc, StoreError) and not keys.is_damage(exc):
                    raise
                self.damage.damaged(f"topic {topic!r} ({job})", exc)
            else:
                if self.damage:  # something was said: perhaps this topic, now whole
                    self.damage.whole(f"topic {topic!r} ({job})")


def _redis_error(_exc: BaseException) -> None:
    metrics.redis_error()  # Redis away for a moment: the job tries again next round

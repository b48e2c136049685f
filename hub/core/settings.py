"""The hub's one typed settings object.

Every field comes from a flag of ``rshub serve`` or an ``RSHUB_*`` environment variable
(``RSHUB_PORT=9000``, ``RSHUB_TOKENS='["s3cret"]'``). Every limit has a bounded default.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from hub.core import sentinel_url, tls_files
from hub.core.cors import origin_of
from hub.core.exceptions import BadRequest
from hub.core.read_tokens import check_key
from hub.core.topic_patterns import check_pattern
from hub.core.topics import base_origin, check_name

#: Upper bounds of the durations and counts below: far beyond any sensible setting, and
#: small enough that every value the hub derives from them (Redis expiries and stream IDs
#: in milliseconds, C ints, timers) stays in range. Without them, values such as ``inf``
#: or ``1e30`` passed validation and broke the hub later (a traceback at start, or every
#: publish of a topic refused).
DAY = 86_400
YEAR = 365 * DAY
MAX_EVENTS = 10**12


def _token(value: str) -> str:
    """What ``Authorization: Bearer <token>`` can carry: the hub compares the token the
    header gives, stripped, so an empty token or one with spaces could never match."""
    if not 1 <= len(value) <= 4096 or not all("!" <= c <= "~" for c in value):
        raise ValueError(
            "a token must be 1-4096 visible ASCII characters, without spaces "
            "(what 'Authorization: Bearer <token>' carries)"
        )
    return value


def _topic_name(value: str) -> str:
    """A topic named in a setting is one a URL can name, or the setting never applies."""
    try:
        return check_name(value)
    except BadRequest as exc:
        raise ValueError(exc.message) from None


def _base_url(value: str) -> str:
    """A base URL the hub builds links from, or recognises its topic URLs under."""
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ValueError(f"{value[:200]!r} is not a URL ({exc})") from None
    if base_origin(value) is None or parts.query or parts.fragment or parts.username:
        raise ValueError(
            f"{value[:200]!r} is not a base URL: http:// or https://, a host, an optional "
            "port and path prefix, no query, fragment or user"
        )
    return value


def _plain_topic(value: str) -> str:
    """A plain WebSub topic entry: one of this hub's topic names, or an http(s) URL prefix
    of other sites' topic URLs (:class:`hub.core.topic_content.PlainTopics`)."""
    if "://" not in value:
        try:
            return check_name(value)
        except BadRequest as exc:
            raise ValueError(
                f"{value[:200]!r} is neither a topic name ({exc.message}) nor an http:// or "
                "https:// URL prefix"
            ) from None
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ValueError(f"{value[:200]!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value[:200]!r}: a URL prefix must be an absolute http(s) URL")
    return value


Token = Annotated[str, AfterValidator(_token)]
TopicName = Annotated[str, AfterValidator(_topic_name)]
#: A topic name, or a name prefix followed by ``*`` (hub.core.topic_patterns).
TopicPattern = Annotated[str, AfterValidator(check_pattern)]
PlainTopic = Annotated[str, AfterValidator(_plain_topic)]


def _printable(text: str) -> str:
    """One line, whatever a message repeats of a value (a newline in a file name, say)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def describe_error(exc: Exception) -> str:
    """A settings error as one line naming each bad setting by its variable (``RSHUB_X``)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):  # pydantic's ValidationError: one entry per bad field
        parts = []
        for error in errors():
            loc = error.get("loc", ())
            message = str(error.get("msg", "")).removeprefix("Value error, ")
            if not loc:  # a rule across settings: its message names them
                parts.append(message)
                continue
            name = f"{loc[0]} (RSHUB_{str(loc[0]).upper()})"
            # Where in a list or map: an index, or a key (a topic name, never a value).
            name += "".join(f"[{p!r}]" for p in loc[1:] if p != "[key]")
            parts.append(f"{name}: {message}")
        return _printable("; ".join(parts))
    # pydantic-settings' SettingsError: 'error parsing value for field "tokens" from ...'
    message = _printable(" ".join(str(exc).split()))
    field = message.split('field "', 1)[1].split('"', 1)[0] if 'field "' in message else ""
    if field:
        hint = " (lists and maps are JSON, e.g. RSHUB_TOKENS='[\"s3cret\"]')"
        return f"{field} (RSHUB_{field.upper()}): cannot parse the value{hint}"
    return message


class Settings(BaseSettings):
    #: Errors never echo a value: some are secrets (tokens, ``jwt_key``).
    model_config = SettingsConfigDict(
        env_prefix="RSHUB_", extra="ignore", hide_input_in_errors=True
    )

    # -- network -----------------------------------------------------------------------
    #: Address to listen on (a non-loopback bind needs tokens or ``open``).
    host: str = "127.0.0.1"
    #: Port to listen on (0: any free port).
    port: int = Field(8080, ge=0, le=65535)
    #: Public base URL (scheme://host[:port][/prefix]) when the hub sits behind a proxy.
    base_url: Annotated[str, AfterValidator(_base_url)] | None = None
    #: Other base URLs clients may use to reach this hub (``http://hub:8080``): their
    #: ``/topics/...`` URLs name the same topics. Documents link with ``base_url`` (but see
    #: ``alias_links``). Comma-separated or a JSON list in ``RSHUB_ALIAS_URLS``.
    alias_urls: Annotated[list[Annotated[str, AfterValidator(_base_url)]], NoDecode] = Field(
        default_factory=list
    )
    #: Documents fetched by a direct client (no proxy headers) under an alias link under
    #: that alias, so the client can follow them: compose, where the base is the name the
    #: containers use and the host reaches the published port. Off by default: behind a
    #: reverse proxy that sends its upstream's name as ``Host``, public clients would get
    #: internal links.
    alias_links: bool = False
    #: Peers (IPs or networks, ``*`` for any) whose ``X-Forwarded-Host``/``-Proto`` and
    #: ``Forwarded`` headers name one more accepted base URL for their request.
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(default_factory=list)

    #: Hub processes ``rshub serve`` runs on this port (1-256, ``auto``: one per core). Each
    #: serves every route; WebSub deliveries are spread across them.
    workers: int | Literal["auto"] = 1
    #: Bind with ``SO_REUSEPORT`` so several processes share the port (set for the
    #: processes ``--workers`` starts; set it yourself to run more of them by hand).
    reuse_port: bool = False

    #: Open connections at most (WebSocket/SSE clients included); over it, 503 and close.
    #: Keep ``ulimit -n`` above it.
    max_connections: int = Field(10_000, ge=1, le=1_000_000)
    #: A new connection must send complete request headers within this many seconds.
    header_timeout_seconds: float = Field(10.0, gt=0, le=300)
    #: A request body must arrive completely within this many seconds (else 408), counted
    #: from the request's first byte on the lean paths and from its complete head on
    #: aiohttp's (which is told of a request only then); at the default body limit that
    #: asks at least ~350 KB/s of a publisher.
    body_timeout_seconds: float = Field(30.0, gt=0, le=3600)
    #: An idle kept-alive connection (or a next request that is slow to come) is closed
    #: after this many seconds.
    keepalive_timeout_seconds: float = Field(15.0, gt=0, le=3600)

    # -- storage -----------------------------------------------------------------------
    #: An existing Redis; without it ``rshub serve`` starts an embedded redis-server.
    redis_url: str | None = None
    #: Treat ``redis_url`` as one node of a Redis Cluster (a ``redis+cluster://`` URL says
    #: so by itself).
    redis_cluster: bool = False
    #: Where the embedded redis-server keeps its data, password file and lock (no
    #: ``redis_url`` given).
    data_dir: Path = Path("rshub-data")
    #: ``always``, ``everysec`` or ``no``: the embedded Redis's AOF fsync policy.
    appendfsync: str = "everysec"
    #: How long start-up keeps retrying an external Redis that does not answer yet (with
    #: back-off, a log line per attempt) before giving up (0 = try once).
    redis_startup_seconds: float = Field(60.0, ge=0, le=3600)

    # -- publishing --------------------------------------------------------------------
    #: Bearer tokens that may publish to any topic.
    #: Every token (here and below) is 1-4096 visible ASCII characters, without spaces.
    tokens: list[Token] = Field(default_factory=list)
    #: Bearer tokens per topic name: ``{"news": ["t1", "t2"]}``.
    topic_tokens: dict[TopicName, list[Token]] = Field(default_factory=dict)
    #: Allow a non-loopback bind without any token (anyone may publish).
    open: bool = False

    # -- reading and operating ---------------------------------------------------------
    #: Bearer tokens that may read every topic; when set, no topic is readable without one.
    read_tokens: list[Token] = Field(default_factory=list)
    #: Bearer tokens per topic that make the topic private: ``{"news": ["r1"]}``; a key
    #: ``"pri*"`` makes every topic whose name starts with ``pri`` private, readable with its
    #: tokens (a topic may also have tokens of its own).
    topic_read_tokens: dict[TopicPattern, list[Token]] = Field(default_factory=dict)
    #: Bearer token of the ``/admin`` API (without it: loopback clients of an open hub only).
    admin_token: Token | None = None
    #: Largest request body accepted (a publish, a form); larger is 413.
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024, le=50 * 1024 * 1024)
    #: Parse limits of a published document; over one, the publish is 400 naming it.
    #: Changes (entries) per publish; the Sitemaps limit is the maximum.
    publish_max_entries: int = Field(50_000, ge=1, le=50_000)
    #: Attributes on one ``<rs:md>``/``<rs:ln>`` (ResourceSync defines 12; lxml reads
    #: attributes in quadratic time, so thousands would stall parsing).
    publish_max_attributes: int = Field(64, ge=16, le=10_000)
    #: Characters in one attribute value or ``<loc>``/``<lastmod>`` text.
    publish_max_value_chars: int = Field(8192, ge=256, le=1_000_000)
    #: ``<rs:ln>`` elements per entry.
    publish_max_links: int = Field(1024, ge=0, le=50_000)
    #: Bodies up to this size are parsed on the event loop (fast for small documents);
    #: larger ones in a worker pool, so no publish stalls other requests.
    parse_inline_bytes: int = Field(64 * 1024, ge=0, le=50 * 1024 * 1024)
    #: ``process`` (default: parsing is mostly Python holding the GIL, so only a process
    #: keeps the event loop free) or ``thread``.
    parse_pool: Literal["process", "thread"] = "process"
    #: Workers of the parse pool (default: one fewer than the CPUs, at least one).
    parse_workers: int = Field(
        default_factory=lambda: max(1, (os.cpu_count() or 2) - 1), ge=1, le=256
    )
    #: Retention per topic: events older than this many seconds are trimmed (0 = keep).
    retention_seconds: int = Field(7 * DAY, ge=0, le=100 * YEAR)
    #: Retention per topic: at most this many events are kept (0 = no length bound).
    retention_max_events: int = Field(1_000_000, ge=0, le=MAX_EVENTS)
    #: Per-topic overrides of the two retention bounds: ``{"news": 3600}``.
    topic_retention_seconds: dict[TopicName, Annotated[int, Field(ge=0, le=100 * YEAR)]] = Field(
        default_factory=dict
    )
    #: ``{"news": 10000}``: the per-topic override of ``retention_max_events``.
    topic_retention_max_events: dict[TopicName, Annotated[int, Field(ge=0, le=MAX_EVENTS)]] = Field(
        default_factory=dict
    )
    #: How often quiet topics are trimmed (publishes trim their topic anyway).
    retention_sweep_seconds: float = Field(60.0, ge=0.05, le=DAY)
    #: How long an Idempotency-Key is remembered.
    idempotency_seconds: int = Field(DAY, ge=1, le=YEAR)

    # -- WebSub ------------------------------------------------------------------------
    #: WebSub lease when the subscriber asks for none (``hub.lease_seconds``).
    lease_seconds_default: int = Field(10 * DAY, ge=60, le=10 * YEAR)
    #: Shortest and longest lease granted; a request outside is clamped into them (the
    #: shortest may not exceed the longest).
    lease_seconds_min: int = Field(60, ge=1, le=10 * YEAR)
    lease_seconds_max: int = Field(30 * DAY, ge=60, le=10 * YEAR)
    #: Let the hub connect to loopback, private, link-local and other non-public addresses
    #: (callbacks, publish-ping URLs). Off by default, even on a loopback bind: a hub behind
    #: a local reverse proxy is reachable from outside. For development on one machine only.
    allow_private_callbacks: bool = False
    #: Plain WebSub topics, whose content is anything (an HTML page, a feed, text, JSON)
    #: rather than ResourceSync change notifications: the hub keeps each one's latest
    #: content and delivers it whole, with its ``Content-Type``. Each entry is one of this
    #: hub's topic names (``"blog"``), or an ``http://``/``https://`` prefix of other sites'
    #: topic URLs (``"https://blog.example/feeds/"``: every topic URL that starts with it;
    #: never one of this hub's own topics, which are named).
    websub_topics: list[PlainTopic] = Field(default_factory=list)
    #: Seconds a verification GET or a publish-ping fetch may take, body included.
    verify_timeout: float = Field(10.0, gt=0, le=120)
    #: Seconds a delivery POST may take to its answer's head (and again to drain its body).
    delivery_timeout: float = Field(10.0, gt=0, le=120)
    #: Most changes, and most bytes, in one delivery body.
    delivery_batch_max_changes: int = Field(1000, ge=1, le=50_000)
    delivery_batch_max_bytes: int = Field(1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    #: Delivery POSTs in flight at once in this process (also idle connections kept per
    #: callback origin).
    delivery_concurrency: int = Field(256, ge=1, le=10_000)
    #: A failed delivery is retried after about this, doubling (with jitter) per failure up
    #: to ``retry_max_seconds`` (not below the base); ``Retry-After`` is honoured within
    #: that cap.
    retry_base_seconds: float = Field(1.0, ge=0.01, le=DAY)
    retry_max_seconds: float = Field(300.0, ge=0.01, le=30 * DAY)
    #: Consecutive failures after which a subscription is suspended (probed, not deleted).
    suspend_after_failures: int = Field(10, ge=1, le=1_000_000)
    #: How long a hub process's hold on a subscription (and its heartbeat) lasts unless
    #: renewed; renewed every third of it. When a process dies, another resumes its
    #: subscriptions within about 4/3 of this (see docs/scaling.md).
    ownership_lease_seconds: float = Field(3.0, ge=0.3, le=300)
    #: How often every process re-reads the whole set of subscriptions (changes are also
    #: followed as they happen; this is the safety net). Up to six times longer when such
    #: a round is costly (hundreds of thousands of subscriptions): a twentieth of the
    #: process's time at most.
    ownership_reconcile_seconds: float = Field(10.0, ge=0.05, le=3600)

    # -- streams -----------------------------------------------------------------------
    #: How often an idle WebSocket/SSE stream gets a ping or comment (keeps proxies open).
    heartbeat_seconds: float = Field(15.0, ge=0.1, le=300)
    #: Events a WebSocket/SSE client may have queued before it is dropped as too slow.
    client_buffer_events: int = Field(10_000, ge=10, le=10_000_000)
    #: Under load, the longest a live event waits so that each WebSocket/SSE client and
    #: caught-up WebSub subscriber gets more events per write: after a topic's fan-out of
    #: several publishes (they came faster than its writes) that took ``t``, the next one
    #: waits until ``4 t`` has passed, never longer than this (milliseconds). A fan-out of
    #: one publish, or a cheap one, never delays the next. 0 = every pass of the event loop
    #: writes what arrived (least latency, most CPU under load).
    push_delay_max_ms: float = Field(5.0, ge=0, le=1000)
    #: Topics one stream of several topics (``/ws``, ``/events`` with ``topic=`` and
    #: ``topic_prefix=``) may follow: more named, or matching its prefixes when it opens,
    #: is 400 naming this setting; a prefix that comes to match more ends the stream. Each
    #: topic followed is a live feed of the process (on a Redis Cluster, a connection).
    stream_max_topics: int = Field(10_000, ge=1, le=1_000_000)
    #: Longest resume id of a stream of several topics, in bytes: a longer one is 400
    #: naming this setting, and the hub gives out none longer (it keeps ids short; an event
    #: whose id would not fit ends the stream with its resume point). With more than ~7,000,
    #: a client's ``Last-Event-ID`` (or ``since=``) outgrows what proxies pass by default;
    #: the hub's own limits on a request line and header grow with it.
    stream_max_id_bytes: int = Field(6000, ge=256, le=1_000_000)
    #: How often (seconds) a process with streams that follow a topic prefix reads the
    #: topic names for topics first published since: the longest such a topic's first
    #: events wait (they are never missed).
    stream_topic_scan_seconds: float = Field(1.0, ge=0.05, le=3600)

    # -- materialized documents --------------------------------------------------------
    #: A Change List page closes after this many seconds (or at 50,000 entries).
    changelist_page_seconds: int = Field(3600, ge=1, le=YEAR)
    #: A Change List page closes at this many entries (the Sitemaps limit is the maximum).
    changelist_page_entries: int = Field(50_000, ge=1, le=50_000)
    #: How often a background task brings every topic's page boundaries up to date (0 = only
    #: when a document is requested; else at least 0.01). Keep it far below the retention
    #: period.
    changelist_scan_seconds: float = Field(1.0, ge=0, le=3600)
    #: Resource List entries per document; above this the Resource List becomes an index.
    resourcelist_page_entries: int = Field(50_000, ge=1, le=50_000)
    #: A paged Resource List snapshot is reused for this long (while the topic changes).
    resourcelist_snapshot_seconds: int = Field(60, ge=0, le=86_400)
    #: How long the pages of a Resource List snapshot stay fetchable.
    resourcelist_snapshot_ttl_seconds: int = Field(3600, ge=60, le=7 * 86_400)
    #: The longest a reader waits for a document whose build grows with the topic
    #: (seconds): a Resource List or its index, ``changes.xml``. A paged topic's reader
    #: gets the last snapshot at once while the next is built in the background; a reader
    #: of the others gets the earlier version after this wait. With nothing built yet, the
    #: reader gets 503 with ``Retry-After`` (most HTTP clients give up after 30 s, and a
    #: 1,000,000-URI snapshot takes longer to build). A Change List page is sent as it is
    #: built, never waited for whole; a reader of the open page waits at most this long for
    #: a build of its previous version to end (then gets that version).
    document_wait_seconds: float = Field(1.0, ge=0, le=30)
    #: In-process cache of rendered closed Change List pages (0 = no cache).
    document_cache_bytes: int = Field(64 * 1024 * 1024, ge=0, le=4 * 1024**3)

    # -- process ----------------------------------------------------------------------
    #: Young-generation threshold of Python's cyclic GC for ``rshub serve`` (0 = Python's
    #: default of 700). The hub allocates many short-lived objects per request and keeps a
    #: large ring of live events; collecting less often was worth ~20% of WebSocket fan-out
    #: throughput in bench/hub.py. Garbage without cycles is freed at once regardless.
    gc_young_threshold: int = Field(50_000, ge=0, le=1_000_000_000)
    #: Run the event loop on uvloop (libuv) when it is installed (it is a dependency on
    #: Linux and macOS). Socket writes and reads, timers and task switches cost less there:
    #: bench/hub.py measures both loops (``--loop``). ``false`` runs the standard asyncio
    #: loop, e.g. to rule uvloop out when chasing a problem.
    uvloop: bool = True

    # -- logs --------------------------------------------------------------------------
    #: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case).
    log_level: str = "INFO"
    #: ``text`` (for people) or ``json`` (one object per line: time, level, logger,
    #: message, request_id, and any extra fields).
    log_format: Literal["text", "json"] = "text"
    #: One log line per HTTP request (logger ``rshub.access``): method, route, path,
    #: status, duration, request id.
    access_log: bool = False

    # -- secrets: who may read /metrics ------------------------------------------------
    #: Bearer token ``/metrics`` asks for when set (the admin token is accepted too);
    #: unset, ``/metrics`` is public (private topics folded under ``(private)``).
    metrics_token: Token | None = None

    # -- retention holds for WebSub subscribers (no change lost untold) ----------------
    #: Retention does not trim events a WebSub subscription (active or suspended) has yet
    #: to receive, but a topic's stream grows at most this many events beyond
    #: ``retention_max_events`` for it; past that the oldest are trimmed and the subscriber
    #: gets a gap notice (``X-RSHub-Gap``, docs/hub.md). 0 = no hold.
    retention_hold_max_events: int = Field(100_000, ge=0, le=MAX_EVENTS)
    #: Held events older than this many seconds are trimmed anyway (with a gap notice); keep
    #: it above ``retention_seconds`` or the hold never extends the age bound. 0 = no hold.
    retention_hold_seconds: int = Field(14 * DAY, ge=0, le=100 * YEAR)

    # -- dropped stream clients (restart task) -----------------------------------------
    #: How long a WebSocket/SSE client the hub ends (too slow, topic deleted, failed
    #: heartbeat) gets to take its close frame or last event; then its connection is
    #: aborted. Without the bound, a client that stopped reading kept its connection (and
    #: the hub's send buffer for it) forever. A WebSocket client dropped as too slow keeps
    #: its connection (shut for writing, its close frame already in the kernel) as long as
    #: it goes on reading, up to ``LINGER_ROUNDS`` times this (hub.web.lagging_close).
    stream_close_seconds: float = Field(5.0, gt=0, le=300)
    #: A WebSocket client dropped as too slow is told to come back after a wait drawn at
    #: random, per client, between 0 and this many seconds (its close reason's ``retry
    #: after S s``, hub.core.lag_retry), so that the clients one publish storm drops do not
    #: all reconnect, and lag again, at the same instant. 0: come back at once.
    lag_retry_spread_seconds: float = Field(10.0, ge=0, le=3600)

    # -- readers: documents built once per version ----------------------------------------
    #: In-process cache of whole Resource Lists and ``changes.xml`` (plain and gzipped),
    #: each built once per topic version off the event loop and shared by every request
    #: for it (0 = build per version without keeping it; concurrent requests still share
    #: one build). The latest change of each URI behind ``changes.xml`` is kept per topic
    #: up to as much again (least recently read topics out; one is always kept), and so is
    #: the last version built of each topic's open Change List page, which its next version
    #: goes on from (least recently read out).
    built_document_cache_bytes: int = Field(256 * 1024 * 1024, ge=0, le=16 * 1024**3)

    # -- https callbacks (task: hostile callback answers, TLS settings) -----------------
    #: A PEM bundle of CAs trusted for https callbacks and verification requests, in
    #: addition to the system's CAs (for subscribers behind a private CA).
    callback_ca_file: Path | None = None
    #: A PEM client certificate the hub presents to https callbacks that ask for one
    #: (mTLS); its key in the same file or in ``callback_client_key``.
    callback_client_cert: Path | None = None
    #: The PEM private key of ``callback_client_cert`` (if not in that file).
    callback_client_key: Path | None = None

    # -- hand-over and shutdown (high availability) ------------------------------------
    #: How long a delivery worker that stops for a planned reason (its subscription moves
    #: to another process, or this one shuts down) may finish the POST it has in flight and
    #: record its cursor before it is abandoned (then the next owner re-sends that batch).
    handover_grace_seconds: float = Field(1.0, ge=0, le=60)
    #: At shutdown (SIGTERM), how long the open streams get to take their last message
    #: (WebSocket close 1001, SSE ``event: shutdown``) before their connections are cut.
    shutdown_streams_seconds: float = Field(1.0, gt=0, le=60)

    # -- Redis high availability ------------------------------------------------------------
    #: Each publish waits until this many replicas have its changes (Redis ``WAIT``) before
    #: its 202; a publish they do not acknowledge within ``redis_wait_seconds`` answers 503
    #: (stored on the primary, it may or may not survive a failover; retry it with the same
    #: Idempotency-Key). 0 = answer once the primary has them (docs/scaling.md). Only
    #: publishes wait: heartbeats, leases and delivery cursors go through a connection of
    #: their own without ``WAIT``, so deliveries go on while a new primary has no replica.
    redis_wait_replicas: int = Field(0, ge=0, le=64)
    #: How long a publish waits for ``redis_wait_replicas`` acknowledgements.
    redis_wait_seconds: float = Field(1.0, ge=0.001, le=60)

    # -- retry window and dead letters ---------------------------------------------------
    #: How long a failing delivery batch is retried, from its first failure, before it is
    #: moved to the subscription's dead-letter stream and the next batch is tried.
    retry_window_seconds: float = Field(3 * DAY, gt=0, le=10 * YEAR)
    #: How long a subscription may keep failing (429 and 503 do not count) from the first
    #: failure after its last success before it is disabled (no more deliveries; the
    #: subscriber is sent ``hub.mode=denied``) until re-subscribed or resumed.
    disable_after_seconds: float = Field(7 * DAY, gt=0, le=10 * YEAR)
    #: Dead-lettered events kept per subscription; past it the oldest are dropped.
    dead_letter_max_events: int = Field(10_000, ge=1, le=1_000_000)

    # -- signatures, filters, rate limit --------------------------------------------------
    #: After a re-subscription changes ``hub.secret``, deliveries are signed with the old
    #: secret too for this many seconds (Standard Webhooks: both signatures; WebSub's
    #: ``X-Hub-Signature``: the old one until then), so subscribers can roll the new one out.
    secret_overlap_seconds: int = Field(DAY, ge=0, le=30 * DAY)
    #: Default delivery rate limit of every subscription, in deliveries (POSTs) per second
    #: (0 = none); a subscriber's ``hub.rate_limit`` or the admin API overrides it. Events
    #: published faster wait and go out together in bigger batches: none is dropped.
    delivery_rate_per_second: float = Field(100.0, ge=0, le=10_000)
    #: Deliveries sent back to back after a quiet spell, within the default rate limit.
    delivery_rate_burst: int = Field(100, ge=1, le=10_000)

    # -- attempt log and presence -------------------------------------------------------
    #: Delivery attempts kept per subscription (time, status, latency, error, event ids),
    #: shown by ``GET /admin/subscriptions/{id}`` and ``rshub inspect``.
    attempt_log_size: int = Field(50, ge=1, le=1000)
    #: How far (seconds) the ``X-RSHub-Timestamp`` of a subscriber's signed request for its
    #: own record may lie from the hub's clock, either way; older signatures are refused,
    #: and each signature is accepted once.
    self_service_tolerance_seconds: float = Field(300.0, ge=1, le=3600)
    #: How soon (seconds) after a stream client connects or leaves its process reports the
    #: new per-topic counts to Redis (they are refreshed every ownership lease anyway).
    presence_report_seconds: float = Field(0.2, ge=0, le=60)

    # -- browser clients and ping limits ----------------------------------------------
    #: Origins (``https://app.example``, or ``*`` for any) whose pages may read topics and
    #: publish from a browser (CORS), and open WebSockets to the hub. Empty: no CORS
    #: headers at all. Comma-separated or a JSON list in ``RSHUB_CORS_ORIGINS``.
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Key (at least 32 bytes) that signs short-lived read tokens (JWT, HS256; ``rshub
    #: token``). Unset: no signed read token is accepted. A secret: never logged or shown.
    jwt_key: SecretStr | None = None
    #: Longest life (seconds) a signed read token may have left: one whose ``exp`` lies
    #: further ahead (beyond the 10 s clock leeway) is refused (401), so a leaked token
    #: cannot read for years.
    jwt_max_ttl: float = Field(86400.0, gt=0, le=366 * 86400)
    #: How often (seconds) each hub process asks Redis whether the token revocations
    #: changed (one GET; ``POST /admin/revocations``): a revoked token's streams and
    #: subscriptions end within this, on every process. The one that took the revocation
    #: applies it at once.
    revocation_check_seconds: float = Field(0.25, ge=0.05, le=5.0)
    #: Publish pings (``hub.mode=publish``) one publisher may send per second on average,
    #: after a burst of ``ping_burst``; beyond, 429 with ``Retry-After``. 0 = no limit.
    #: Counted once the ping is authorised: per token on a hub with publisher tokens, per
    #: client address on an open hub (the peer's, or what a trusted proxy says it is).
    ping_rate_per_second: float = Field(10.0, ge=0, le=1_000_000)
    ping_burst: int = Field(100, ge=1, le=1_000_000_000)
    #: Publish pings refused for their token (401/403) one client address may send per
    #: second on average, after a burst of ``ping_refusal_burst``; beyond, 429. A budget of
    #: their own, so that nobody's refused pings spend an authorised publisher's. 0 = no
    #: limit.
    ping_refusal_rate_per_second: float = Field(1.0, ge=0, le=1_000_000)
    ping_refusal_burst: int = Field(10, ge=1, le=1_000_000_000)

    # -- lean SSE subscribe ---------------------------------------------------------------
    #: Serve a plain SSE subscribe (``GET /topics/{name}/events`` of an open topic, no
    #: resume point, query or unusual header) without aiohttp's per-request machinery: the
    #: same bytes and behaviour in a fraction of the memory (hub.web.lean_sse). Off: every
    #: request goes through aiohttp.
    lean_sse: bool = True

    # -- lean publish ---------------------------------------------------------------------
    #: Answer a plain publish (``POST /topics/{name}`` over HTTP/1.1, a ``Content-Length``
    #: body of at most ``parse_inline_bytes``, an XML Content-Type, no unusual header) that
    #: succeeds without aiohttp's per-request machinery: the same bytes, metrics and log
    #: line (hub.web.lean_publish); every error still comes from aiohttp's path. Off: every
    #: request goes through aiohttp. Neither lean path runs with ``cors_origins`` set.
    lean_publish: bool = True

    @field_validator("callback_ca_file", "callback_client_cert")
    @classmethod
    def _check_certificate_file(cls, value: Path | None) -> Path | None:
        """Readable, with a PEM certificate: checked now, so a wrong file is a bad setting
        (exit 2 naming it), not a failure to listen."""
        if value is not None:
            tls_files.check_certificates(value)
        return value

    @field_validator("callback_client_key")
    @classmethod
    def _check_key_file(cls, value: Path | None) -> Path | None:
        if value is not None:
            tls_files.check_readable(value)
        return value

    @model_validator(mode="after")
    def _check_client_key_pair(self) -> Settings:
        """The client certificate and its key load together (the key matches)."""
        cert, key = self.callback_client_cert, self.callback_client_key
        if cert is None:
            if key is not None:
                raise ValueError(
                    "callback_client_key (RSHUB_CALLBACK_CLIENT_KEY) is set without "
                    "callback_client_cert (RSHUB_CALLBACK_CLIENT_CERT)"
                )
            return self
        try:
            tls_files.check_key_pair(cert, key)
        except tls_files.KeyPairError as exc:
            if exc.blame == "key":
                raise ValueError(
                    f"callback_client_key (RSHUB_CALLBACK_CLIENT_KEY): {exc.reason}"
                ) from None
            hint = "" if key else " (or name the key's file in RSHUB_CALLBACK_CLIENT_KEY)"
            raise ValueError(
                f"callback_client_cert (RSHUB_CALLBACK_CLIENT_CERT): {exc.reason}{hint}"
            ) from None
        return self

    @field_validator("workers", mode="before")
    @classmethod
    def _check_workers(cls, value: object) -> object:
        """One message for both forms (the union's would name each branch)."""
        if value == "auto":
            return value
        text = value.strip() if isinstance(value, str) else value
        if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) < 4:
            text = int(text)
        if not isinstance(text, int) or isinstance(text, bool) or not 1 <= text <= 256:
            raise ValueError("workers must be 1 to 256, or auto")
        return text

    @field_validator("alias_urls", "forwarded_allow_ips", "cors_origins", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        """``a,b`` or ``["a", "b"]`` from the environment; a list from flags."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("cors_origins")
    @classmethod
    def _check_origins(cls, value: list[str]) -> list[str]:
        return [origin_of(item) for item in value]

    @field_validator("jwt_key")
    @classmethod
    def _check_jwt_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_key(value.get_secret_value())
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if sentinel_url.is_sentinel(value):
            # Its ValueError names what is wrong.
            tls_files.check_url_options(dict(sentinel_url.parse(value).tls_options))
            return value
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018  # raises ValueError for a bad port
        except ValueError as exc:
            raise ValueError(f"not a valid URL ({exc})") from None
        if parts.scheme not in ("redis", "rediss", "unix", "redis+cluster"):
            raise ValueError(
                "must be a redis://, rediss://, unix://, redis+cluster://, redis+sentinel:// or "
                "rediss+sentinel:// URL"
            )
        if parts.scheme != "unix" and not parts.hostname:
            raise ValueError("must name a host (redis://HOST:PORT/DB)")
        if parts.scheme == "unix" and not parts.path:
            raise ValueError("must name a socket path (unix:///path/to/redis.sock)")
        # The first of a repeated option, as redis-py takes it.
        tls_files.check_url_options({k: v[0] for k, v in parse_qs(parts.query).items()})
        return value

    @model_validator(mode="after")
    def _check_ranges(self) -> Settings:
        """Pairs that bound each other: a reversed pair would clamp every value to one end."""
        if self.lease_seconds_min > self.lease_seconds_max:
            raise ValueError(
                "lease_seconds_min (RSHUB_LEASE_SECONDS_MIN) is above lease_seconds_max "
                "(RSHUB_LEASE_SECONDS_MAX)"
            )
        if self.retry_base_seconds > self.retry_max_seconds:
            raise ValueError(
                "retry_base_seconds (RSHUB_RETRY_BASE_SECONDS) is above retry_max_seconds "
                "(RSHUB_RETRY_MAX_SECONDS)"
            )
        return self

    @model_validator(mode="after")
    def _check_redis_topology(self) -> Settings:
        sentinel = sentinel_url.is_sentinel(self.redis_url or "")
        if sentinel and self.redis_cluster:
            raise ValueError(
                "redis_cluster (RSHUB_REDIS_CLUSTER) cannot be combined with a "
                "redis+sentinel:// redis_url: a Cluster fails over by itself"
            )
        if self.redis_wait_replicas and self.redis_url is None:
            raise ValueError(
                "redis_wait_replicas (RSHUB_REDIS_WAIT_REPLICAS) needs a redis_url "
                "(RSHUB_REDIS_URL): the embedded Redis has no replicas"
            )
        return self

    @field_validator("appendfsync")
    @classmethod
    def _check_fsync(cls, value: str) -> str:
        if value not in {"always", "everysec", "no"}:
            raise ValueError("appendfsync must be always, everysec or no")
        return value

    @field_validator("changelist_scan_seconds")
    @classmethod
    def _check_scan(cls, value: float) -> float:
        if 0 < value < 0.01:  # a scan of every topic hundreds of times a second
            raise ValueError("changelist_scan_seconds must be 0 (off) or at least 0.01")
        return value

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags, then ``RSHUB_*`` variables. No ``.env`` source: none is configured, so it
        read nothing, but walked every field again (a third of each start's settings)."""
        return init_settings, env_settings, file_secret_settings

    @property
    def public_url(self) -> str:
        """The hub URL as others see it (no trailing slash)."""
        if self.base_url:
            return self.base_url.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def binds_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

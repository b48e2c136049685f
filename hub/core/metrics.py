"""The hub's Prometheus series, defined once, and the ``/metrics`` exposition.

Two kinds of series:

* **Live series** (counters, histograms, the live-client gauge) are updated where things
  happen, by one-line calls from the request and delivery paths. Counters only go up: a
  subscription that ends takes nothing away from ``rshub_delivered_changes_total``. An
  accepted publish's updates are summed in plain numbers and added before each read
  (:class:`_Tally`): a scrape still counts every publish answered before it.
* **Scrape-time series** (topics, stream lengths, subscriptions by state, lag) are read from
  Redis at each scrape (:class:`hub.core.overview.Overview`), so every hub process reports the
  same values. Label cardinality is bounded: the top :data:`TOP_N` topics or subscriptions
  are labelled, the rest folded into one ``(others)`` series. A subscription is labelled by
  its id, never its callback URL; private topics the scraper may not read are folded into
  one ``(private)`` series.

Several hub processes: with ``PROMETHEUS_MULTIPROC_DIR`` set (to an empty directory, before
the processes start) the live series are shared through files in it and any process's
``/metrics`` reports the sum over all of them (prometheus_client's multiprocess mode).
Without it, each process reports its own live series.

prometheus_client is imported only by :func:`load` (the runtime calls it a second after the
start, ``/metrics`` at once): until then each live series is a stand-in that keeps what is
done to it, replayed into the real series then, so a restart serves ~15 ms sooner and the
counters still count from the first request.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from hub.core.events import Event
from hub.core.overview import OTHERS, Overview, SubscriptionRow, TopicRow, top
from hub.core.presence import TopicPresence

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

#: Topics or subscriptions labelled by name in scrape-time series; the rest are folded.
TOP_N = 20

#: The label standing for every private topic the scraper may not read.
PRIVATE = "(private)"

#: The environment variable that switches prometheus_client to multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)


class Count(Protocol):
    """A counter as the instrumentation calls use it (prometheus_client's, or a stand-in)."""

    def labels(self, *values: str) -> Count: ...

    def inc(self, amount: float = 1) -> None: ...


class Level(Count, Protocol):
    """A gauge as the instrumentation calls use it."""

    def labels(self, *values: str) -> Level: ...

    def dec(self, amount: float = 1) -> None: ...


class Timing(Protocol):
    """A histogram as the instrumentation calls use it."""

    def labels(self, *values: str) -> Timing: ...

    def observe(self, amount: float) -> None: ...


class _Pending:
    """A series before :func:`load`: it keeps what is done to it, and :func:`load` replays
    that into the prometheus_client series, so nothing counted before is lost. One kept by
    a caller past :func:`load` passes its calls on to the real series."""

    __slots__ = ("calls", "name", "values")

    def __init__(self, name: str, calls: list[_Call], values: tuple[str, ...] = ()) -> None:
        self.name, self.calls, self.values = name, calls, values

    def labels(self, *values: str) -> _Pending:
        return _Pending(self.name, self.calls, values)

    def inc(self, amount: float = 1) -> None:
        self._do("inc", amount)

    def dec(self, amount: float = 1) -> None:
        self._do("dec", amount)

    def observe(self, amount: float) -> None:
        self._do("observe", amount)

    def _do(self, method: str, amount: float) -> None:
        if not _loaded:
            self.calls.append((self.values, method, amount))
            return
        real = globals()[self.name]
        getattr(real.labels(*self.values) if self.values else real, method)(amount)


_Call = tuple[tuple[str, ...], str, float]


# The series, stand-ins until load(): prometheus_client (with the http.server, wsgiref and
# urllib it imports for its exposition) is not on the way to serving (start-up time).
PUBLISHES: Count = _Pending("PUBLISHES", [])
CHANGES_ACCEPTED: Count = _Pending("CHANGES_ACCEPTED", [])
INGESTED_BYTES: Count = _Pending("INGESTED_BYTES", [])
PUBLISH_SECONDS: Timing = _Pending("PUBLISH_SECONDS", [])
DELIVERIES: Count = _Pending("DELIVERIES", [])
DELIVERED_CHANGES: Count = _Pending("DELIVERED_CHANGES", [])
DELIVERY_LATENCY: Timing = _Pending("DELIVERY_LATENCY", [])
STREAM_MESSAGES: Count = _Pending("STREAM_MESSAGES", [])
STREAM_CLIENTS: Level = _Pending("STREAM_CLIENTS", [])
HTTP_SECONDS: Timing = _Pending("HTTP_SECONDS", [])
REDIS_ERRORS: Count = _Pending("REDIS_ERRORS", [])
DELIVERY_GAPS: Count = _Pending("DELIVERY_GAPS", [])

_loaded = False


def _define() -> dict[str, Any]:
    from prometheus_client import Counter, Gauge, Histogram

    return {
        "PUBLISHES": Counter(
            "rshub_publishes",
            "Publish requests by result (accepted, replayed, 4xx, 5xx).",
            ["result"],
        ),
        "CHANGES_ACCEPTED": Counter("rshub_changes_accepted", "Changes stored by publishes."),
        "INGESTED_BYTES": Counter("rshub_ingested_bytes", "Bytes of publish bodies stored."),
        "PUBLISH_SECONDS": Histogram(
            "rshub_publish_duration_seconds",
            "Time to handle a publish request.",
            buckets=_LATENCY_BUCKETS,
        ),
        "DELIVERIES": Counter(
            "rshub_deliveries",
            "WebSub delivery attempts by outcome (2xx, retry, 410, suspended, dead-letter, "
            "disabled).",
            ["outcome"],
        ),
        "DELIVERED_CHANGES": Counter(
            "rshub_delivered_changes", "Changes delivered to callbacks (2xx)."
        ),
        "DELIVERY_LATENCY": Histogram(
            "rshub_delivery_latency_seconds",
            "Per delivery: from the publish of its oldest change (the event id's time) to the "
            "callback's 2xx.",
            buckets=_LATENCY_BUCKETS,
        ),
        "STREAM_MESSAGES": Counter(
            "rshub_stream_messages",
            "WebSocket messages and SSE writes sent, by transport.",
            ["transport"],
        ),
        "STREAM_CLIENTS": Gauge(
            "rshub_stream_clients",
            "Live WebSocket/SSE clients, by transport.",
            ["transport"],
            multiprocess_mode="livesum",
        ),
        "HTTP_SECONDS": Histogram(
            "rshub_http_request_duration_seconds",
            "HTTP requests by method, route pattern and status (streams: the connection's life).",
            ["method", "route", "status"],
            buckets=_LATENCY_BUCKETS,
        ),
        "REDIS_ERRORS": Counter("rshub_redis_errors", "Redis commands that failed (any caller)."),
        "DELIVERY_GAPS": Counter(
            "rshub_delivery_gaps",
            "WebSub deliveries that told a subscriber retention trimmed events it had not "
            "received (X-RSHub-Gap), by topic.",
            ["topic"],
        ),
    }


def import_library() -> None:
    """Import prometheus_client (the slow part of :func:`load`; safe in any thread)."""
    import prometheus_client  # noqa: F401


def load() -> None:
    """Define the prometheus_client series and replay what the stand-ins kept (once).

    Call it on the thread that updates the series (the event loop's): a call made there
    between the replay and the swap would be lost. The runtime calls it soon after the hub
    serves, ``/metrics`` before it answers, and :func:`exposition` itself.
    """
    global _loaded
    if _loaded:
        return
    _TALLY.owner = threading.get_ident()
    if os.environ.get(MULTIPROC_ENV):
        _TALLY.direct = True  # another process's scrape reads these series' files
    else:
        from prometheus_client import REGISTRY

        REGISTRY.register(_Flush())  # before the series: a collect reads them flushed
    series = _define()
    for name, real in series.items():
        stand_in = globals()[name]
        assert isinstance(stand_in, _Pending)
        for values, method, amount in stand_in.calls:
            getattr(real.labels(*values) if values else real, method)(amount)
    globals().update(series)
    _cache_children()
    if not _adds_in_place(series["PUBLISH_SECONDS"]):
        _TALLY.direct = True  # a prometheus_client laid out otherwise: observe() each
    _loaded = True
    flush()


def _adds_in_place(histogram: Any) -> bool:
    """The histogram's sum and buckets are values :func:`flush` can add to (as
    prometheus_client 0.20-0.26 keeps them)."""
    buckets = getattr(histogram, "_buckets", None)
    return (
        hasattr(getattr(histogram, "_sum", None), "inc")
        and isinstance(buckets, list)
        and len(buckets) == len(_LATENCY_BUCKETS) + 1
        and all(hasattr(b, "inc") for b in buckets)
    )


def loaded() -> bool:
    return _loaded


def _cache_children() -> None:
    # Labelled children looked up once: ``labels()`` costs more than the ``inc()`` itself,
    # and these are called per request, per delivery and per stream message.
    global _PUBLISHES, _DELIVERIES, _STREAM_MESSAGES, _STREAM_CLIENTS
    _PUBLISHES = {r: PUBLISHES.labels(r) for r in ("accepted", "replayed", "4xx", "5xx")}
    _DELIVERIES = {
        o: DELIVERIES.labels(o)
        for o in ("2xx", "retry", "410", "suspended", "dead-letter", "disabled")
    }
    _STREAM_MESSAGES = {t: STREAM_MESSAGES.labels(t) for t in ("ws", "sse")}
    _STREAM_CLIENTS = {t: STREAM_CLIENTS.labels(t) for t in ("ws", "sse")}
    _HTTP_SECONDS.clear()


_PUBLISHES: dict[str, Count] = {}
_DELIVERIES: dict[str, Count] = {}
_STREAM_MESSAGES: dict[str, Count] = {}
_STREAM_CLIENTS: dict[str, Level] = {}
_HTTP_SECONDS: dict[tuple[str, str, int], Timing] = {}
_cache_children()

#: This process's live clients, readable without prometheus_client internals.
_clients: dict[str, int] = {"ws": 0, "sse": 0}

#: The one request whose publish metrics are tallied: a plain publish's 202.
_TALLIED_ROUTE = "/topics/{name}"


class _Tally:
    """Accepted publishes' five series updates kept as plain sums, added to the series by
    :func:`flush` before each read of them (measured: prometheus_client's locked updates
    were ~3% of a publish's CPU). Updated and flushed on the loop's thread only; with
    several processes (:data:`MULTIPROC_ENV`), where another process's scrape reads
    these series' files, the updates go straight to the series."""

    __slots__ = ("accepted", "buckets", "bytes", "changes", "direct", "owner", "seconds")

    def __init__(self) -> None:
        self.direct = False
        #: The thread that updates the series (the event loop's), set by :func:`load`.
        self.owner = 0
        self.reset()

    def reset(self) -> None:
        self.accepted = self.changes = self.bytes = 0
        #: ``POST /topics/{name}`` 202s: the time summed, and how many fell in each
        #: bucket of ``_LATENCY_BUCKETS`` (the last: beyond them, ``+Inf``).
        self.seconds = 0.0
        self.buckets = [0] * (len(_LATENCY_BUCKETS) + 1)


_TALLY = _Tally()


def flush() -> None:
    """Add what :class:`_Tally` kept to the series (on the loop's thread: the ``/metrics``
    handler calls it before rendering in a thread; a read of the registry on the loop's
    thread flushes first by itself, see :class:`_Flush`)."""
    tally = _TALLY
    if not _loaded or not (tally.accepted or tally.seconds or any(tally.buckets)):
        return
    accepted, changes, size = tally.accepted, tally.changes, tally.bytes
    seconds, buckets = tally.seconds, tally.buckets
    tally.reset()
    if accepted:
        _PUBLISHES["accepted"].inc(accepted)
        CHANGES_ACCEPTED.inc(changes)
        INGESTED_BYTES.inc(size)
    if any(buckets):
        for timing in (PUBLISH_SECONDS, _http_child("POST", _TALLIED_ROUTE, 202)):
            # prometheus_client's Histogram has no many-at-once observe: its values are
            # added to as observe() adds to them (tests/hub/test_metrics_tally.py holds
            # the result to observe()'s, value by value).
            real: Any = timing
            real._sum.inc(seconds)
            for value, count in zip(real._buckets, buckets, strict=True):
                if count:
                    value.inc(count)


class _Flush:
    """Registered before the series: any read of the registry on the loop's thread (a test,
    say) sees them flushed. (Elsewhere it leaves them: the loop's thread owns the tally.)"""

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        if threading.get_ident() == _TALLY.owner:
            flush()
        return []


# -- one-line instrumentation calls ---------------------------------------------------------


def published(body_bytes: int, accepted: int, replayed: bool) -> None:
    tally = _TALLY
    if replayed or tally.direct:
        _PUBLISHES["replayed" if replayed else "accepted"].inc()
        if not replayed:
            CHANGES_ACCEPTED.inc(accepted)
            INGESTED_BYTES.inc(body_bytes)
        return
    tally.accepted += 1
    tally.changes += accepted
    tally.bytes += body_bytes


def publish_timed(method: str, route: str, status: int, seconds: float) -> None:
    """A publish's request metrics: :func:`http_request` and ``PUBLISH_SECONDS``."""
    tally = _TALLY
    if status != 202 or route != _TALLIED_ROUTE or method != "POST" or tally.direct:
        http_request(method, route, status, seconds)
        PUBLISH_SECONDS.observe(seconds)
        return
    tally.seconds += seconds
    tally.buckets[bisect_left(_LATENCY_BUCKETS, seconds)] += 1


def publish_failed(status: int) -> None:
    _PUBLISHES["5xx" if status >= 500 else "4xx"].inc()


def delivered(batch: Sequence[Event], now: float | None = None) -> None:
    """A callback answered 2xx for ``batch``: count it, and observe its latency once.

    One observation per delivery (its oldest change's age), not per change: a histogram
    observation costs microseconds, and a 100-change batch to 100 callbacks made them a
    third of the hub's delivery time (py-spy, bench/hub.py).
    """
    now_ms = (time.time() if now is None else now) * 1000
    _DELIVERIES["2xx"].inc()
    DELIVERED_CHANGES.inc(len(batch))
    DELIVERY_LATENCY.observe(max(0.0, (now_ms - batch[0].key[0]) / 1000))


def delivery_outcome(outcome: str) -> None:
    """``retry``, ``410``, ``suspended``, ``dead-letter`` or ``disabled``."""
    _DELIVERIES[outcome].inc()


def delivery_gap(topic: str) -> None:
    """A gap notice was delivered (rare: no cached child needed)."""
    DELIVERY_GAPS.labels(topic).inc()


def stream_messages(transport: str, count: int = 1) -> None:
    """``count`` messages sent (one batch fanned out to ``count`` clients counts once)."""
    _STREAM_MESSAGES[transport].inc(count)


def client_connected(transport: str) -> None:
    _clients[transport] = _clients.get(transport, 0) + 1
    _STREAM_CLIENTS[transport].inc()


def client_disconnected(transport: str) -> None:
    _clients[transport] = _clients.get(transport, 0) - 1
    _STREAM_CLIENTS[transport].dec()


def live_clients() -> dict[str, int]:
    """This process's live stream clients by transport."""
    return dict(_clients)


def redis_error() -> None:
    REDIS_ERRORS.inc()


def http_request(method: str, route: str, status: int, seconds: float) -> None:
    _http_child(method, route, status).observe(seconds)


def _http_child(method: str, route: str, status: int) -> Timing:
    key = (method, route, status)
    child = _HTTP_SECONDS.get(key)
    if child is None:  # bounded: methods x route patterns x statuses
        child = _HTTP_SECONDS[key] = HTTP_SECONDS.labels(method, route, str(status))
    return child


def process_exited(pid: int) -> None:
    """In multiprocess mode, drop a dead worker's live gauges (call from its parent)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


# -- scrape-time series ---------------------------------------------------------------------


def overview_families(
    overview: Overview, n: int = TOP_N, visible: Callable[[str], bool] | None = None
) -> Iterator[Metric]:
    """The scrape-time series for ``overview``; at most ``n`` + 2 label sets each.

    A subscription is labelled by its id (:func:`hub.core.placement.subscription_id`), never by
    its callback URL (whose query string may carry a key). Topics for which ``visible``
    is false (private ones the scraper may not read) are summed under :data:`PRIVATE`.
    """
    from prometheus_client.core import GaugeMetricFamily

    yield GaugeMetricFamily(
        "rshub_topics", "Topics that have been published to.", len(overview.topics)
    )
    lengths = GaugeMetricFamily(
        "rshub_stream_length",
        f"Events retained per topic (top {n}; the rest summed; unreadable private topics "
        f"summed under {PRIVATE}).",
        labels=["topic"],
    )
    topics: list[TopicRow] = []
    hidden: list[TopicRow] = []
    for topic in overview.topics:
        (topics if visible is None or visible(topic.name) else hidden).append(topic)
    shown, rest = top(topics, n, key=lambda t: (t.length,))
    for row in shown:
        lengths.add_metric([row.name], row.length)
    if rest:
        lengths.add_metric([OTHERS], sum(t.length for t in rest))
    if hidden:
        lengths.add_metric([PRIVATE], sum(t.length for t in hidden))
    yield lengths

    states = GaugeMetricFamily(
        "rshub_subscriptions", "WebSub subscriptions by state.", labels=["state"]
    )
    for state, count in sorted(overview.subscriptions_by_state().items()):
        states.add_metric([state], count)
    yield states

    labels = ["topic", "subscription"]
    lag_events = GaugeMetricFamily(
        "rshub_subscription_lag_events",
        f"Events not yet delivered, per subscription id (top {n} by lag; the rest summed).",
        labels=labels,
    )
    lag_seconds = GaugeMetricFamily(
        "rshub_subscription_lag_seconds",
        f"Age of the oldest undelivered event (top {n} by lag; the rest: their maximum).",
        labels=labels,
    )
    subs: list[SubscriptionRow] = []
    hidden_subs: list[SubscriptionRow] = []
    for sub in overview.subscriptions:
        (subs if visible is None or visible(sub.topic) else hidden_subs).append(sub)
    shown_subs, rest_subs = top(subs, n, key=lambda s: (s.lag_seconds, s.lag_events))
    for sub in shown_subs:
        lag_events.add_metric([sub.topic, sub.id], sub.lag_events)
        lag_seconds.add_metric([sub.topic, sub.id], sub.lag_seconds)
    for label, folded in ((OTHERS, rest_subs), (PRIVATE, hidden_subs)):
        if folded:
            lag_events.add_metric([label, label], sum(s.lag_events for s in folded))
            lag_seconds.add_metric([label, label], max(s.lag_seconds for s in folded))
    yield lag_events
    yield lag_seconds
    yield _presence_family(overview, n, visible)


def _presence_family(
    overview: Overview, n: int, visible: Callable[[str], bool] | None
) -> GaugeMetricFamily:
    """Per topic (top ``n`` by total; the rest and unreadable private ones folded): stream
    clients over every hub process and WebSub subscriptions by state."""
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(
        "rshub_topic_clients",
        f"Per topic: live WebSocket (ws) and SSE clients over every hub process, and WebSub "
        f"subscriptions by state (websub_<state>); top {n} topics, the rest summed, "
        f"unreadable private topics summed under {PRIVATE}.",
        labels=["topic", "kind"],
    )
    rows: list[tuple[str, TopicPresence]] = []
    hidden: list[TopicPresence] = []
    for topic, presence in overview.presence.items():
        if visible is None or visible(topic):
            rows.append((topic, presence))
        else:
            hidden.append(presence)
    shown, rest = top(rows, n, key=lambda row: (row[1].total,))
    groups = [(topic, [presence]) for topic, presence in shown]
    groups += [
        (label, folded)
        for label, folded in ((OTHERS, [p for _, p in rest]), (PRIVATE, hidden))
        if folded
    ]
    for label, members in groups:
        kinds: dict[str, int] = {"ws": 0, "sse": 0}
        for presence in members:
            kinds["ws"] += presence.ws
            kinds["sse"] += presence.sse
            for state, count in presence.websub.items():
                kinds[f"websub_{state}"] = kinds.get(f"websub_{state}", 0) + count
        for kind, count in kinds.items():
            family.add_metric([label, kind], count)
    return family


def exposition(overview: Overview | None, visible: Callable[[str], bool] | None = None) -> bytes:
    """The ``/metrics`` body: live series (this process's, or every process's in
    multiprocess mode) followed by the scrape-time series of ``overview`` (topics not
    ``visible`` folded under :data:`PRIVATE`)."""
    from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
    from prometheus_client.registry import Collector

    load()
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        live = generate_latest(registry)
    else:
        live = generate_latest(REGISTRY)
    if overview is None:
        return live

    class Families(Collector):
        def __init__(self, families: Iterable[Metric]) -> None:
            self.families = list(families)

        def collect(self) -> Iterable[Metric]:
            return self.families

    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(Families(overview_families(overview, visible=visible)))
    return live + generate_latest(scrape)

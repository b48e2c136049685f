"""What an operator looks at: the hub's state at one moment, as plain data.

Built by :mod:`hub.web.admin` from Redis (so every hub process reports the same topics,
subscriptions and live clients), then shown two ways: as Prometheus series
(:mod:`hub.core.metrics`) and as the dashboard's JSON. Both need bounded size on a hub with
thousands of topics or subscriptions, so the ranking and folding lives here, once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from pydantic import ConfigDict, with_config

from hub.core.presence import TopicPresence

#: How the dashboard's JSON shows it (``asdict``: every field, no other), which its schema
#: in the OpenAPI document (hub.core.openapi) says.
_AS_SENT = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)

#: The label standing for everything below the top N.
OTHERS = "(others)"

T = TypeVar("T")


@with_config(_AS_SENT)
@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    #: Events retained in the topic's stream (``XLEN``).
    length: int
    #: Changes ever accepted for the topic (a counter; a rate is its difference over time).
    published: int
    last_id: str | None
    last_publish_ms: int | None


@with_config(_AS_SENT)
@dataclass(frozen=True, slots=True)
class SubscriptionRow:
    topic: str
    callback: str
    #: :func:`hub.core.placement.subscription_id`: the name ``/metrics`` shows instead of the
    #: callback URL.
    id: str
    state: str
    failures: int
    last_error: str | None
    expires_at: float
    cursor: str | None
    #: Events after the cursor, counted up to :data:`lag_cap` (``lag_capped`` says if hit).
    lag_events: int
    lag_capped: bool
    #: Age of the oldest undelivered event (0 when nothing is pending).
    lag_seconds: float
    #: Gap notices delivered (retention trimmed events it never got; see hub.live.delivery).
    gaps: int = 0


@with_config(_AS_SENT)
@dataclass(frozen=True, slots=True)
class Overview:
    topics: list[TopicRow]
    subscriptions: list[SubscriptionRow]
    #: Live stream clients over every hub process, by transport (``ws``, ``sse``): the
    #: sum of ``presence`` (:func:`hub.core.presence.stream_totals`).
    clients: dict[str, int]
    redis_ok: bool
    version: str
    generated_ms: int
    notes: list[str] = field(default_factory=list)
    #: Per topic: stream clients over every hub process, WebSub subscriptions by state.
    presence: dict[str, TopicPresence] = field(default_factory=dict)

    def subscriptions_by_state(self) -> dict[str, int]:
        counts = {"active": 0, "suspended": 0, "disabled": 0}
        for sub in self.subscriptions:
            counts[sub.state] = counts.get(sub.state, 0) + 1
        return counts

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def top(
    rows: Sequence[T], n: int, key: Callable[[T], tuple[float, ...]]
) -> tuple[list[T], list[T]]:
    """The ``n`` rows with the largest ``key`` (ties keep input order), and the rest."""
    ranked = sorted(rows, key=key, reverse=True)
    return ranked[:n], ranked[n:]


def lag_seconds(first_pending_ms: int | None, now_ms: int) -> float:
    """How long the oldest undelivered event has waited (an event id's ms is its publish
    time), never negative (clocks of several hub processes may disagree a little)."""
    if first_pending_ms is None:
        return 0.0
    return max(0.0, (now_ms - first_pending_ms) / 1000)

"""Who is connected to each topic: WebSocket and SSE clients, WebSub subscriptions by state.

Stream clients are counted by each hub process where they connect and leave
(:class:`StreamCounts`, never on the write path); each process reports its counts to Redis
with an expiry (:mod:`hub.live.presence`) and readers sum every live process's
(:mod:`hub.store.presence`), so every process shows the same totals. WebSub subscriptions
are read from their records. Plain data here; shown by the admin API, the dashboard and
``/metrics`` (top topics labelled, the rest folded, as for every topic series).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import ConfigDict, with_config

#: How the dashboard's JSON and the admin API show it (``asdict``: every field, no other),
#: which its schema in the OpenAPI document (hub.core.openapi) says.
_AS_SENT = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)

#: Stream transports counted.
TRANSPORTS = ("ws", "sse")


@with_config(_AS_SENT)
@dataclass(frozen=True, slots=True)
class TopicPresence:
    #: Live WebSocket and SSE clients, over every hub process.
    ws: int = 0
    sse: int = 0
    #: WebSub subscriptions by state (``active``, ``suspended``, ...).
    websub: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.ws + self.sse + sum(self.websub.values())


def websub_by_state(states: Iterable[str]) -> dict[str, int]:
    counts = {"active": 0, "suspended": 0}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return counts


class StreamCounts:
    """This process's live stream clients per (topic, transport); ``on_change`` is called
    after each change (the reporter's wake-up)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.on_change: Callable[[], None] | None = None

    def connected(self, topic: str, transport: str) -> None:
        key = (topic, transport)
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.on_change is not None:
            self.on_change()

    def disconnected(self, topic: str, transport: str) -> None:
        key = (topic, transport)
        left = self.counts.get(key, 0) - 1
        if left > 0:
            self.counts[key] = left
        else:
            self.counts.pop(key, None)
        if self.on_change is not None:
            self.on_change()

    def snapshot(self) -> dict[tuple[str, str], int]:
        return dict(self.counts)


def summed(
    reports: Iterable[dict[tuple[str, str], int]], websub: dict[str, dict[str, int]]
) -> dict[str, TopicPresence]:
    """Every process's stream counts summed per topic, with each topic's WebSub counts."""
    streams: dict[str, dict[str, int]] = {}
    for report in reports:
        for (topic, transport), count in report.items():
            if transport in TRANSPORTS and count > 0:
                per = streams.setdefault(topic, {})
                per[transport] = per.get(transport, 0) + count
    out: dict[str, TopicPresence] = {}
    for topic in sorted(set(streams) | set(websub)):
        per = streams.get(topic, {})
        states = websub.get(topic) or websub_by_state(())
        out[topic] = TopicPresence(per.get("ws", 0), per.get("sse", 0), states)
    return out


def stream_totals(presence: Mapping[str, TopicPresence]) -> dict[str, int]:
    """Live stream clients by transport over every topic of ``presence`` (so over every hub
    process): the dashboard's header badge."""
    return {
        transport: sum(getattr(p, transport) for p in presence.values()) for transport in TRANSPORTS
    }

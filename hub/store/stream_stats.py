"""Counts read from the topic streams for operators: lengths, totals, and backlogs.

Read at scrape or dashboard time, never on the publish path. Each call is one pipelined
round trip per topic at most; counting the events after a position happens inside Redis
(``scripts/backlog.lua``), so no event is sent back, and is capped so that a subscriber
millions of events behind costs a bounded amount of work.
"""

from __future__ import annotations

from dataclasses import dataclass

from hub.core.overview import TopicRow
from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe

#: Events counted after a position at most (a backlog of this many means "at least").
BACKLOG_CAP = 10_000
#: Events counted per scrape over all positions: a script blocks Redis while it counts, so
#: with many subscriptions each one's count is capped lower (never below 100).
BACKLOG_BUDGET = 200_000


def backlog_cap(positions: int) -> int:
    """The per-position cap that keeps one scrape within :data:`BACKLOG_BUDGET`."""
    return max(100, min(BACKLOG_CAP, BACKLOG_BUDGET // max(1, positions)))


@dataclass(frozen=True, slots=True)
class Backlog:
    """Events after one position: how many (up to the cap) and the first one's id."""

    events: int
    capped: bool
    first_id: str | None


class StreamStats:
    def __init__(self, redis: Client, script_pipe: ScriptPipe) -> None:
        self.redis = redis
        self.scripts = script_pipe

    async def topic_rows(self, topics: list[str]) -> list[TopicRow]:
        """Length, publish total, last id and last publish time of each topic."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in topics:
                pipe.xlen(keys.events(name))
                pipe.hmget(
                    keys.topic_meta(name), [keys.PUBLISHED, keys.LAST_ID, keys.LAST_PUBLISH_MS]
                )
            replies = await pipe.execute()
        rows = []
        for i, name in enumerate(topics):
            length, (published, last_id, last_ms) = replies[2 * i], replies[2 * i + 1]
            rows.append(
                TopicRow(
                    name=name,
                    length=int(length),
                    published=int(published) if published else 0,
                    last_id=keys.optional_text(last_id),
                    last_publish_ms=int(last_ms) if last_ms else None,
                )
            )
        return rows

    async def backlogs(
        self, topic: str, positions: list[str], cap: int = BACKLOG_CAP
    ) -> list[Backlog]:
        """For each position (an event id), the events of ``topic`` after it."""
        if not positions:
            return []
        replies = await self.scripts.run(scripts.BACKLOG, [keys.events(topic)], [cap, *positions])
        out = []
        for count, first in replies:
            first_text = keys.text(first)
            out.append(Backlog(int(count), int(count) >= cap, first_text or None))
        return out

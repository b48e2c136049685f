"""Counts read from the topic streams for operators: lengths, totals, and backlogs.

Read at scrape or dashboard time, never on the publish path. Counting the events after a
position happens inside Redis (``scripts/backlog.lua``), so no event is sent back, and is
capped so that a subscriber millions of events behind costs a bounded amount of work. A
script holds Redis while it counts, so one call reads at most :data:`BACKLOG_CHUNK`
entries, and the calls are awaited one by one (pipelined, Redis would run them back to
back all the same), other clients' commands in between.
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
#: Entries one script call reads at most, over all positions (~3 ms of Redis; a whole
#: scrape's 200,000 in one call held Redis ~0.5 s before 2026-11-25).
BACKLOG_CHUNK = 1_000
#: Positions sent to one script call at most (the budget reaches only some of them).
BACKLOG_POSITIONS = 200


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
            # One topic's damaged keys (a WRONGTYPE) leave its row empty, not the listing.
            replies = await pipe.execute(raise_on_error=False)
        rows = []
        for name, group in zip(topics, keys.per_topic(replies, 2), strict=True):
            length, (published, last_id, last_ms) = group or (0, (None, None, None))
            rows.append(
                TopicRow(
                    name=name,
                    length=int(length),
                    published=keys.count(published),
                    last_id=keys.shown_text(last_id),
                    last_publish_ms=keys.count(last_ms) or None,
                )
            )
        return rows

    async def backlogs(
        self, topic: str, positions: list[str], cap: int = BACKLOG_CAP
    ) -> list[Backlog]:
        """For each position (an event id), the events of ``topic`` after it."""
        counted = [0] * len(positions)
        first: list[str | None] = [None] * len(positions)
        after = list(positions)
        pending = list(range(len(positions)))
        while pending:
            sent = pending[:BACKLOG_POSITIONS]
            args: list[str | int] = [BACKLOG_CHUNK]
            for i in sent:
                args += [after[i], cap - counted[i]]
            replies = await self.scripts.run(scripts.BACKLOG, [keys.events(topic)], args)
            still = pending[len(replies) :]
            for i, (count, first_id, last_id, done) in zip(sent, replies, strict=False):
                counted[i] += int(count)
                if first[i] is None:
                    first[i] = keys.text(first_id) or None
                if int(count):
                    after[i] = keys.text(last_id)
                if not int(done):
                    still.append(i)
            pending = sorted(still)
        return [Backlog(counted[i], counted[i] >= cap, first[i]) for i in range(len(positions))]

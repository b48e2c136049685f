"""Each WebSub subscription's dead letters: events not delivered within the retry window.

One Redis stream per subscription (``keys.dead_letters``), one entry per event, bounded
(the oldest are dropped past ``dead_letter_max_events``). A worker moves a batch here and
its cursor past it in one fenced script (``dead_letter.lua``); a replay removes each entry
once its callback took it. The stream goes with its subscription (``delete_subscription``)
and with its topic (it carries the topic's hash tag).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hub.core.events import Event
from hub.core.placement import subscription_id
from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe


@dataclass(frozen=True, slots=True)
class DeadLetter:
    #: The entry's id in the dead-letter stream (what a replay removes).
    entry: str
    #: The event, as it was published.
    event: Event
    #: When it was dead-lettered, and the first failure of its batch (epoch seconds).
    at: float
    since: float
    #: The batch's last error.
    error: str

    def public(self) -> dict[str, object]:
        fields = self.event.fields
        return {
            "entry": self.entry,
            "id": self.event.id,
            "loc": fields.get("loc"),
            "change": fields.get("change"),
            "lastmod": fields.get("lastmod"),
            "dead_lettered_at": self.at,
            "failing_since": self.since,
            "error": self.error,
        }


def _letter(entry: Any, fields: dict[bytes, bytes]) -> DeadLetter:
    def text(name: bytes) -> str:
        return keys.text(fields.get(name, b""))

    def seconds(name: bytes) -> float:
        try:
            return int(text(name)) / 1000
        except ValueError:
            return 0.0

    return DeadLetter(
        keys.text(entry),
        Event(text(b"id"), keys.as_bytes(fields.get(b"e", b"{}"))),
        seconds(b"at"),
        seconds(b"since"),
        text(b"error"),
    )


class DeadLetterStore:
    def __init__(self, redis: Client, scripts: ScriptPipe, max_events: int) -> None:
        self.redis = redis
        self.scripts = scripts
        self.max_events = max_events

    @staticmethod
    def key(topic: str, callback: str) -> str:
        return keys.dead_letters(topic, subscription_id(topic, callback))

    async def bury(
        self,
        topic: str,
        callback: str,
        node: str,
        token: int,
        batch: list[Event],
        *,
        since: float,
        now: float,
        error: str,
    ) -> bool:
        """Move ``batch`` here and the cursor past it; False if the lease is not ours."""
        args: list[Any] = [
            node,
            token,
            callback,
            batch[-1].id,
            self.max_events,
            int(now * 1000),
            int(since * 1000),
            error,
        ]
        for event in batch:
            args.extend((event.id, event.data))
        done = await self.scripts.run(
            scripts.DEAD_LETTER,
            [
                keys.owners(topic),
                keys.cursors(topic),
                keys.holds(topic),
                self.key(topic, callback),
            ],
            args,
        )
        return bool(int(done))

    async def read(
        self, topic: str, callback: str, count: int, after: str | None = None
    ) -> list[DeadLetter]:
        """The oldest ``count`` dead letters (after the entry ``after``, if given)."""
        start = "-" if after is None else f"({after}"
        rows = await self.redis.xrange(self.key(topic, callback), start, "+", count=count)
        return [
            _letter(entry, {keys.as_bytes(k): keys.as_bytes(v) for k, v in (fields or {}).items()})
            for entry, fields in rows or ()
        ]

    async def count(self, topic: str, callback: str) -> int:
        return int(await self.redis.xlen(self.key(topic, callback)))

    async def claim_replay(self, topic: str, callback: str, node: str, seconds: int) -> bool:
        """Take the subscription's replay for ``seconds`` (False: a process has it): a
        replay's POSTs go beside the delivery worker's, and two replays would send the
        same dead letters twice."""
        lock = keys.dead_letter_replay(topic, subscription_id(topic, callback))
        return bool(await self.redis.set(lock, node, nx=True, ex=seconds))

    async def release_replay(self, topic: str, callback: str) -> None:
        await self.redis.delete(keys.dead_letter_replay(topic, subscription_id(topic, callback)))

    async def remove(self, topic: str, callback: str, entries: list[str]) -> int:
        """Remove these entries (delivered by a replay); how many were still there."""
        if not entries:
            return 0
        return int(await self.redis.xdel(self.key(topic, callback), *entries))

"""The topic event store: one Redis stream per topic.

A publish is one Lua script call: every change of the request is XADDed (all or none, since
a script runs atomically), the Resource List fold is updated in the same step, retention is
applied, and the Idempotency-Key is remembered. Doing the per-change work inside Redis keeps
the Python side to one round trip per request, whatever the number of changes.
"""

from __future__ import annotations

import hashlib
import time
from typing import NamedTuple

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from . import keys, replies
from .exceptions import Conflict
from .script_pipe import ScriptPipe

# KEYS: 1 events stream, 2 resources hash, 3 meta hash, [4 idempotency key]
# ARGV: 1 body digest, 2 idempotency ttl, 3 maxlen (0 = none), 4 minid ('' = none),
#       5 now-ms, 6 the changes: "loc NUL change NUL event-json NUL" repeated.
# The changes travel as one argument because encoding thousands of arguments costs the
# client more than the server's work. NUL cannot occur in XML text nor in JSON output.
_APPEND = """
local stream, resources, meta = KEYS[1], KEYS[2], KEYS[3]
if #KEYS > 3 then
  local prev = redis.call('GET', KEYS[4])
  if prev then return {1, prev} end
end
local ids = {}
local packed, pos, find, sub = ARGV[6], 1, string.find, string.sub
while pos <= #packed do
  local a = find(packed, '\0', pos, true)
  local b = find(packed, '\0', a + 1, true)
  local c = find(packed, '\0', b + 1, true)
  local loc, event = sub(packed, pos, a - 1), sub(packed, b + 1, c - 1)
  local id = redis.call('XADD', stream, '*', 'e', event)
  ids[#ids + 1] = id
  if sub(packed, a + 1, b - 1) == 'deleted' then
    redis.call('HDEL', resources, loc)
  else
    redis.call('HSET', resources, loc, id .. ' ' .. event)
  end
  pos = c + 1
end
-- Retention, exact so that 'trimmed_through' names the newest event ever trimmed: a client
-- resuming from an older id is told it has a gap (Redis 6.2 does not report trimmed ids).
local trimmed = false
if ARGV[4] ~= '' then
  -- Look before trimming: XREVRANGE from MINID walks the whole stream on Redis 6.2 when
  -- nothing is older, which is the usual case.
  local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
  local ms = function(id) return tonumber(string.match(id, '^%d+')) end
  if #first > 0 and ms(first[1][1]) < ms(ARGV[4]) then
    local old = redis.call('XRANGE', stream, '-', '(' .. ARGV[4], 'COUNT', 10000)
    if #old == 10000 then
      old = redis.call('XREVRANGE', stream, '(' .. ARGV[4], '-', 'COUNT', 1)
    end
    if #old > 0 then
      trimmed = old[#old][1]
      redis.call('XTRIM', stream, 'MINID', ARGV[4])
    end
  end
end
if ARGV[3] ~= '0' then
  local excess = redis.call('XLEN', stream) - tonumber(ARGV[3])
  if excess > 0 then
    local cut = redis.call('XRANGE', stream, '-', '+', 'COUNT', excess)
    trimmed = cut[#cut][1]
    redis.call('XTRIM', stream, 'MAXLEN', ARGV[3])
  end
end
if trimmed then redis.call('HSET', meta, 'trimmed_through', trimmed) end
local joined = table.concat(ids, ' ')
if #ids > 0 then
  redis.call('HSET', meta, 'last_id', ids[#ids], 'last_publish_ms', ARGV[5])
  redis.call('HSETNX', meta, 'created_ms', ARGV[5])
end
if #KEYS > 3 then redis.call('SET', KEYS[4], ARGV[1] .. '|' .. joined, 'EX', ARGV[2]) end
return {0, joined}
"""


class Change(NamedTuple):
    """One change ready to store: its loc and change type (for the fold) and its JSON."""

    loc: str
    change: str
    event: bytes


class Appended(NamedTuple):
    ids: list[str]
    #: True when an earlier publish with the same Idempotency-Key was found instead.
    replayed: bool


class EventStore:
    def __init__(
        self,
        redis: Redis,
        *,
        retention_seconds: int = 0,
        retention_max_events: int = 0,
        idempotency_seconds: int = 86400,
        topic_retention_seconds: dict[str, int] | None = None,
        topic_retention_max_events: dict[str, int] | None = None,
    ) -> None:
        self.redis = redis
        self.retention_seconds = retention_seconds
        self.retention_max_events = retention_max_events
        self.topic_retention_seconds = topic_retention_seconds or {}
        self.topic_retention_max_events = topic_retention_max_events or {}
        self.idempotency_seconds = idempotency_seconds
        self._append_sha = hashlib.sha1(_APPEND.encode()).hexdigest()
        self._scripts = ScriptPipe(redis)
        self._known_topics: set[str] = set()

    async def append(
        self,
        topic: str,
        changes: list[Change],
        *,
        digest: str = "",
        idempotency_key: str | None = None,
    ) -> Appended:
        """Store all ``changes`` atomically; return their event ids in order."""
        now_ms = int(time.time() * 1000)
        minid = ""
        max_age = self.topic_retention_seconds.get(topic, self.retention_seconds)
        if max_age:
            minid = f"{now_ms - max_age * 1000}-0"
        max_events = self.topic_retention_max_events.get(topic, self.retention_max_events)
        script_keys = [keys.events(topic), keys.resources(topic), keys.topic_meta(topic)]
        if idempotency_key is not None:
            script_keys.append(keys.idempotency(topic, idempotency_key))
        packed = b"".join(
            b"%s\0%s\0%s\0" % (c.loc.encode(), c.change.encode(), c.event) for c in changes
        )
        args: list[str | bytes | int] = [
            digest,
            self.idempotency_seconds,
            max_events,
            minid,
            now_ms,
            packed,
        ]
        if changes and topic not in self._known_topics:
            await self.redis.sadd(keys.TOPICS, topic)
            self._known_topics.add(topic)
        command = ("EVALSHA", self._append_sha, len(script_keys), *script_keys, *args)
        try:
            replayed, joined = await self._scripts.call(*command)
        except NoScriptError:  # a fresh (or flushed) Redis: load once, then go on
            await self.redis.script_load(_APPEND)
            replayed, joined = await self._scripts.call(*command)
        text = joined.decode() if isinstance(joined, bytes) else str(joined)
        if replayed:
            prev_digest, _, text = text.partition("|")
            if prev_digest != digest:
                raise Conflict(
                    "Idempotency-Key was already used for a different body",
                    idempotency_key=idempotency_key,
                )
        return Appended(ids=text.split(" ") if text else [], replayed=bool(replayed))

    async def close(self) -> None:
        await self._scripts.close()

    async def trim(self, topic: str) -> None:
        """Apply retention now (publishes do it too; this covers quiet topics)."""
        await self.append(topic, [])

    async def trimmed_through(self, topic: str) -> str | None:
        """Id of the newest event retention ever removed from ``topic``, if any."""
        value = await self.redis.hget(keys.topic_meta(topic), "trimmed_through")
        return replies.text(value) if value is not None else None

    async def read(
        self, topic: str, after: str | None, count: int, *, until: str = "+"
    ) -> list[tuple[str, bytes]]:
        """Up to ``count`` events with id > ``after`` (all from the start if None)."""
        start = f"({after}" if after and after != "0" and after != "0-0" else "-"
        rows = await self.redis.xrange(keys.events(topic), start, until, count=count)
        return replies.events(rows)

    async def first_id(self, topic: str) -> str | None:
        rows = await self.redis.xrange(keys.events(topic), "-", "+", count=1)
        return replies.first_id(rows)

    async def last_id(self, topic: str) -> str | None:
        rows = await self.redis.xrevrange(keys.events(topic), "+", "-", count=1)
        return replies.first_id(rows)

    async def length(self, topic: str) -> int:
        return int(await self.redis.xlen(keys.events(topic)))

    async def topics(self) -> list[str]:
        return sorted(replies.text(t) for t in await self.redis.smembers(keys.TOPICS))

    async def exists(self, topic: str) -> bool:
        if topic in self._known_topics:
            return True
        found = bool(await self.redis.sismember(keys.TOPICS, topic))
        if found:
            self._known_topics.add(topic)
        return found

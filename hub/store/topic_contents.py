"""Plain WebSub topics' latest content in Redis (``keys.content``: body and Content-Type).

One hash per topic, replaced whole (one ``HSET`` of both fields) by each new content; the
content's change is appended to the topic's stream after it is written
(:mod:`hub.live.content_publication`), so a delivery, which reads the content when it is
made, never sends content older than the change it delivers. A publish that fails between
the two leaves the new content without its change: the topic URI serves it, and the
publisher's retry stores the change (a repeated ping compares with the stream's last change,
:meth:`ContentStore.last_change`, not with this hash).
"""

from __future__ import annotations

import orjson

from hub.core.exceptions import DamagedData
from hub.core.topic_content import TopicContent
from hub.store import keys
from hub.store.redis_connection import Client


class ContentStore:
    def __init__(self, redis: Client) -> None:
        self.redis = redis

    async def put(self, topic: str, content: TopicContent) -> None:
        await self.redis.hset(
            keys.content(topic),
            mapping={keys.CONTENT_BODY: content.body, keys.CONTENT_TYPE: content.content_type},
        )

    async def get(self, topic: str) -> TopicContent | None:
        """The topic's latest content; None if it never had one.

        Raises:
            DamagedData: the hash is not what :meth:`put` writes.
        """
        body, ctype = await self.redis.hmget(
            keys.content(topic), [keys.CONTENT_BODY, keys.CONTENT_TYPE]
        )
        if body is None and ctype is None:
            return None
        if body is None or ctype is None:
            raise DamagedData(f"the content of topic {topic!r} lacks its body or its Content-Type")
        try:
            return TopicContent(keys.as_bytes(body), keys.as_bytes(ctype).decode("ascii"))
        except UnicodeDecodeError:
            raise DamagedData(f"the Content-Type of topic {topic!r} is not ASCII") from None

    async def earlier(self, topic: str, idempotency_key: str) -> tuple[str, list[str]] | None:
        """What a publish with ``idempotency_key`` stored before, if one did: its digest
        and event ids (as the append script remembers them, ``digest|id id ...``). Read
        before the content is written, so that a retry (or a key reused for another body)
        writes nothing."""
        value = await self.redis.get(keys.idempotency(topic, idempotency_key))
        if value is None:
            return None
        digest, _, joined = keys.text(value).partition("|")
        return digest, joined.split(" ") if joined else []

    async def last_change(self, topic: str) -> tuple[str, str] | None:
        """The ``(hash, type)`` of the topic's last stored change (None: no change, or one
        without them), to tell a ping's content from the one last stored."""
        rows = keys.event_rows(await self.redis.xrevrange(keys.events(topic), "+", "-", count=1))
        if not rows:
            return None
        try:
            change = orjson.loads(rows[0][1])
            found = change.get("hash"), change.get("type")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        if not all(isinstance(value, str) for value in found):
            return None
        return found

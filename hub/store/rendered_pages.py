"""Closed Change List pages, rendered and gzipped, kept in Redis for every hub process.

A closed page never changes (:mod:`hub.store.pages`), and building one of 50,000 entries
takes ~2 s of CPU, while each process's cache (:class:`hub.web.cache.ByteCache`) holds a
few. So the process that builds a closed page also keeps its gzipped bytes here (a page's
gzip is a tenth of it or less: ~0.3-1.5 MB for 50,000 entries), under the tag that names
that page's version (its topic, number, first and last event), and every process, or the
same one restarted, sends it from here instead of building it again.

Bounded: one key per closed page built within the last ``kept_seconds`` (default
:data:`KEPT_SECONDS`), each expiring that long after it was stored; a page retention
withdrew is never looked up again and expires, and a topic's deletion removes its keys with
the others of its hash tag.
"""

from __future__ import annotations

from hub.store import keys
from hub.store.redis_connection import Client

#: How long a stored page stays (seconds).
KEPT_SECONDS = 3600


class RenderedPages:
    """Get and keep the gzipped bytes of closed pages, checked against their version."""

    def __init__(self, redis: Client, *, kept_seconds: int = KEPT_SECONDS) -> None:
        self.redis = redis
        self.kept_seconds = kept_seconds

    async def get(self, topic: str, n: int, version: str) -> bytes | None:
        """Page ``n``'s gzip, if stored for ``version`` (another version is not it)."""
        value = await self.redis.get(keys.rendered_page(topic, n))
        if not isinstance(value, bytes):
            return None
        stored, _, gz = value.partition(b"\n")
        return gz if stored == version.encode() else None

    async def put(self, topic: str, n: int, version: str, gz: bytes) -> None:
        await self.redis.set(
            keys.rendered_page(topic, n), version.encode() + b"\n" + gz, ex=self.kept_seconds
        )

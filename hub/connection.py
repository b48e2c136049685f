"""Connections to Redis, made in one place, and the store layer's error family.

The hub holds two clients: one for ordinary commands (with a socket timeout, so a stalled
Redis turns into an error instead of a hung request) and one for ``XREAD BLOCK`` only, which
must be allowed to wait longer than any timeout.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import RedisError

#: Every failure of the store layer; the web layer maps it to 503 in one place.
StoreError = RedisError


class Connections:
    """The hub's Redis clients for one Redis URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.main = Redis.from_url(
            url, max_connections=512, health_check_interval=30, socket_timeout=10
        )
        self.blocking = Redis.from_url(url, socket_timeout=None, health_check_interval=30)

    async def ping(self) -> None:
        await self.main.ping()

    async def close(self) -> None:
        await self.main.aclose()
        await self.blocking.aclose()

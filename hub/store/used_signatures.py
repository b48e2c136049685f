"""Self-service signatures already accepted, so none is accepted twice (no replays).

Kept in Redis, so a signature used on one hub process is refused by the others too, for as
long as its timestamp could still be accepted (twice the tolerance covers both sides).
"""

from __future__ import annotations

from hub.store import keys
from hub.store.redis_connection import Client


async def first_use(redis: Client, digest: str, tolerance_seconds: float) -> bool:
    """True the first time ``digest`` is seen within the window, False after."""
    ttl_ms = int(2 * tolerance_seconds * 1000) + 1000
    return bool(await redis.set(keys.used_signature(digest), b"1", nx=True, px=ttl_ms))

"""redis-py's Sentinel client, kept whole under concurrent master discoveries.

Every new connection to a Sentinel-named master asks the Sentinels for its address
(:meth:`Sentinel.discover_master`). When a Sentinel other than the first answers, redis-py
(8.1) moves it to the front of its list with a swap written after the ``await``: two
discoveries answered by the same Sentinel at once (the hub's tasks reconnecting together
after a failover) swap it in twice, which leaves it in the list twice and drops another
Sentinel from it. The dropped one is never asked again, and :meth:`Sentinel.aclose`, which
closes the list's clients, leaves its connections open (found by the failover test's socket
check: 2 to 6 Sentinel connections left after the hub closed, in one run of ~3 under load).

Here every discovery ends with the list holding each Sentinel once, and closing closes
every Sentinel client made, whatever the list holds.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.sentinel import Sentinel


class Sentinels(Sentinel):
    """:class:`redis.asyncio.sentinel.Sentinel` whose list of Sentinels stays whole."""

    def __init__(self, sentinels: list[tuple[str, int]], **options: Any) -> None:
        super().__init__(sentinels, **options)  # type: ignore[no-untyped-call]
        #: Every Sentinel client, in the URL's order: what the list must hold, and close.
        self.clients: tuple[Redis, ...] = tuple(self.sentinels)

    async def discover_master(self, service_name: str) -> Any:
        try:
            return await super().discover_master(service_name)
        finally:
            self._mend()

    def _mend(self) -> None:
        """Each Sentinel once: the list's order of first appearance, then any it lost."""
        if len({id(c) for c in self.sentinels}) == len(self.sentinels) == len(self.clients):
            return
        seen: set[int] = set()
        mended: list[Redis] = []
        for client in [*self.sentinels, *self.clients]:
            if id(client) not in seen:
                seen.add(id(client))
                mended.append(client)
        self.sentinels[:] = mended

    async def aclose(self) -> None:
        """Close every Sentinel client made, whatever the list holds now (redis-py's
        ``aclose`` closes each even if another's close fails)."""
        self.sentinels[:] = self.clients
        await super().aclose()

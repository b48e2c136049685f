"""Each hub process's live stream clients per topic, in Redis with an expiry, and their sum.

A process replaces its report (:meth:`PresenceStore.report`) whenever its counts change
and every ownership lease; readers sum the reports of the processes that are live now
(``keys.NODES``, as the heartbeat keeps it), so a process that died stops counting within a
lease, and its report expires soon after.
"""

from __future__ import annotations

from typing import Any

from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe


class PresenceStore:
    def __init__(self, redis: Client, script_pipe: ScriptPipe) -> None:
        self.redis = redis
        self.scripts = script_pipe

    async def report(self, node: str, counts: dict[tuple[str, str], int], ttl_ms: int) -> None:
        args: list[str | int] = [ttl_ms]
        for (topic, transport), count in counts.items():
            args.extend((f"{transport} {topic}", count))
        await self.scripts.run(scripts.REPORT_PRESENCE, [keys.presence(node)], args)

    async def reports(self) -> list[dict[tuple[str, str], int]]:
        """The reports of every live hub process (the heartbeat drops a dead one from
        ``keys.NODES`` within a tick of its lease; one that left, at once)."""
        nodes: Any = await self.redis.zrange(keys.NODES, 0, -1)
        live = [keys.text(node) for node in nodes]
        if not live:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for node in live:
                pipe.hgetall(keys.presence(node))
            rows = await pipe.execute()
        out = []
        for row in rows:
            report: dict[tuple[str, str], int] = {}
            for name, count in row.items():
                transport, _, topic = keys.text(name).partition(" ")
                report[(topic, transport)] = int(count)
            out.append(report)
        return out

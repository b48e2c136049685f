"""Waiting for replicas (``RSHUB_REDIS_WAIT_REPLICAS``): a publish is answered 202 only once
that many replicas have its changes.

Redis replicates asynchronously: a primary that dies before its replicas read a write loses
that write when one of them is promoted, though the publisher was told 202. ``WAIT N
timeout`` after the publish's script, on the same connection, returns how many replicas
have everything that connection wrote. Fewer than N within the timeout makes the publish
:class:`NotReplicated`: a 503 saying the changes are stored on the primary but may or may
not survive a failover; retried with the same Idempotency-Key, the publish is replayed (not
stored twice) and waited for again. ``WAIT`` does not make Redis consistent: a promoted
replica that had not acknowledged may still win an election. It narrows the loss to
publishes that were not answered 202 (docs/scaling.md, "Waiting for replicas").

Only publishes wait: their appends go through a script pipe of their own
(:class:`hub.store.event_store.EventStore`), since a ``WAIT`` holds up every reply behind it
on its connection. Leases, heartbeats and delivery cursors are confirmed by the primary
alone (:mod:`hub.store.leases` says why that is safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError


class NotReplicated(RedisError):
    """Too few replicas acknowledged a publish in time (a 503, like every store error)."""


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    replicas: int
    timeout_ms: int

    def command(self) -> tuple[Any, ...]:
        return ("WAIT", self.replicas, self.timeout_ms)

    def shortfall(self, reply: Any) -> Exception | None:
        """The error for a ``WAIT`` reply short of :attr:`replicas` (None when it is not)."""
        if isinstance(reply, Exception):
            return NotReplicated(f"waiting for replicas failed: {reply}")
        if isinstance(reply, int) and reply >= self.replicas:
            return None
        if reply is None:
            return NotReplicated(
                "the changes are stored, but their hash slot moved before replicas could be "
                "asked: they may or may not survive a failover"
            )
        return NotReplicated(
            f"the changes are stored on the Redis primary, but {reply} of "
            f"{self.replicas} replicas (RSHUB_REDIS_WAIT_REPLICAS) acknowledged them within "
            f"{self.timeout_ms / 1000:g}s: they may or may not survive a failover"
        )

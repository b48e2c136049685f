"""Who delivers which WebSub subscription: process heartbeats and fenced leases in Redis.

Each hub process is a *node* with a random id. It renews its entry in ``keys.NODES`` (a
sorted set scored by expiry on the Redis clock) every third of a lease; a node that stops
renewing drops out within one lease. The first live node also holds ``keys.LEADER`` and runs
the hub-wide periodic jobs (retention sweep, Change List page scan); those are atomic
scripts, so a second runner during a handover would only repeat work.

A subscription is delivered only under a lease: an entry ``"<node> <token>"`` in the
topic's ``keys.owners`` hash, claimed only when free or held by a node whose heartbeat has
expired, with a *fencing token* drawn from a per-topic counter. A lease has no expiry of its
own: it lives as long as its node's heartbeat *in that topic* (``keys.owner_heartbeats``, a
hash of node -> expiry on the Redis clock), which each node renews every tick for the topics
it holds leases of (pipelined: one small script per topic). Why a per-topic copy and not
``keys.NODES``: the claim must read the holder's liveness atomically, as Redis sees it at
that moment, and on a Redis Cluster a script may only touch keys of one hash slot. The
claimer's own list of live nodes (from its last heartbeat, up to a tick old) is not used: a
hub that had not yet seen a peer that just started took the peer's leases, and both
delivered the batch in flight.
Every cursor and record write of a delivery worker names its token, and
a script refuses it unless the entry still carries that token
(``scripts/fenced_cursors.lua``, ``fenced_save.lua``). A process that was paused past its
heartbeat therefore cannot move a cursor (let alone backwards) once another took over, and
it checks which leases are still its own before it delivers again (:mod:`hub.live.ownership`).
All of a topic's ownership keys share the topic's hash slot, so this holds on a Redis
Cluster.

Heartbeats, claims, renewals and delivery cursors are confirmed by the primary alone: they
never wait for replicas, whatever ``RSHUB_REDIS_WAIT_REPLICAS`` says (that is for
publishes: :mod:`hub.store.replicas`), and they go through a script pipe whose connections
carry no ``WAIT`` (:class:`hub.store.event_store.EventStore` keeps the publishes' apart).
Waiting would stall delivery whenever a failover left a primary without replicas: a
heartbeat held up past its lease lets the peers take the leases over. Not waiting is safe
because WebSub delivery is at least once: what a failover can lose here is a write the
promoted replica had not yet read, and each such loss costs at most a batch delivered
twice, never a change skipped. A lost cursor write leaves the cursor where it was, so the
batch is sent again; a lost heartbeat lets a lease lapse sooner, and its holder then checks
which leases are still its own before it delivers again; a lost claim leaves the lease with
its previous holder, and the claimer's writes, fenced by a token the entry does not carry,
are refused: its worker stops after at most the batch it had in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from hub.store import keys, scripts
from hub.store.script_pipe import ScriptPipe


@dataclass(frozen=True, slots=True)
class Membership:
    """What one heartbeat learned: the live nodes, and whether this node leads."""

    nodes: tuple[str, ...]
    leader: bool


#: :meth:`Leases.claim` results besides a token.
HELD_ELSEWHERE = 0
GONE = -1


class Leases:
    def __init__(self, scripts: ScriptPipe, node: str, ttl_ms: int) -> None:
        self.scripts = scripts
        self.node = node
        self.ttl_ms = ttl_ms

    async def heartbeat(self, topics: Iterable[str] = (), *, leaving: bool = False) -> Membership:
        """Renew this node's heartbeat, and its heartbeat in each of ``topics`` (those it
        holds leases of), all at once."""
        ttl = 0 if leaving else self.ttl_ms
        out, *_ = await asyncio.gather(
            self.scripts.run(scripts.HEARTBEAT, [keys.NODES, keys.LEADER], [self.node, ttl]),
            *(
                self.scripts.run(scripts.ALIVE, [keys.owner_heartbeats(t)], [self.node, ttl])
                for t in set(topics)
            ),
        )
        return Membership(tuple(sorted(keys.text(n) for n in out[1:])), bool(int(out[0])))

    async def claim(self, topic: str, callbacks: list[str]) -> dict[str, int]:
        """Try to take the leases; per callback: a token, ``HELD_ELSEWHERE`` or ``GONE``.

        A lease is taken over only when its holder's heartbeat in the topic has expired, as
        Redis sees it now.
        """
        out = await self.scripts.run(
            scripts.CLAIM,
            [
                keys.owners(topic),
                keys.owner_epoch(topic),
                keys.subscriptions(topic),
                keys.owner_heartbeats(topic),
            ],
            [self.node, self.ttl_ms, *callbacks],
        )
        return {cb: int(token) for cb, token in zip(callbacks, out, strict=True)}

    async def check(self, topic: str, held: dict[str, int]) -> set[str]:
        """The callbacks among ``held`` whose lease is no longer ours."""
        return await self._renew(topic, held, release=False)

    async def release(self, topic: str, held: dict[str, int]) -> None:
        """Give the leases up at once, so another node can take them on its next tick."""
        await self._renew(topic, held, release=True)

    async def _renew(self, topic: str, held: dict[str, int], *, release: bool) -> set[str]:
        if not held:
            return set()
        pairs = [v for cb, token in held.items() for v in (cb, token)]
        lost = await self.scripts.run(
            scripts.RENEW, [keys.owners(topic)], [self.node, int(release), *pairs]
        )
        return {keys.text(cb) for cb in lost or ()}

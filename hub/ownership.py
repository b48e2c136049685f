"""Delivery ownership: this process runs the delivery workers of the subscriptions it owns.

Every ``tick`` (a third of the lease) the :class:`Ownership` loop:

1. heartbeats, learning the live nodes (:meth:`hub.leases.Leases.heartbeat`);
2. works out which subscriptions this node should deliver (:mod:`hub.placement`);
3. releases the leases it should no longer hold, after stopping their workers (whose
   cursors are written after every delivery), so the new owner can take them at once;
4. claims the leases it should hold and starts their workers; a lease still held by a node
   that died expires within one lease, and is then claimed on the next tick;
5. renews what it holds (a task of its own, also every tick, so a long round cannot let
   the leases lapse); a lease found lost stops its worker at once.

So a dead node's subscriptions are resumed from their cursors within about one lease plus
one tick. A worker delivers only while its lease is known valid (:class:`Lease`), and its
cursor and record writes are fenced by the lease token, so a node that was paused past its
lease neither delivers on nor moves a cursor once it wakes up.

The set of subscriptions is read whole every ``reconcile_seconds`` and followed in between
through ``keys.SUBSCRIPTION_CHANGES``, so a subscription verified by any process starts
delivering on its owner within a moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

from . import placement
from .connection import StoreError
from .leases import GONE, HELD_ELSEWHERE, Leases
from .placement import SubscriptionKey
from .subscriptions import SubscriptionStore
from .tasks import cancel_and_wait

log = logging.getLogger(__name__)


class Lease:
    """A worker's hold on its subscription: the fencing token and how long it is valid."""

    def __init__(self, token: int, valid_for: float) -> None:
        self.token = token
        self.valid_until = time.monotonic() + valid_for
        self.lost = False
        self._renewed = asyncio.Event()

    def valid(self) -> bool:
        return not self.lost and time.monotonic() < self.valid_until

    def renewed(self, valid_until: float) -> None:
        self.valid_until = valid_until
        self._renewed.set()
        self._renewed = asyncio.Event()

    def lose(self) -> None:
        self.lost = True
        self._renewed.set()

    async def wait_valid(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for a renewal; False when the lease is lost or stays stale."""
        while not self.valid():
            if self.lost:
                return False
            try:
                await asyncio.wait_for(self._renewed.wait(), timeout)
            except TimeoutError:
                return self.valid()
        return True


class Workers(Protocol):
    """What the ownership loop drives: :class:`hub.delivery.DeliveryService`."""

    async def start_worker(self, key: SubscriptionKey, lease: Lease) -> None: ...

    async def stop_worker(self, key: SubscriptionKey) -> None: ...

    def running(self) -> set[SubscriptionKey]: ...


class Ownership:
    def __init__(
        self,
        leases: Leases,
        subscriptions: SubscriptionStore,
        workers: Workers,
        *,
        lease_seconds: float,
        reconcile_seconds: float = 10.0,
    ) -> None:
        self.leases = leases
        self.subscriptions = subscriptions
        self.workers = workers
        self.lease_seconds = lease_seconds
        self.tick = lease_seconds / 3
        self.reconcile_seconds = reconcile_seconds
        self.node = leases.node
        #: Every subscription known to exist, as of the last read and the change stream.
        self.known: set[SubscriptionKey] = set()
        self.nodes: tuple[str, ...] = ()
        self.leader = False
        self.held: dict[SubscriptionKey, Lease] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._last_full = 0.0
        self._changes_from = "$"
        #: Whether each known subscription is this node's, for ``_placed_nodes``.
        self._placed: dict[SubscriptionKey, bool] = {}
        self._placed_nodes: tuple[str, ...] | None = None

    async def start(self) -> None:
        self._changes_from = await self.subscriptions.last_change_id()
        # Renewal runs from the start: the first round may claim and start many workers.
        self._tasks = [asyncio.create_task(self._renewing(), name="lease-renewal")]
        await self._reconcile(full=True)
        self._tasks += [
            asyncio.create_task(self._run(), name="ownership"),
            asyncio.create_task(self._follow_changes(), name="subscription-changes"),
        ]

    async def close(self) -> None:
        """Stop every worker, write its cursor, give its lease up, and leave."""
        await cancel_and_wait(self._tasks)
        for key in list(self.held):
            await self.workers.stop_worker(key)
        with contextlib.suppress(StoreError):
            await self._release(dict(self.held))
            await self.leases.heartbeat(leaving=True)
        self.held.clear()

    def changed(self) -> None:
        """Something changed here (a subscription ended): reconcile soon."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.tick)
            self._wake.clear()
            full = time.monotonic() - self._last_full >= self.reconcile_seconds
            try:
                await self._reconcile(full=full)
            except StoreError as exc:
                log.warning("ownership round failed (will retry): %s", exc)

    async def _renewing(self) -> None:
        """Heartbeat and renew every held lease each tick, apart from the round: a round
        that starts thousands of workers, or a loop busy delivering, must not let the
        leases lapse (workers would stop, restart and make the loop busier still)."""
        while True:
            await asyncio.sleep(self.tick)
            try:
                await self.leases.heartbeat()
                await self._renew_held()
            except StoreError as exc:
                log.warning("lease renewal failed (will retry): %s", exc)

    async def _renew_held(self) -> None:
        """Renew all topics' leases at once (the script pipe sends them together)."""
        leases = dict(self.held)
        groups = _by_topic((k, lease.token) for k, lease in leases.items())
        sent = time.monotonic()
        results = await asyncio.gather(*(self.leases.renew(t, h) for t, h in groups.items()))
        for (topic, held), lost in zip(groups.items(), results, strict=True):
            for callback in held:
                key = (topic, callback)
                lease = leases[key]
                if self.held.get(key) is not lease:
                    continue  # released or re-claimed meanwhile
                if callback in lost:
                    log.info("lease of %s -> %s lost", topic, callback)
                    lease.lose()
                    del self.held[key]
                    await self.workers.stop_worker(key)
                else:
                    lease.renewed(sent + self.lease_seconds * 0.9)

    async def _follow_changes(self) -> None:
        failures = 0
        while True:
            try:
                changes = await self.subscriptions.wait_changes(self._changes_from, 5000)
                failures = 0
            except StoreError as exc:
                failures += 1
                log.warning("following subscription changes failed (%s); retrying", exc)
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                continue
            for change in changes:
                self._changes_from = change.id
                key = (change.topic, change.callback)
                if change.kind == "removed":
                    self.known.discard(key)
                else:
                    self.known.add(key)
                    lease = self.held.get(key)
                    if lease is not None:  # re-subscribed: restart with the new record
                        await self.workers.stop_worker(key)
                        if self.held.get(key) is lease:
                            await self.workers.start_worker(key, lease)
            if changes:
                self._wake.set()

    async def _reconcile(self, *, full: bool) -> None:
        sent = time.monotonic()
        membership = await self.leases.heartbeat()
        self.nodes, self.leader = membership.nodes, membership.leader
        if full:
            self.known = await self.subscriptions.all_keys()
            self._last_full = sent
        wanted = self._wanted()

        # (Leases leave self.held before any await, so the renewal task never sees a
        # lease that is being stopped or released.)
        # Ended here (410, expiry) or elsewhere: stop and forget.
        for key in [k for k in self.held if k not in self.known]:
            if (ended := self.held.pop(key, None)) is not None:
                ended.lose()
            await self.workers.stop_worker(key)
        running = self.workers.running()  # once: it copies every worker's key
        for key in [k for k in self.held if k not in running]:
            self.held.pop(key).lose()  # the worker ended by itself (lease expired, gone)
        # No longer ours: stop, write the cursor, hand over.
        moving = {k: self.held.pop(k) for k in [k for k in self.held if k not in wanted]}
        for key in moving:
            await self.workers.stop_worker(key)
        await self._release(moving)
        for lease in moving.values():
            lease.lose()
        # Take what should be ours.
        missing = [k for k in wanted if k not in self.held]
        for topic, callbacks in _by_topic((k, 0) for k in missing).items():
            at = time.monotonic()
            claimed = await self.leases.claim(topic, list(callbacks))
            started: dict[SubscriptionKey, Lease] = {}
            for callback, token in claimed.items():
                key = (topic, callback)
                if token == GONE:
                    self.known.discard(key)
                elif token != HELD_ELSEWHERE:
                    started[key] = self.held[key] = Lease(token, 0)
                    started[key].renewed(at + self.lease_seconds * 0.9)
            for key, lease in started.items():
                if self.held.get(key) is lease:
                    await self.workers.start_worker(key, lease)

    def _wanted(self) -> set[SubscriptionKey]:
        """:func:`placement.assigned` of the known subscriptions, remembered while the set of
        nodes stays the same: with two or more nodes, hashing 100,000 keys every tick took
        longer than the tick itself."""
        if self.nodes != self._placed_nodes:
            self._placed_nodes, self._placed = self.nodes, {}
        placed = self._placed
        fresh = [k for k in self.known if k not in placed]
        if fresh:
            mine = placement.assigned(self.node, fresh, self.nodes)
            placed.update((k, k in mine) for k in fresh)
        if len(placed) > 2 * len(self.known) + 1000:  # forget ended subscriptions
            self._placed = placed = {k: placed[k] for k in self.known}
        return {k for k in self.known if placed[k]}

    async def _release(self, leases: dict[SubscriptionKey, Lease]) -> None:
        for topic, held in _by_topic((k, lease.token) for k, lease in leases.items()).items():
            await self.leases.release(topic, held)


def _by_topic(items: Iterable[tuple[SubscriptionKey, int]]) -> dict[str, dict[str, int]]:
    grouped: dict[str, dict[str, int]] = defaultdict(dict)
    for (topic, callback), token in items:
        grouped[topic][callback] = token
    return grouped

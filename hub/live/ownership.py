"""Delivery ownership: this process runs the delivery workers of the subscriptions it owns.

Every ``tick`` (a third of the lease) a task of its own heartbeats, and the
:class:`Ownership` loop (on a tick, or at once when something changed) reconciles:

1. the heartbeat learns the live nodes (:meth:`hub.store.leases.Leases.heartbeat`). A successful
   heartbeat keeps every lease this node holds valid for 0.9 of a lease from the moment it
   was *sent*; a worker sends nothing once that has passed. A heartbeat answered after that
   (the process was paused, Redis was away, or a partition delivered it late, after a peer
   took the leases) vouches for nothing until the node has checked which leases are still
   its own, and stopped the workers of the others;
2. works out which subscriptions this node should deliver (:mod:`hub.core.placement`);
3. releases the leases it should no longer hold, after stopping their workers (whose
   cursors are written after every delivery), and says so on the change stream, so the
   new owner takes them at once (a node that starts says so too, so the others release
   its share at once, rather than on their next tick);
4. claims the leases it should hold and starts their workers; a lease is taken over only
   when its holder's heartbeat has expired as Redis sees it at the claim (at most one lease
   after it died), never because this node's view of the live nodes (a tick old) lacks it.

So a dead node's subscriptions are resumed from their cursors within about one lease plus
one tick, and a node that was paused past its lease neither delivers on nor moves a cursor
once it wakes up: its writes are fenced by its lease tokens.

The set of subscriptions is read whole every ``reconcile_seconds`` (up to six times that
when a full round is costly: at most a twentieth of the process's time goes to them) and
followed in between through ``keys.SUBSCRIPTION_CHANGES``, so a subscription verified by
any process starts delivering on its owner within a moment. A round between full ones
looks only at the subscriptions that changed (a worker ended, a lease dropped, a change
followed), unless the live nodes changed or another node released leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Protocol

from hub.core import placement
from hub.core.exceptions import DamagedData
from hub.core.placement import SubscriptionKey
from hub.core.retrying import STORE_OUTAGE, retrying
from hub.core.tasks import Tasks
from hub.store.leases import GONE, HELD_ELSEWHERE, Leases
from hub.store.redis_connection import StoreError
from hub.store.subscriptions import (
    NODE_JOINED,
    NODE_KINDS,
    NODE_LEFT,
    RELEASED,
    REMOVED,
    TOPIC_REMOVED,
    SubscriptionStore,
)

log = logging.getLogger(__name__)

#: The part of a lease a node trusts its heartbeat for, measured from sending it.
_TRUSTED = 0.9

#: Callbacks claimed in one script call (a topic of 100,000 is claimed in parts, so that no
#: one call holds Redis for long), and claims in flight at once, whose workers are then
#: started together.
_CLAIM_CHUNK = 500
_CLAIMS_AT_ONCE = 16

#: A full round (every subscription read and placed) waits this many times the CPU time
#: the last one took, if that is longer than ``reconcile_seconds``, but never more than
#: ``_FULL_LONGEST`` times that.
_FULL_SHARE = 20
_FULL_LONGEST = 6


class Validity:
    """Until when this node's leases are known valid (monotonic clock), shared by all."""

    def __init__(self) -> None:
        self.until = 0.0
        self._renewed = asyncio.Event()

    def renewed(self, until: float) -> None:
        self.until = until
        self._renewed.set()
        self._renewed = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._renewed.wait(), timeout)


class Lease:
    """A worker's hold on its subscription: its fencing token, valid while the node is."""

    def __init__(self, token: int, validity: Validity) -> None:
        self.token = token
        self.validity = validity
        self.lost = False

    def valid(self) -> bool:
        return not self.lost and time.monotonic() < self.validity.until

    def lose(self) -> None:
        self.lost = True

    async def wait_valid(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for a renewal; False when the lease is lost or stays stale."""
        deadline = time.monotonic() + timeout
        while not self.valid():
            remaining = deadline - time.monotonic()
            if self.lost or remaining <= 0:
                return False
            await self.validity.wait(remaining)
        return True


class Workers(Protocol):
    """What the ownership loop drives: :class:`hub.live.delivery.DeliveryService`."""

    async def start_worker(self, key: SubscriptionKey, lease: Lease) -> None: ...

    async def start_workers(self, topic: str, leases: dict[str, Lease]) -> None:
        """:meth:`start_worker` for each of ``topic``'s callbacks in ``leases``."""

    async def stop_worker(self, key: SubscriptionKey, *, planned: bool = True) -> None: ...

    async def settle(self) -> None:
        """Commit the cursors of what the stopped workers delivered (before their leases
        go: a cursor write after the release is refused, and the next owner re-sends)."""

    def running(self) -> AbstractSet[SubscriptionKey]: ...


class Ownership:
    def __init__(
        self,
        leases: Leases,
        subscriptions: SubscriptionStore,
        workers: Workers,
        *,
        tasks: Tasks,
        wake: asyncio.Event,
        topic_removed: Callable[[str], Awaitable[None]],
        lease_seconds: float,
        reconcile_seconds: float = 10.0,
    ) -> None:
        """``tasks``: where its loops run; ``wake``: set to reconcile soon (e.g. by
        ``workers`` when a worker ends); ``topic_removed``: called with a deleted topic's
        name (see the admin API)."""
        self.leases = leases
        self.subscriptions = subscriptions
        self.workers = workers
        self.lease_seconds = lease_seconds
        self.tick = lease_seconds / 3
        self.reconcile_seconds = reconcile_seconds
        self.node = leases.node
        self.validity = Validity()
        #: Every subscription known to exist, as of the last read and the change stream.
        self.known: set[SubscriptionKey] = set()
        self.nodes: tuple[str, ...] = ()
        self.leader = False
        self.held: dict[SubscriptionKey, Lease] = {}
        self._wanted: set[SubscriptionKey] = set()
        self._wanted_for: tuple[tuple[str, ...], int] | None = None
        #: Subscriptions whose state changed since the last round (True: known to exist,
        #: False: removed; a worker that ended, a lease dropped): a round between the
        #: full ones looks at these only, not at every subscription (with 100,000 the
        #: passes over all of them cost more than the changes they found).
        self._dirty: dict[SubscriptionKey, bool] = {}
        #: The live nodes the last round placed the subscriptions among.
        self._placed_among: tuple[str, ...] | None = None
        self._known_version = 0
        self._last_heartbeat = 0.0
        #: The last heartbeat came back after the validity it gave (see _beat()).
        self._answered_late = False
        self._wake = wake
        self.tasks = tasks
        self._last_full = -math.inf  # the first round reads every subscription
        #: Seconds between full rounds: ``reconcile_seconds``, or more when they are costly.
        self._full_every = reconcile_seconds
        self._changes_from = "$"
        self.topic_removed = topic_removed
        self._closed = False

    async def start(self) -> None:
        """Join (one heartbeat: the live nodes, and whether this node leads) and start the
        loops. The first round, which claims this node's share and starts its workers (the
        recovery after a restart), runs at once in the ownership loop, not here: the hub
        serves meanwhile (it answered nothing for 113 s after a restart with 100,000
        subscriptions), and a round that fails is retried like any other."""
        self._changes_from = await self.subscriptions.last_change_id()
        await self._heartbeat()
        self._wake.set()
        # The others release this node's share at once (their releases wake its round).
        await self.subscriptions.node_changed(self.node, NODE_JOINED)
        self.tasks.spawn("heartbeat", self._beat())
        self.tasks.spawn("ownership", self._run())
        self.tasks.spawn("subscription-changes", self._follow_changes())

    async def close(self) -> None:
        """Stop every worker, give its lease up, and leave (once: shutdown hands over
        early, then the runtime's close calls this again)."""
        if self._closed:
            return
        self._closed = True
        await self.tasks.stop()
        await asyncio.gather(*(self.workers.stop_worker(key) for key in list(self.held)))
        await self.workers.settle()
        with contextlib.suppress(StoreError):
            await self._release(list(self.held))
            await self.leases.heartbeat({topic for topic, _ in self.held}, leaving=True)
            await self.subscriptions.node_left(self.node)
        self.held.clear()

    def _set_known(self, known: set[SubscriptionKey]) -> None:
        self.known = known
        self._known_version += 1

    async def _beat(self) -> None:
        """Heartbeat every tick, in a task of its own: a reconcile round that starts many
        workers must not delay it past the lease (the others would take over)."""
        while not self.tasks.stopping.is_set():
            # One answered too late to vouch for anything (a partition held it up) is
            # followed at once: until then, no worker of this node may send.
            await asyncio.sleep(0 if self._answered_late else self.tick)
            self._answered_late = False
            try:
                if await self._heartbeat():
                    self._wake.set()  # the live nodes changed: placement moves
            except StoreError as exc:
                log.warning("heartbeat failed (will retry): %s", exc)

    async def _heartbeat(self) -> bool:
        """One heartbeat; True when the set of live nodes changed."""
        sent = time.monotonic()
        membership = await self.leases.heartbeat({topic for topic, _ in self.held})
        # Answered after our leases stopped being vouched for, it may have *run* after they
        # lapsed and a peer took them (not only after a pause of ours: across a partition
        # it is delivered late, and judged by when it was sent, it renewed them).
        if time.monotonic() > self.validity.until and self.held:
            await self._check_after_gap()
        self._last_heartbeat = sent
        self.validity.renewed(sent + self.lease_seconds * _TRUSTED)
        self._answered_late = time.monotonic() > self.validity.until
        changed = membership.nodes != self.nodes
        self.nodes, self.leader = membership.nodes, membership.leader
        return changed

    async def _run(self) -> None:
        # Ends on the group's stop flag too, not only on cancel(): a cancel() that lands as
        # a Redis reply arrives can be swallowed (redis-py on Python 3.11), and this loop
        # then outlived its stop by the group's 5 s timeout, holding up a shutdown.
        while not self.tasks.stopping.is_set():
            waiter = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait([waiter], timeout=self.tick)
            finally:
                waiter.cancel()
            self._wake.clear()
            full = time.monotonic() - self._last_full >= self._full_every
            try:
                await self._reconcile(full=full)
            except (StoreError, DamagedData) as exc:  # a damaged record is skipped: defensive
                log.warning("ownership round failed (will retry): %s", exc)

    async def _follow_changes(self) -> None:
        while not self.tasks.stopping.is_set():
            changes = await retrying(
                lambda: self.subscriptions.wait_changes(self._changes_from, 5000),
                STORE_OUTAGE,
                retry_on=StoreError,
                log=log,
                what="following subscription changes",
            )
            for change in changes:
                self._changes_from = change.id
                key = (change.topic, change.callback)
                if change.kind in NODE_KINDS:
                    await self._node_changed(change.callback, change.kind)
                    continue
                if change.kind == TOPIC_REMOVED:
                    await self.topic_removed(change.topic)
                elif change.kind == REMOVED:
                    self.known.discard(key)
                    self._dirty[key] = False
                else:
                    self.known.add(key)
                    self._dirty[key] = True
                    if key in self.held and key in self.workers.running():
                        # Re-subscribed: restart with the new record, same lease.
                        await self.workers.stop_worker(key)
                        await self.workers.start_worker(key, self.held[key])
                self._known_version += 1
            if changes:
                self._wake.set()

    async def _node_changed(self, node: str, kind: str) -> None:
        """Another node left (its leases released) or joined: learn the live nodes now, so
        its subscriptions are claimed, or its share released to it, at once rather than on
        the next tick. One released leases: the round the change wakes claims them."""
        if node == self.node:
            return
        if kind == RELEASED:  # the round it wakes looks at every subscription for them
            self._placed_among = None
            return
        if (node in self.nodes) != (kind == NODE_LEFT):  # nothing new to us
            return
        try:
            await self._heartbeat()
        except StoreError as exc:
            log.warning("heartbeat failed (will retry): %s", exc)

    def _placement(self) -> set[SubscriptionKey]:
        """This node's share of the known subscriptions (recomputed only on a change)."""
        basis = (self.nodes, self._known_version)
        if basis != self._wanted_for:
            self._wanted = placement.assigned(self.node, self.known, self.nodes)
            self._wanted_for = basis
        return self._wanted

    def worker_ended(self, key: SubscriptionKey) -> None:
        """A worker ended by itself (410, expiry, lease lost): the next round looks at it."""
        self._dirty[key] = key in self.known
        self._wake.set()

    async def _reconcile(self, *, full: bool) -> None:
        if full:
            started = time.monotonic()
            busy = time.process_time()
            self._dirty.clear()  # what changes during the read is applied to it after
            known = await self.subscriptions.all_keys()
            for key, exists in self._dirty.items():
                if exists:
                    known.add(key)
                else:
                    known.discard(key)
            self._set_known(known)
            self._last_full = started  # only once read: a failed first read is retried
        elif self.nodes == self._placed_among:
            await self._reconcile_changed()
            return
        self._placed_among = self.nodes
        try:
            await self._reconcile_all()
        except BaseException:
            self._placed_among = None  # the next round looks at everything again
            raise
        if full:
            # At most a twentieth of the process's time in full rounds (with 100,000
            # subscriptions one took half a second of a loaded core every 10 s); the change
            # stream tells of every subscription in between.
            took = time.process_time() - busy  # the process's, an upper bound of the round's
            every = min(_FULL_SHARE * took, _FULL_LONGEST * self.reconcile_seconds)
            self._full_every = max(self.reconcile_seconds, every)

    async def _reconcile_changed(self) -> None:
        """A round between full ones: only the subscriptions that changed since the last."""
        dirty, self._dirty = self._dirty, {}
        try:
            running = self.workers.running()
            for key in [k for k in dirty if k in self.held]:
                if key not in self.known or key not in running:
                    if key in running:  # ended elsewhere (unsubscribed on another process)
                        await self.workers.stop_worker(key)
                    self._drop(key)  # ...or it ended here (410, expiry, lease lost)
            candidates = [k for k in dirty if k in self.known and k not in self.held]
            await self._claim(placement.assigned(self.node, candidates, self.nodes))
        except BaseException:
            self._placed_among = None  # the next round looks at everything again
            raise

    async def _reconcile_all(self) -> None:
        wanted = self._placement()

        running = self.workers.running()
        for key in [k for k in self.held if k not in self.known or k not in running]:
            if key in running:  # ended elsewhere (unsubscribed on another process)
                await self.workers.stop_worker(key)
            self._drop(key)  # ...or it ended here (410, expiry, lease lost)
        moving = [k for k in self.held if k not in wanted]
        await asyncio.gather(*(self.workers.stop_worker(key) for key in moving))
        if moving:
            await self.workers.settle()
        await self._release(moving)
        for key in moving:
            self._drop(key)
        if moving:  # their new owners claim them now, not on their next tick
            await self.subscriptions.node_changed(self.node, RELEASED)

        await self._claim([k for k in wanted if k not in self.held])

    async def _claim(self, missing: Iterable[SubscriptionKey]) -> None:
        """Claim the leases of ``missing`` and start the workers of those claimed."""
        # Claimed and started many at a time: one topic's claim, then one worker's record
        # read, each awaited in turn, took 113 s for 100,000 subscriptions after a restart.
        claims = [
            (topic, part)
            for topic, callbacks in _by_topic((k, 0) for k in missing).items()
            for part in _chunks(list(callbacks), _CLAIM_CHUNK)
        ]
        for start in range(0, len(claims), _CLAIMS_AT_ONCE):
            batch = claims[start : start + _CLAIMS_AT_ONCE]
            answers = await asyncio.gather(
                *(self.leases.claim(topic, callbacks) for topic, callbacks in batch)
            )
            starts = []
            for (topic, _), claimed in zip(batch, answers, strict=True):
                leases: dict[str, Lease] = {}
                for callback, token in claimed.items():
                    key = (topic, callback)
                    if token == GONE:
                        self.known.discard(key)
                        self._known_version += 1
                    elif token == HELD_ELSEWHERE:  # tried again next round (a tick)
                        self._dirty[key] = True
                    else:
                        leases[callback] = self.held[key] = Lease(token, self.validity)
                if leases:
                    starts.append(self.workers.start_workers(topic, leases))
            await asyncio.gather(*starts)

    async def _check_after_gap(self) -> None:
        """After a gap in our heartbeats' trust, keep only what is still ours."""
        snapshot = [(k, lease.token) for k, lease in self.held.items()]
        lost = 0
        for topic, held in _by_topic(snapshot).items():
            for callback in await self.leases.check(topic, held):
                log.info("lease of %s -> %s taken over while unconfirmed", topic, callback)
                key = (topic, callback)
                self._drop(key)
                await self.workers.stop_worker(key, planned=False)
                lost += 1
        if lost:
            # The peers that took them dropped this node from their live nodes: tell them
            # it is back, so they hand its share back now rather than on their next tick.
            await self.subscriptions.node_changed(self.node, NODE_JOINED)
            log.warning(
                "%d of %d leases taken over while this node's heartbeat was unconfirmed "
                "for more than %.1fs (paused, or cut off from Redis); their workers stopped",
                lost,
                len(snapshot),
                self.lease_seconds * _TRUSTED,
            )

    def _drop(self, key: SubscriptionKey) -> None:
        lease = self.held.pop(key, None)
        if lease is not None:
            lease.lose()
            self._dirty[key] = key in self.known  # claimed again if still this node's

    async def _release(self, keys: list[SubscriptionKey]) -> None:
        ours = [(k, self.held[k].token) for k in keys if k in self.held]
        for topic, tokens in _by_topic(ours).items():
            await self.leases.release(topic, tokens)


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def _by_topic(items: Iterable[tuple[SubscriptionKey, int]]) -> dict[str, dict[str, int]]:
    grouped: dict[str, dict[str, int]] = defaultdict(dict)
    for (topic, callback), token in items:
        grouped[topic][callback] = token
    return grouped

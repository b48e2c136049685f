"""Ingest: the one way a publish (or a publish ping) reaches the store and the live feed.

Appending returns the stored events; this process's own feed of the topic takes them at
once when it is at exactly the stream's id before them (read in the same atomic step as the
append), and is not told of them by notice. Otherwise (another process's append came in
between) the feed reads the stream (by XREAD, that read brings them): either way every
event reaches the feed once, in order. A replayed publish (its Idempotency-Key seen before)
stored nothing now, but its first time's answer may have been lost, so the feed reads the
stream then too, as after an append that failed once it may have run
(the ``uncertain`` report :class:`EventStore` is given at construction).
"""

from __future__ import annotations

import hashlib

from hub.core.events import Change
from hub.core.packed import Packed
from hub.live.feed import FeedHub
from hub.store.event_store import Appended, EventStore


class Ingest:
    def __init__(self, store: EventStore, feeds: FeedHub) -> None:
        self.store = store
        self.feeds = feeds

    async def append(
        self,
        topic: str,
        changes: list[Change] | Packed,
        *,
        digest: str = "",
        idempotency_key: str | None = None,
    ) -> Appended:
        """Store ``changes`` atomically (:meth:`EventStore.append`), then hand them to the
        live feed, which writes its clients a pass of the loop later
        (:meth:`TopicFeed._push`), after this 202 (the lean publish answers first, then
        calls :meth:`appended` itself)."""
        stored = await self.store.append(
            topic, changes, digest=digest, idempotency_key=idempotency_key, node=self.feeds.own_node
        )
        return self.appended(topic, stored)

    def appended(self, topic: str, stored: Appended) -> Appended:
        """What was stored in ``topic``, handed to the live feed (:meth:`append` does it;
        a caller of :meth:`EventStore.append_now` calls it with what it stored)."""
        if stored.replayed:
            self.feeds.unsure(topic)
        else:
            self.feeds.published(topic, stored)
        return stored

    async def append_unseen(self, topic: str, changes: list[Change]) -> list[str]:
        """A publish ping's changes: store those no earlier ping of ``topic`` stored (by
        their stored JSON's digest, remembered for the idempotency period); their ids."""
        digests = [hashlib.sha1(c.event, usedforsecurity=False).hexdigest() for c in changes]
        unseen = await self.store.unseen(topic, digests)
        fresh = [(c, d) for c, d, new in zip(changes, digests, unseen, strict=True) if new]
        if not fresh:
            return []
        ids = (await self.append(topic, [c for c, _ in fresh])).ids
        await self.store.remember(topic, [d for _, d in fresh], self.store.idempotency_seconds)
        return ids

"""The change history pushed to a hub, in order, each change once across restarts.

What is pushed next is the inventory's pending push (:meth:`Inventory.next_push`): marked
in the state file before it is sent, with an Idempotency-Key of its own, and sent through
:meth:`publisher.client.Publisher.send_body`, which retries a failing or unreachable hub with
back-off and that same key until it is stored. Changes seen meanwhile wait in the history
and go in the next notifications (``batch`` changes at most each), so a hub that was down
for an hour gets the hour's changes in a few notifications, not one by one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from publisher.changes import notification
from publisher.client import Publisher
from publisher.exceptions import PublishRejected

from .documents import Site, change_entry
from .inventory import ChangeRecord, Inventory

__all__ = ["Pusher"]

log = logging.getLogger(__name__)


class Pusher:
    """Push ``inventory``'s unpushed changes through ``publisher``; ``save`` writes the
    state file (awaited before a push is sent and after it is stored)."""

    def __init__(
        self,
        inventory: Inventory,
        site: Site,
        publisher: Publisher,
        save: Callable[[], Awaitable[None]],
        *,
        batch: int = 1000,
    ) -> None:
        self.inventory = inventory
        self.site = site
        self.publisher = publisher
        self.save = save
        self.batch = batch
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """New changes were recorded."""
        self._wake.set()

    async def run(self) -> None:
        """Push until cancelled."""
        while True:
            self._wake.clear()  # before the look: changes recorded during it wake the next
            await self.push_all()
            await self._wake.wait()

    def _notification(self, changes: Sequence[ChangeRecord]) -> bytes:
        entries = [change_entry(self.site, c) for c in changes]
        return notification(entries, up=self.publisher.up)

    async def push_all(self) -> None:
        """Push every change recorded so far."""
        inventory = self.inventory
        while (pending := inventory.next_push(self.batch)) is not None:
            await self.save()  # the pending mark is on disk before anything is sent
            changes = inventory.history[pending.first : pending.first + pending.count]
            # Built in a thread: a thousand entries, validated, are tens of milliseconds.
            body = await asyncio.to_thread(self._notification, changes)
            try:
                result = await self.publisher.send_body(body, idempotency_key=pending.key)
            except PublishRejected as exc:
                # A refusal that no retry changes (a bad token, a topic the hub refuses):
                # said, and the push stops here; restarting the Source sends it again.
                log.error(
                    "the hub refused changes %d..%d: %s",
                    pending.first,
                    pending.first + pending.count - 1,
                    exc,
                )
                raise
            inventory.pushed_through(pending)
            await self.save()
            log.info(
                "pushed %d changes to %s%s",
                pending.count,
                self.publisher.url,
                " (the hub had them already)" if result.replayed else "",
            )

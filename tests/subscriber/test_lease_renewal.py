"""The WebSub receiver renews its lease before it ends, so deliveries never stop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from hub.store.subscriptions import SubscriptionStore
from subscriber.callback import CallbackReceiver
from tests.conftest import Hub
from tests.support import changes, notification, wait_for


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"lease_seconds_min": 1}


async def test_receiver_renews_its_lease(hub: Hub) -> None:
    store = SubscriptionStore(hub.redis)
    async with aiohttp.ClientSession() as session:
        receiver = CallbackReceiver(session, hub.url, "lease", lease_seconds=2)
        await receiver.start()
        try:
            await receiver.subscribe()
            assert receiver.granted_lease == 2

            async def stored() -> bool:  # the hub stores it after its verification GET
                return await store.get("lease", receiver.callback_url) is not None

            await wait_for(stored, timeout=10)
            sub = await store.get("lease", receiver.callback_url)
            assert sub is not None
            first_expiry = sub.expires_at

            async def renewed() -> bool:
                again = await store.get("lease", receiver.callback_url)
                return again is not None and again.expires_at > first_expiry

            await wait_for(renewed, timeout=10)
            # Past the end of the first lease the subscription still delivers.
            await wait_for(lambda: time.time() > first_expiry + 0.2, timeout=10)
            ids = (await (await hub.publish("lease", notification(changes(2)))).json())["ids"]
            batches = receiver.batches()
            got: list[str] = []
            async with asyncio.timeout(10):
                while len(got) < 2:
                    got += [str(e.id) for e in await anext(batches)]
            assert got == ids
        finally:
            await receiver.close()

"""Hand-over without duplicates: hubs that start together and take subscriptions at once
send every change exactly once while the subscriptions settle over them.

Before a claim checked the holder's own heartbeat, a hub whose view of the live nodes was a
tick old took leases a live peer still held, and both delivered the batch in flight.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import aiohttp
import pytest

from hub.core.settings import Settings
from hub.web.app import RUNTIME
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import changes, free_port, notification, wait_for

pytestmark = pytest.mark.timeout(120)

HUBS = 3
SUBSCRIBERS = 6
PUBLISHES = 24


def settings() -> Settings:
    return Settings(
        host="127.0.0.1",
        port=free_port(),
        allow_private_callbacks=True,
        changelist_scan_seconds=0,
        ownership_lease_seconds=1.5,
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_hubs_started_together_send_nothing_twice(redis_url: str, seed: int) -> None:
    rnd = random.Random(seed)
    topic = f"handover{seed}"
    all_settings = [settings() for _ in range(HUBS)]
    started = await asyncio.gather(*(start_hub(s, redis_url) for s in all_settings))
    # Each delivery stays in flight a moment, as a real callback's does.
    callbacks = [CallbackServer(delay=0.05) for _ in range(SUBSCRIBERS)]
    for cb in callbacks:
        await cb.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def subscribe(i: int) -> None:
                hub_url = all_settings[i % HUBS].public_url
                form = {
                    "hub.mode": "subscribe",
                    "hub.topic": f"{hub_url}/topics/{topic}",
                    "hub.callback": callbacks[i].url,
                }
                async with session.post(hub_url + "/", data=form) as resp:
                    assert resp.status == 202, await resp.text()

            await asyncio.gather(*(subscribe(i) for i in range(SUBSCRIBERS)))
            runtimes = [app[RUNTIME] for _, app in started]

            def all_known() -> bool:
                return all(
                    all((topic, cb.url) in rt.ownership.known for cb in callbacks)
                    for rt in runtimes
                )

            await wait_for(all_known, timeout=10)
            # Publish while the subscriptions settle over the three hubs.
            published: list[str] = []
            for n in range(PUBLISHES):
                hub_url = all_settings[rnd.randrange(HUBS)].public_url
                async with session.post(
                    f"{hub_url}/topics/{topic}",
                    data=notification(changes(3, start=3 * n)),
                    headers={"Content-Type": "application/xml"},
                ) as resp:
                    assert resp.status == 202, await resp.text()
                    published.extend((await resp.json())["ids"])
                await asyncio.sleep(rnd.uniform(0.02, 0.15))

            def all_delivered() -> bool:
                return all(set(published) <= set(cb.ids) for cb in callbacks)

            await wait_for(all_delivered, timeout=20)
            # Let the hubs settle: a second owner would deliver its batch within a tick.
            await wait_for(
                lambda: (
                    sum(len(rt.ownership.held) for rt in runtimes) == SUBSCRIBERS
                    and all(set(rt.ownership.held) <= set(rt.ownership._wanted) for rt in runtimes)
                ),
                timeout=10,
            )
            duplicates = {
                cb.url: sum(n - 1 for n in Counter(cb.ids).values() if n > 1) for cb in callbacks
            }
            assert sum(duplicates.values()) == 0, duplicates
            for cb in callbacks:
                assert cb.ids == published, "every change once, in order"
    finally:
        for cb in callbacks:
            await cb.stop()
        for runner, _ in started:
            await runner.cleanup()

"""Hand-over without duplicates: hubs that start together and take subscriptions at once
send every change exactly once while the subscriptions settle over them.

Before a claim checked the holder's own heartbeat, a hub whose view of the live nodes was a
tick old took leases a live peer still held, and both delivered the batch in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import aiohttp
import pytest
from aiohttp import web

from hub.core.settings import Settings
from hub.web.app import RUNTIME
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for

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


async def test_a_stopping_owner_finishes_its_post_and_hands_over_at_once(redis_url: str) -> None:
    """Shutdown while a POST is in flight: it finishes, its cursor is committed and the
    lease released, so the other hub carries on from there well before a lease passes."""
    topic = "handover-stop"
    lease = 3.0
    a_settings = Settings(
        host="127.0.0.1",
        port=free_port(),
        allow_private_callbacks=True,
        changelist_scan_seconds=0,
        ownership_lease_seconds=lease,
    )
    b_settings = a_settings.model_copy(update={"port": free_port()})
    runner_a, app_a = await start_hub(a_settings, redis_url)
    runner_b, app_b = await start_hub(b_settings, redis_url)
    runners = {id(app_a): runner_a, id(app_b): runner_b}
    callback = await CallbackServer(delay=0.4).start()
    try:
        async with aiohttp.ClientSession() as session:
            hub_url = b_settings.public_url
            form = {
                "hub.mode": "subscribe",
                "hub.topic": f"{hub_url}/topics/{topic}",
                "hub.callback": callback.url,
            }
            async with session.post(hub_url + "/", data=form) as resp:
                assert resp.status == 202
            key = (topic, callback.url)
            apps = {id(app_a): app_a, id(app_b): app_b}

            def owner() -> web.Application | None:
                running = [a for a in apps.values() if key in a[RUNTIME].delivery.workers]
                return running[0] if len(running) == 1 else None

            await wait_for(lambda: owner() is not None, timeout=10)
            published: list[str] = []

            async def publish(n: int, via: web.Application | None = None) -> None:
                url = via[RUNTIME].settings.public_url if via is not None else hub_url
                async with session.post(
                    f"{url}/topics/{topic}",
                    data=notification(changes(2, start=2 * n)),
                    headers={"Content-Type": "application/xml"},
                ) as resp:
                    assert resp.status == 202
                    published.extend((await resp.json())["ids"])

            await publish(0)
            first_owner = owner()
            assert first_owner is not None
            worker = first_owner[RUNTIME].delivery.workers[key]
            await wait_for(lambda: worker.posting, timeout=10)  # a POST is in flight
            await publish(1)
            stopping = time.monotonic()
            await runners.pop(id(first_owner)).cleanup()
            other = app_b if first_owner is app_a else app_a
            await wait_for(lambda: key in other[RUNTIME].delivery.workers, timeout=10)
            took_over = time.monotonic() - stopping
            await publish(2, via=other)
            await wait_for(lambda: set(published) <= set(callback.ids), timeout=15)
            assert callback.ids == published, "every change once, in order"
            print(f"stopped while a POST was in flight: taken over in {took_over:.2f}s")
            # The POST in flight (0.4 s), then at once: the leaving hub announces it left.
            assert took_over < (0.4 + lease / 6) * TIME_SCALE, f"taken over after {took_over:.2f}s"
    finally:
        await callback.stop()
        for runner in runners.values():
            await runner.cleanup()

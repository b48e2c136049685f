"""Two hub apps on one Redis: subscriptions are delivered by one owner and handed over with
their delivery state (failures, back-off, suspension) intact."""

from __future__ import annotations

import aiohttp

from hub.core.settings import Settings
from hub.store import keys
from hub.store.subscriptions import State, SubscriptionStore
from hub.web.app import RUNTIME
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import changes, free_port, notification, wait_for


def settings() -> Settings:
    return Settings(
        host="127.0.0.1",
        port=free_port(),
        allow_private_callbacks=True,
        retry_base_seconds=0.2,
        retry_max_seconds=0.4,
        suspend_after_failures=6,
        ownership_lease_seconds=1.0,
        changelist_scan_seconds=0,
    )


async def test_a_new_owner_continues_the_back_off_and_suspension(redis_url: str) -> None:
    a_settings, b_settings = settings(), settings()
    runner_a, app_a = await start_hub(a_settings, redis_url)
    runner_b, app_b = await start_hub(b_settings, redis_url)
    stopped = set()
    callback = await CallbackServer(statuses=[500] * 8).start()  # 503 never suspends
    try:
        async with aiohttp.ClientSession() as session:
            form = {
                "hub.mode": "subscribe",
                "hub.topic": f"{b_settings.public_url}/topics/t",
                "hub.callback": callback.url,
            }
            async with session.post(b_settings.public_url + "/", data=form) as resp:
                assert resp.status == 202
            store = SubscriptionStore(app_a[RUNTIME].connections.main)
            await wait_for(lambda: store.get("t", callback.url), timeout=10)
            async with session.post(
                f"{a_settings.public_url}/topics/t",
                data=notification(changes(1)),
                headers={"Content-Type": "application/xml"},
            ) as resp:
                assert resp.status == 202
                (event_id,) = (await resp.json())["ids"]

            async def failures() -> int:
                sub = await store.get("t", callback.url)
                return sub.failures if sub else -1

            async def failed_twice() -> bool:
                return await failures() >= 2

            await wait_for(failed_twice, timeout=15)
            running = [
                app
                for app in (app_a, app_b)
                if ("t", callback.url) in app[RUNTIME].delivery.workers
            ]
            assert len(running) == 1, "exactly one process delivers the subscription"
            owner = running[0]
            entry = await app_a[RUNTIME].connections.main.hget(keys.owners("t"), callback.url)
            assert entry.decode().startswith(owner[RUNTIME].ownership.node)
            before = await failures()
            await (runner_a if owner is app_a else runner_b).cleanup()
            stopped.add(id(owner))
            other = app_b if owner is app_a else app_a
            await wait_for(
                lambda: ("t", callback.url) in other[RUNTIME].delivery.workers, timeout=10
            )
            seen = [before]

            async def continued() -> bool:
                seen.append(await failures())
                return seen[-1] >= 6

            await wait_for(continued, timeout=20)
            assert min(seen) >= before, f"the count restarted: {seen}"
            sub = await store.get("t", callback.url)
            assert sub is not None and sub.state is State.SUSPENDED and sub.retry_at > 0
            await wait_for(lambda: callback.ids == [event_id], timeout=20)  # then it recovers
            await wait_for(lambda: _state_is(store, callback.url, State.ACTIVE), timeout=10)
    finally:
        await callback.stop()
        for runner, app in ((runner_a, app_a), (runner_b, app_b)):
            if id(app) not in stopped:
                await runner.cleanup()


async def _state_is(store: SubscriptionStore, callback: str, state: State) -> bool:
    sub = await store.get("t", callback)
    return sub is not None and sub.state is state and sub.failures == 0

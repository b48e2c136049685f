"""The latest (un)subscription request for a subscription wins, however its verifications
end and whichever hub process takes each request: a seeded fuzz against real hubs, Redis
and a callback server (``SubscriptionStore.activate_latest``)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis.asyncio
from aiohttp import web

from hub.core.settings import Settings
from hub.store import keys
from hub.store.script_pipe import ScriptPipe
from hub.store.subscriptions import Subscription, SubscriptionStore
from tests.conftest import Hub, start_hub
from tests.support import free_port, wait_for

SEED = 20261125
#: Bursts of 2-6 requests, the state checked after each.
EPISODES = 40
CALLBACKS = ("a", "b", "c")
#: Outcomes the hub logs, one per request (hub.live.delivery).
OUTCOMES = ("subscribed ", "unsubscribed ", "verification of ", "verified ")


@dataclass
class Plan:
    """How the callback answers a subscribe's verification, found by its lease (a tag)."""

    delay: float
    confirm: bool
    #: Answer only once this is set (then after ``delay``).
    release: asyncio.Event | None = None


@pytest.fixture
async def callback_base() -> AsyncIterator[tuple[str, dict[int, Plan], random.Random]]:
    plans: dict[int, Plan] = {}
    delays = random.Random(SEED + 1)

    async def verify(request: web.Request) -> web.Response:
        query = request.query
        if query["hub.mode"] == "subscribe":
            plan = plans[int(query["hub.lease_seconds"])]
            delay, confirm = plan.delay, plan.confirm
            if plan.release is not None:
                async with asyncio.timeout(10):
                    await plan.release.wait()
        else:  # unsubscribes carry no tag: always confirmed, after a random while
            delay, confirm = delays.uniform(0, 0.02), True
        await asyncio.sleep(delay)  # a slow subscriber: verifications end out of order
        if not confirm:
            return web.Response(status=404, text="not wanted")
        return web.Response(text=query["hub.challenge"])

    app = web.Application()
    app.router.add_get("/cb/{name}", verify)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/cb", plans, random.Random(SEED)
    finally:
        await runner.cleanup()


@pytest.fixture(params=[1, 2], ids=["one-hub", "two-hubs"])
async def hub_urls(
    request: pytest.FixtureRequest, hub: Hub, redis_url: str
) -> AsyncIterator[list[str]]:
    """The hubs requests go to: ``hub``, and with two another hub process's worth (its own
    app, delivery service and Redis clients) on the same Redis, in this process."""
    if request.param == 1:
        yield [hub.url]
        return
    settings = Settings(host="127.0.0.1", port=free_port(), allow_private_callbacks=True)
    runner, _app = await start_hub(settings, redis_url)
    try:
        yield [hub.url, settings.public_url]
    finally:
        await runner.cleanup()


def outcomes(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the hubs logged of each request they verified, in order."""
    return [
        m
        for r in caplog.records
        if r.name == "hub.live.delivery" and (m := r.getMessage()).startswith(OUTCOMES)
    ]


@pytest.mark.parametrize("hub_urls", [2], indirect=True, ids=["two-hubs"])
async def test_a_subscribe_stored_after_a_later_unsubscribe_on_another_hub_is_dropped(
    hub: Hub,
    hub_urls: list[str],
    callback_base: tuple[str, dict[int, Plan], random.Random],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Subscribe through one hub process, whose callback answers only after the
    unsubscribe sent next through another process was verified and stored."""
    caplog.set_level(logging.INFO, logger="hub.live.delivery")
    base, plans, _ = callback_base
    callback, release = f"{base}/a", asyncio.Event()
    plans[3_600] = Plan(delay=0, confirm=True, release=release)
    for to, mode in zip(hub_urls, ("subscribe", "unsubscribe"), strict=True):
        form = {"hub.mode": mode, "hub.topic": f"{to}/topics/t", "hub.callback": callback}
        if mode == "subscribe":
            form["hub.lease_seconds"] = "3600"
        resp = await hub.session.post(to + "/", data=form)
        assert resp.status == 202, await resp.text()
    await wait_for(lambda: any(m.startswith("unsubscribed") for m in outcomes(caplog)))
    release.set()
    await wait_for(lambda: len(outcomes(caplog)) == 2)
    assert outcomes(caplog)[1].startswith("verified subscribe"), outcomes(caplog)
    listed = await (await hub.session.get(f"{hub.url}/topics/t/subscriptions")).json()
    assert listed["subscriptions"] == []


async def test_seeded_fuzz_the_latest_confirmed_request_decides(
    hub: Hub,
    hub_urls: list[str],
    redis_url: str,
    callback_base: tuple[str, dict[int, Plan], random.Random],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="hub.live.delivery")
    base, plans, rng = callback_base
    topic_url = f"{hub.url}/topics/t"
    expected: dict[str, bool] = {}  # callback -> subscribed once every request ended

    sent = 0
    for episode in range(EPISODES):
        # A burst of requests whose verifications race, then the state is checked.
        for _ in range(rng.randint(2, 6)):
            callback = f"{base}/{rng.choice(CALLBACKS)}"
            to = hub_urls[sent % len(hub_urls)]  # by turns: a callback's requests mix hubs
            form = {"hub.topic": f"{to}/topics/t", "hub.callback": callback}
            if rng.random() < 0.55:
                lease = 3_600 + sent
                plans[lease] = Plan(delay=rng.uniform(0.005, 0.05), confirm=rng.random() < 0.8)
                form |= {"hub.mode": "subscribe", "hub.lease_seconds": str(lease)}
                if plans[lease].confirm:
                    expected[callback] = True
            else:
                form["hub.mode"] = "unsubscribe"
                expected[callback] = False
            resp = await hub.session.post(to + "/", data=form)
            assert resp.status == 202, await resp.text()
            sent += 1
        await wait_for(lambda n=sent: len(outcomes(caplog)) >= n, 30)  # type: ignore[misc]
        assert len(outcomes(caplog)) == sent, outcomes(caplog)
        listed = await (await hub.session.get(f"{topic_url}/subscriptions")).json()
        subscribed = {row["callback"] for row in listed["subscriptions"]}
        assert subscribed == {cb for cb, on in expected.items() if on}, (
            f"episode {episode}: expected {expected}; log: {outcomes(caplog)[-8:]}"
        )
    # The seed makes verifications end out of order: the rule was exercised.
    assert any(m.startswith("verified ") for m in outcomes(caplog)), outcomes(caplog)
    # Redis keeps one request number per callback (and the counter), until they may go.
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        numbers = await client.hgetall(keys.requests("t"))
    finally:
        await client.aclose()
    assert len(numbers) == len(CALLBACKS) + 1, numbers


async def test_the_store_keeps_request_numbers_only_while_an_older_request_may_store(
    redis_url: str,
) -> None:
    """``activate_latest``/``delete_latest`` refuse a request older than the one stored and
    change nothing then; a stored number is forgotten once its time is up, by a later
    arrival (at most 100 a call), so the hash holds only recent callbacks."""
    client = redis.asyncio.Redis.from_url(redis_url)
    pipe = ScriptPipe(client)
    store = SubscriptionStore(client, scripts=pipe)
    topic = "marks"

    def sub(callback: str, lease: int) -> Subscription:
        return Subscription(
            topic=topic,
            topic_url=f"http://hub.invalid/topics/{topic}",
            callback=callback,
            lease_seconds=lease,
            expires_at=time.time() + lease,
        )

    try:
        first, second, third = [await store.request_arrived(topic) for _ in range(3)]
        assert 0 < first < second < third
        # Redis lost its data (the counter with it): later numbers are still larger.
        await client.delete(keys.requests(topic))
        assert await store.request_arrived(topic) > third
        await client.delete(keys.requests(topic))
        cb = "http://cb.invalid/a"
        assert await store.activate_latest(sub(cb, 100), None, third, 60_000) == "0-0"
        assert await store.activate_latest(sub(cb, 200), None, first, 60_000) is None
        assert not await store.delete_latest(topic, cb, second, 60_000)
        kept = await store.get(topic, cb)
        assert kept is not None and kept.lease_seconds == 100  # nothing changed
        # The stored number goes when its time is up; the record stays.
        others = [f"http://cb.invalid/{i}" for i in range(150)]
        for other in others:
            number = await store.request_arrived(topic)
            assert await store.activate_latest(sub(other, 100), None, number, 1)
        assert await store.delete_latest(topic, cb, await store.request_arrived(topic), 1)
        numbers = keys.requests(topic)

        async def forgotten() -> bool:
            await store.request_arrived(topic)  # prunes what expired
            return await client.hlen(numbers) == 1  # the counter only

        await wait_for(forgotten, 5)
        assert await client.zcard(keys.request_marks(topic)) == 0
        assert len(await client.hkeys(keys.subscriptions(topic))) == len(others)
    finally:
        await pipe.close()
        await client.aclose()

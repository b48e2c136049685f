"""The latest (un)subscription request for a subscription wins, however its verifications
end: a seeded fuzz against a real hub, Redis and callback server (hub/live/request_order.py)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web

from tests.conftest import Hub
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


@pytest.fixture
async def callback_base() -> AsyncIterator[tuple[str, dict[int, Plan], random.Random]]:
    plans: dict[int, Plan] = {}
    delays = random.Random(SEED + 1)

    async def verify(request: web.Request) -> web.Response:
        query = request.query
        if query["hub.mode"] == "subscribe":
            plan = plans[int(query["hub.lease_seconds"])]
            delay, confirm = plan.delay, plan.confirm
        else:  # unsubscribes carry no tag: always confirmed, after a random while
            delay, confirm = delays.uniform(0, 0.03), True
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


async def test_seeded_fuzz_the_latest_confirmed_request_decides(
    hub: Hub,
    callback_base: tuple[str, dict[int, Plan], random.Random],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="hub.live.delivery")
    base, plans, rng = callback_base
    topic_url = f"{hub.url}/topics/t"
    expected: dict[str, bool] = {}  # callback -> subscribed once every request ended

    def outcomes() -> list[str]:
        return [
            m
            for r in caplog.records
            if r.name == "hub.live.delivery" and (m := r.getMessage()).startswith(OUTCOMES)
        ]

    sent = 0
    for episode in range(EPISODES):
        # A burst of requests whose verifications race, then the state is checked.
        for _ in range(rng.randint(2, 6)):
            callback = f"{base}/{rng.choice(CALLBACKS)}"
            form = {"hub.topic": topic_url, "hub.callback": callback}
            if rng.random() < 0.55:
                lease = 3_600 + sent
                plans[lease] = Plan(delay=rng.uniform(0, 0.04), confirm=rng.random() < 0.8)
                form |= {"hub.mode": "subscribe", "hub.lease_seconds": str(lease)}
                if plans[lease].confirm:
                    expected[callback] = True
            else:
                form["hub.mode"] = "unsubscribe"
                expected[callback] = False
            resp = await hub.session.post(hub.url + "/", data=form)
            assert resp.status == 202, await resp.text()
            sent += 1
        await wait_for(lambda n=sent: len(outcomes()) >= n, 30)  # type: ignore[misc]
        assert len(outcomes()) == sent, outcomes()
        listed = await (await hub.session.get(f"{topic_url}/subscriptions")).json()
        subscribed = {row["callback"] for row in listed["subscriptions"]}
        assert subscribed == {cb for cb, on in expected.items() if on}, (
            f"episode {episode}: expected {expected}; log: {outcomes()[-8:]}"
        )
    # The seed makes verifications end out of order: the rule was exercised.
    assert any(m.startswith("verified ") for m in outcomes()), outcomes()
    from hub.web.app import RUNTIME

    assert len(hub.app[RUNTIME].delivery._order) == 0  # nothing kept once all ended

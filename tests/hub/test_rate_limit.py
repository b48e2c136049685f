"""A subscription's delivery rate limit, on a real hub, Redis and callback.

The limit shapes deliveries into bigger batches and never drops a change: published faster
than the limit, every event still arrives, in order, while the POSTs stay within it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from hub.core.placement import subscription_id
from hub.core.token_bucket import RateLimit
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_admin_api import admin
from tests.hub.test_websub import subscribe
from tests.support import TIME_SCALE, changes, notification, wait_for

ADMIN = {"Authorization": "Bearer adm"}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"admin_token": "adm"}


class Timed(CallbackServer):
    """A callback that notes when each delivery arrived."""

    times: list[float]

    async def _deliver(self, request: web.Request) -> web.Response:
        self.times.append(time.monotonic())
        return await super()._deliver(request)


@pytest.fixture
async def callback() -> AsyncIterator[Timed]:
    server = Timed()
    server.times = []
    await server.start()
    yield server
    await server.stop()


def worker(hub: Hub, cb: CallbackServer) -> Any:
    return hub.app[RUNTIME].delivery.workers[("t", cb.url)]


def limit(hub: Hub, cb: CallbackServer) -> RateLimit | None:
    """The limit the subscription's worker applies (None while it restarts)."""
    found = hub.app[RUNTIME].delivery.workers.get(("t", cb.url))
    return None if found is None else found.terms.rate_limit  # type: ignore[no-any-return]


def subscribers_limit(hub: Hub, cb: CallbackServer) -> object:
    found = hub.app[RUNTIME].delivery.workers.get(("t", cb.url))
    return "restarting" if found is None else found.sub.rate_limit


async def test_publishing_above_the_limit_delivers_everything_in_order_within_it(
    hub: Hub, callback: Timed
) -> None:
    rate, burst = 5.0, 2
    await subscribe(hub, callback, **{"hub.rate_limit": f"{rate:g},{burst}"})
    assert worker(hub, callback).terms.rate_limit == RateLimit(rate, burst)
    ids: list[str] = []
    began = time.monotonic()
    i = 0
    while time.monotonic() - began < 1.5:  # ~50 publishes/s, ten times the limit
        resp = await hub.publish("t", notification(changes(1, start=i)))
        ids += (await resp.json())["ids"]
        i += 1
        await asyncio.sleep(0.02)  # the publisher's pace, not a wait for the hub
    published_for = time.monotonic() - began
    await wait_for(lambda: len(callback.ids) >= len(ids), 10)
    assert callback.ids == ids  # every event, in order, none twice
    posts = callback.times
    # Shaped into bigger batches: about one POST per 1/rate s where the publisher made
    # len(ids) / published_for events a second (on a busy machine it makes fewer, and
    # batches are smaller: the bound follows the pace it measured, not a fixed 50/s).
    pace = len(ids) / published_for
    assert pace > 2 * rate, pace  # the case this test is about: publishing above the limit
    assert len(posts) <= 1.5 * len(ids) * rate / pace + burst + 1, (len(posts), len(ids))
    # Within the limit: in any stretch of POSTs, at most burst + rate x its duration.
    slack = 1 + 0.2 * TIME_SCALE * rate  # one POST's arrival late by up to 0.2 s
    for first in range(len(posts)):
        for last in range(first + 1, len(posts)):
            allowed = burst + rate * (posts[last] - posts[first]) + slack
            assert last - first + 1 <= allowed, (first, last, posts)


async def test_the_admin_sets_and_removes_a_limit_that_outlives_resubscriptions(
    hub: Hub, callback: Timed
) -> None:
    await subscribe(hub, callback, **{"hub.rate_limit": "50"})
    path = f"/admin/subscriptions/{subscription_id('t', callback.url)}/rate-limit"
    shown = await admin(hub, "GET", path)
    assert (shown["per_second"], shown["burst"], shown["source"]) == (50.0, 50, "subscriber")
    await admin(hub, "PUT", path, 401, headers={}, json={"per_second": 1})
    body = await admin(hub, "PUT", path, json={"per_second": 0.5, "burst": 3})
    assert (body["per_second"], body["burst"], body["source"]) == (0.5, 3, "admin")
    await wait_for(lambda: limit(hub, callback) == RateLimit(0.5, 3))
    # The subscriber's renewal keeps the operator's limit.
    await subscribe(hub, callback, **{"hub.rate_limit": "40"})
    await wait_for(lambda: subscribers_limit(hub, callback) == [40.0, 40])
    assert worker(hub, callback).terms.rate_limit == RateLimit(0.5, 3)
    body = await admin(hub, "DELETE", path)
    assert (body["per_second"], body["source"]) == (40.0, "subscriber")
    await wait_for(lambda: limit(hub, callback) == RateLimit(40.0, 40))
    # Without either, the settings' default.
    await subscribe(hub, callback)
    await wait_for(lambda: subscribers_limit(hub, callback) is None)
    expected = RateLimit(hub.settings.delivery_rate_per_second, hub.settings.delivery_rate_burst)
    assert worker(hub, callback).terms.rate_limit == expected
    assert (await admin(hub, "GET", path))["source"] == "default"


@pytest.mark.parametrize(
    ("body", "status", "named"),
    [
        ({"per_second": "fast"}, 400, "per_second"),
        ({"per_second": True}, 400, "per_second"),
        ({"burst": 2}, 400, "per_second"),
        ({"per_second": -1}, 400, "deliveries per second"),
        ({"per_second": 1e12}, 400, "deliveries per second"),
        ({"per_second": 2, "burst": 0}, 400, "burst"),
        ({"per_second": 2, "burst": 2.5}, 400, "burst"),
        ({"per_second": 2, "extra": 1}, 400, "per_second"),
        ([2, 3], 400, "object"),
    ],
)
async def test_a_bad_admin_rate_limit_is_a_4xx_naming_it_and_changes_nothing(
    hub: Hub, callback: Timed, body: Any, status: int, named: str
) -> None:
    await subscribe(hub, callback)
    path = f"/admin/subscriptions/{subscription_id('t', callback.url)}/rate-limit"
    answer = await admin(hub, "PUT", path, status, json=body)
    assert named in answer["error"]
    stored = await hub.app[RUNTIME].subscriptions.get("t", callback.url)
    assert stored is not None and stored.admin_rate_limit is None


async def test_the_admin_rate_limit_route_refuses_odd_requests(hub: Hub) -> None:
    await admin(
        hub, "PUT", "/admin/subscriptions/0123456789ab/rate-limit", 404, json={"per_second": 1}
    )
    await admin(hub, "PUT", "/admin/subscriptions/nope/rate-limit", 400, json={"per_second": 1})
    answer = await admin(
        hub, "PUT", "/admin/subscriptions/0123456789ab/rate-limit", 415, data=b"per_second=1"
    )
    assert "JSON" in answer["error"]
    answer = await admin(
        hub,
        "PUT",
        "/admin/subscriptions/0123456789ab/rate-limit",
        400,
        data=b"{nope",
        headers={**ADMIN, "Content-Type": "application/json"},
    )
    assert "not JSON" in answer["error"]

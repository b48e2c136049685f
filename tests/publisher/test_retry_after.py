"""A ``Retry-After`` (seconds or HTTP-date) from the hub or an event stream lengthens the
client's next wait, up to its cap: the publisher's POST retry and ``EventSource``."""

from __future__ import annotations

import time
from email.utils import formatdate

import aiohttp
from aiohttp import web

from publisher import Publisher, RetryPolicy
from publisher.sse import EventSource
from tests.conftest import Hub
from tests.support import TIME_SCALE

from .helpers import entries, serve, stored_events


def _slack() -> float:
    """Taken when used: the load factor is the test's own, not the one at import."""
    return 0.5 * TIME_SCALE


class Throttle:
    """In front of the hub: answers the first ``refuse`` POSTs 429 with ``Retry-After``
    (``value()``), forwards the others; notes when each came."""

    def __init__(self, upstream: str, value: str | None = None, *, refuse: int = 1) -> None:
        self.upstream, self.value, self.refuse = upstream, value, refuse
        self.times: list[float] = []
        self.app = web.Application()
        self.app.router.add_post("/{tail:.*}", self._post)

    async def _post(self, request: web.Request) -> web.Response:
        self.times.append(time.monotonic())
        body = await request.read()
        if self.refuse > 0:
            self.refuse -= 1
            value = self.value or formatdate(time.time() + 3, usegmt=True)
            return web.json_response(
                {"error": "slow down"}, status=429, headers={"Retry-After": value}
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() == "idempotency-key"}
        headers["Content-Type"] = "application/xml"
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.upstream + request.path, data=body, headers=headers) as resp,
        ):
            return web.Response(
                body=await resp.read(), status=resp.status, content_type="application/json"
            )


async def test_the_publisher_waits_for_an_http_date_retry_after(hub: Hub, redis_url: str) -> None:
    throttle = Throttle(hub.url)  # an HTTP-date 2-3 s ahead
    async with serve(throttle.app) as base:
        async with Publisher(base, "t", retry=RetryPolicy(base=0.01, max_delay=10)) as pub:
            ids = await pub.publish(entries(2))
    gap = throttle.times[1] - throttle.times[0]
    assert 1.9 <= gap <= 3 + _slack(), gap  # before: 0.005-0.01 s, the header was ignored
    assert ids == [e["id"] for e in await stored_events(redis_url, "t")]


async def test_the_publisher_caps_a_retry_after_at_max_delay(hub: Hub) -> None:
    throttle = Throttle(hub.url, "86400")
    async with serve(throttle.app) as base:
        async with Publisher(base, "t", retry=RetryPolicy(base=0.01, max_delay=0.5)) as pub:
            await pub.publish(entries(1))
    gap = throttle.times[1] - throttle.times[0]
    assert 0.45 <= gap <= 0.5 + _slack(), gap


async def test_event_source_waits_for_retry_after_on_503() -> None:
    times: list[float] = []

    async def stream(request: web.Request) -> web.StreamResponse:
        times.append(time.monotonic())
        if len(times) == 1:
            return web.Response(status=503, headers={"Retry-After": "1"})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'id: 1\ndata: {"n": 1}\n\n')
        return resp

    app = web.Application()
    app.router.add_get("/stream", stream)
    async with serve(app) as base:
        async for event in EventSource(f"{base}/stream", reconnect_delay=0.01):
            assert event.id == "1"
            break
    assert 0.95 <= times[1] - times[0] <= 1 + _slack()  # before: 0.005-0.01 s

"""Publish pings are rate-limited per client address: 429 with Retry-After, no fetch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import Hub
from tests.hub.test_ping import Source
from tests.watchdog import Watchdog


class CountingSource(Source):
    """The pull-only Source, counting the hub's fetches."""

    def __init__(self) -> None:
        super().__init__()
        self.fetches = 0

    async def _serve(self, request: web.Request) -> web.Response:
        self.fetches += 1
        return await super()._serve(request)


@pytest.fixture
async def source() -> AsyncIterator[CountingSource]:
    server = await CountingSource().start()
    yield server
    await server.stop()


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"ping_rate_per_second": 0.2, "ping_burst": 3, "forwarded_allow_ips": ["127.0.0.1"]}


async def ping(hub: Hub, url: str, **headers: str) -> tuple[int, dict[str, Any], str | None]:
    form = {"hub.mode": "publish", "hub.url": url}
    async with hub.session.post(hub.url + "/", data=form, headers=headers) as resp:
        return resp.status, await resp.json(), resp.headers.get("Retry-After")


async def test_pings_beyond_the_burst_are_429_with_retry_after_and_fetch_nothing(
    hub: Hub, source: CountingSource
) -> None:
    for _ in range(3):
        status, _body, _ = await ping(hub, source.url)
        assert status == 202
    assert source.fetches == 3
    status, body, retry_after = await ping(hub, source.url)
    assert status == 429 and "too many publish pings" in body["error"]
    assert retry_after is not None and 1 <= int(retry_after) <= 5  # one token per 5 s
    assert body["retry_after"] == int(retry_after)
    assert source.fetches == 3  # refused before the hub fetched anything
    # Publishing by POST is not a ping: not limited.
    assert (await hub.publish("t", source.body)).status == 202


async def test_clients_behind_a_trusted_proxy_have_their_own_buckets(
    hub: Hub, source: CountingSource
) -> None:
    for _ in range(3):
        assert (await ping(hub, source.url, **{"X-Forwarded-For": "203.0.113.5"}))[0] == 202
    assert (await ping(hub, source.url, **{"X-Forwarded-For": "203.0.113.5"}))[0] == 429
    # Another client of the proxy, by either header; the closest proxy's entry counts.
    assert (await ping(hub, source.url, **{"X-Forwarded-For": "203.0.113.6"}))[0] == 202
    assert (await ping(hub, source.url, **{"Forwarded": 'for="[2001:db8::1]:4711"'}))[0] == 202
    spoofed = {"X-Forwarded-For": "203.0.113.9, 203.0.113.5"}
    assert (await ping(hub, source.url, **spoofed))[0] == 429
    # A name that is no address counts as the proxy itself (not a fresh bucket each time).
    async with Watchdog():
        for garbage in ("unknown", "x" * 5000, "_hidden", "999.1.1.1", "", "[::1", "1.2.3.4:x:y"):
            assert (await ping(hub, source.url, **{"X-Forwarded-For": garbage}))[0] < 500
    status, _body, _ = await ping(hub, source.url, **{"X-Forwarded-For": "not-an-ip"})
    assert status == 429


class TestUntrustedPeers:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"ping_rate_per_second": 0.2, "ping_burst": 2}

    async def test_forwarded_headers_from_an_untrusted_peer_change_nothing(
        self, hub: Hub, source: CountingSource
    ) -> None:
        for i in range(2):
            assert (await ping(hub, source.url, **{"X-Forwarded-For": f"198.51.100.{i}"}))[0] == 202
        status, _body, retry_after = await ping(hub, source.url, **{"X-Forwarded-For": "1.2.3.4"})
        assert status == 429 and retry_after is not None


class TestNoLimit:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"ping_rate_per_second": 0}

    async def test_zero_turns_the_limit_off(self, hub: Hub, source: CountingSource) -> None:
        for _ in range(30):
            assert (await ping(hub, source.url))[0] == 202

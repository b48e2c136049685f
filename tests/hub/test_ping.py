"""WebSub publish pings: the hub fetches the pinged URL and stores only what is new."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from hub.store import keys
from tests.conftest import Hub
from tests.support import changes, free_port, notification


class Source:
    """A pull-only Source on 127.0.0.1 serving one document whose content tests change."""

    def __init__(self) -> None:
        self.body = notification(changes(3, prefix="http://source.example/r"))
        self.status = 200
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _serve(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.body, status=self.status, content_type="application/xml")

    async def start(self) -> Source:
        app = web.Application()
        app.router.add_get("/notify.xml", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/notify.xml"
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()


@pytest.fixture
async def source() -> AsyncIterator[Source]:
    server = await Source().start()
    yield server
    await server.stop()


async def ping(hub: Hub, url: str) -> tuple[int, dict[str, Any]]:
    resp = await hub.session.post(hub.url + "/", data={"hub.mode": "publish", "hub.url": url})
    return resp.status, await resp.json()


async def test_ping_stores_only_changes_not_stored_before(hub: Hub, source: Source) -> None:
    status, first = await ping(hub, source.url)
    assert status == 202 and first["accepted"] == 3 and first["fetched"] == 3
    status, again = await ping(hub, source.url)
    assert status == 202 and again["accepted"] == 0
    source.body = notification(changes(4, prefix="http://source.example/r"))
    status, third = await ping(hub, source.url)
    assert third["accepted"] == 1 and third["topic"] == first["topic"]
    length = await hub.redis.xlen(keys.events(first["topic"]))
    assert length == 4


async def test_ping_failures_are_clear_and_store_nothing(hub: Hub, source: Source) -> None:
    source.status = 404
    status, body = await ping(hub, source.url)
    assert status == 502 and "HTTP 404" in body["error"]
    source.status, source.body = 200, b"<html>not a notification</html>"
    status, body = await ping(hub, source.url)
    assert status == 400
    status, body = await ping(hub, "http://127.0.0.1:1/closed.xml")
    assert status == 502
    assert await hub.redis.keys(keys.events("*")) == []


async def test_ping_for_a_hub_topic_is_a_no_op(hub: Hub) -> None:
    status, body = await ping(hub, f"{hub.url}/topics/local")
    assert status == 202 and body["accepted"] == 0 and body["topic"] == "local"


class TestPrivateAddresses:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"allow_private_callbacks": False}

    async def test_ping_to_a_private_address_is_refused(self, hub: Hub, source: Source) -> None:
        status, body = await ping(hub, source.url)
        assert status == 400 and "hub.url" in body["error"]

"""SSRF: the hub refuses to connect to non-public addresses, checked on the connected address.

The callbacks here are real servers on 127.0.0.1; the hub must not reach them unless
``allow_private_callbacks`` is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hub.core.exceptions import BadGateway, CallbackFailed
from hub.core.settings import Settings
from hub.live.http_client import HttpClient
from hub.web.app import RUNTIME
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import changes, free_port, notification, wait_for
from tests.watchdog import Watchdog


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"allow_private_callbacks": False}


#: Loopback spellings only, as everywhere in the tests: the other classes the hub refuses
#: (link-local, cloud metadata, private, NAT64, 6to4) are the pure classifier's cases in
#: tests/hub/core/test_addresses.py and test_address_registry.py, which connect nowhere.
@pytest.mark.parametrize(
    "host,why",
    [
        ("[::127.0.0.1]", "IPv4-compatible"),
        ("[::ffff:127.0.0.1]", "IPv4-mapped"),
        ("127.0.0.1", "loopback"),
        ("127.1", "loopback"),
        ("[::1]", "loopback"),
    ],
)
async def test_callbacks_on_non_public_addresses_are_refused(
    hub: Hub, callback: CallbackServer, host: str, why: str
) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/t",
        "hub.callback": f"http://{host}:{callback.port}/cb",
    }
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 400
    assert why in (await resp.json())["error"]
    assert callback.verifications == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_the_connected_address_is_checked_on_every_request(
    callback: CallbackServer, host: str
) -> None:
    """No name check before: the socket itself refuses (what stops DNS rebinding)."""
    client = HttpClient(Settings(allow_private_callbacks=False))
    url = f"http://{host}:{callback.port}/cb"
    try:
        with pytest.raises(CallbackFailed, match="refusing to connect to"):
            await client.post(url, notification(changes(1)), {"Content-Type": "application/xml"})
        with pytest.raises(CallbackFailed, match="a loopback address"):
            await client.get(url + "?hub.challenge=x", 100)
        with pytest.raises(BadGateway, match="refusing to connect to"):
            await client.fetch_document(url)
    finally:
        await client.close()
    assert callback.verifications == [] and callback.deliveries == []


async def test_a_stored_subscription_is_not_delivered_once_its_address_is_refused(
    redis_url: str, callback: CallbackServer
) -> None:
    """A subscription accepted earlier (as if its name then resolved to a public address)
    gets no delivery when the address connected to is private."""
    port = free_port()
    allowed = Settings(host="127.0.0.1", port=port, allow_private_callbacks=True)
    refused = Settings(host="127.0.0.1", port=port, retry_base_seconds=0.02)
    runner, app = await start_hub(allowed, redis_url)
    async with aiohttp.ClientSession() as session:
        hub = Hub(allowed.public_url, app, allowed, session)
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/t",
            "hub.callback": callback.url,
        }
        assert (await session.post(hub.url + "/", data=form)).status == 202
        await wait_for(lambda: len(callback.verifications) == 1)
        await hub.publish("t", notification(changes(1)))
        await wait_for(lambda: len(callback.deliveries) == 1)
        await runner.cleanup()

        runner, app = await start_hub(refused, redis_url)
        hub = Hub(refused.public_url, app, refused, session)
        await hub.publish("t", notification(changes(1, start=1)))
        from hub.store.subscriptions import SubscriptionStore

        store = SubscriptionStore(hub.redis)

        async def failed() -> bool:
            sub = await store.get("t", callback.url)
            return sub is not None and "refusing to connect" in (sub.last_error or "")

        await wait_for(failed)
        await runner.cleanup()
    assert len(callback.deliveries) == 1


class Listener:
    """A plain TCP listener on loopback that counts the connections it is offered."""

    def __init__(self) -> None:
        self.connections = 0
        self.servers: list[asyncio.Server] = []

    def _accept(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()

    async def start(self, port: int) -> Listener:
        for host in ("127.0.0.1", "::1"):
            self.servers.append(await asyncio.start_server(self._accept, host, port))
        return self

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
            await server.wait_closed()


@pytest.mark.parametrize(
    "host",
    [
        "[::ffff:0:127.0.0.1]",  # IPv4-translated: the form main let through
        "[::ffff:0:7f00:1]",
        "[2001:0:4136:e378:8000:63bf:80ff:fffe]",  # Teredo, client 127.0.0.1
        "[64:ff9b:1::127.0.0.1]",  # local-use NAT64
    ],
)
async def test_a_wrapped_loopback_callback_is_refused_and_nothing_connects(
    hub: Hub, host: str
) -> None:
    """On a hub that does not allow private callbacks, on real sockets."""
    assert not hub.settings.allow_private_callbacks
    port = free_port()
    listener = await Listener().start(port)
    try:
        async with Watchdog(max_errors=0):
            form = {
                "hub.mode": "subscribe",
                "hub.topic": f"{hub.url}/topics/t",
                "hub.callback": f"http://{host}:{port}/cb",
            }
            async with hub.session.post(hub.url + "/", data=form) as resp:
                assert resp.status == 400
                error = (await resp.json())["error"]
            assert "carrying 127.0.0.1" in error, error  # unwrapped, not just matched
            # nothing was kept that could connect later, and nothing connected so far
            assert await hub.app[RUNTIME].subscriptions.for_topic("t") == []
            async with hub.session.get(f"{hub.url}/healthz") as health:
                assert health.status == 200
    finally:
        await listener.stop()
    assert listener.connections == 0

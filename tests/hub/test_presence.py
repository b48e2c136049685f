"""Presence: per-topic WebSocket/SSE clients and WebSub subscriptions by state, summed over
two real hubs on one Redis, shown by the admin API, the overview and ``/metrics``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hub.core.settings import Settings
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_secrets import series
from tests.hub.test_websub import subscribe
from tests.support import changes, free_port, notification, wait_for

ADMIN = {"Authorization": "Bearer adm"}
READER = {"Authorization": "Bearer rt"}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"admin_token": "adm", "topic_read_tokens": {"hidden": ["rt"]}}


@contextlib.asynccontextmanager
async def second_hub(hub: Hub, redis_url: str) -> AsyncIterator[Hub]:
    """Another hub process (in this process) on the same Redis, with the same settings."""
    settings = Settings(**{**hub.settings.model_dump(), "port": free_port(), "base_url": None})
    runner, app = await start_hub(settings, redis_url)
    try:
        async with aiohttp.ClientSession() as session:
            yield Hub(settings.public_url, app, settings, session)
    finally:
        await runner.cleanup()


async def presence(hub: Hub, topic: str) -> dict[str, Any]:
    async with hub.session.get(f"{hub.url}/admin/topics/{topic}", headers=ADMIN) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        return dict(body["presence"])


async def shows(hub: Hub, topic: str, want: dict[str, Any]) -> None:
    """Wait until ``hub`` shows ``want`` for ``topic`` (reports follow within a moment)."""
    seen: dict[str, Any] = {}

    async def matches() -> bool:
        seen.update(await presence(hub, topic))
        return all(seen.get(k) == v for k, v in want.items())

    try:
        await wait_for(matches)
    except AssertionError:
        raise AssertionError(f"{topic}: wanted {want}, saw {seen}") from None


async def test_clients_of_every_hub_process_are_summed(
    hub: Hub, redis_url: str, callback: CallbackServer
) -> None:
    for topic in ("t", "u"):
        assert (await hub.publish(topic, notification(changes(1)))).status == 202
    await subscribe(hub, callback)
    async with second_hub(hub, redis_url) as other, contextlib.AsyncExitStack() as stack:
        ws_a = [
            await stack.enter_async_context(hub.session.ws_connect(f"{hub.url}/topics/t/ws"))
            for _ in range(2)
        ]
        await stack.enter_async_context(other.session.get(f"{other.url}/topics/t/events"))
        await stack.enter_async_context(other.session.ws_connect(f"{other.url}/topics/u/ws"))
        want_t = {"ws": 2, "sse": 1, "websub": {"active": 1, "suspended": 0}}
        for where in (hub, other):
            await shows(where, "t", want_t)
            await shows(where, "u", {"ws": 1, "sse": 0})

        async with other.session.get(f"{other.url}/admin/overview.json", headers=ADMIN) as resp:
            overview = await resp.json()
        assert overview["presence"]["t"] == want_t
        assert overview["presence"]["u"]["ws"] == 1
        async with hub.session.get(f"{hub.url}/metrics") as resp:
            clients = series(await resp.text(), "rshub_topic_clients")
        assert clients[frozenset({("topic", "t"), ("kind", "ws")})] == 2
        assert clients[frozenset({("topic", "t"), ("kind", "sse")})] == 1
        assert clients[frozenset({("topic", "t"), ("kind", "websub_active")})] == 1
        assert clients[frozenset({("topic", "u"), ("kind", "ws")})] == 1

        await ws_a[0].close()
        await shows(other, "t", {"ws": 1, "sse": 1})
    # The second process left: its clients no longer count.
    await shows(hub, "t", {"ws": 1, "sse": 0})
    await shows(hub, "u", {"ws": 0, "sse": 0})


async def test_a_private_topics_clients_are_folded_for_those_who_may_not_read_it(
    hub: Hub,
) -> None:
    for topic in ("hidden", "shown"):
        assert (await hub.publish(topic, notification(changes(1)))).status == 202
    url = f"{hub.url}/topics/hidden/ws?access_token=rt"
    async with hub.session.ws_connect(url), hub.session.ws_connect(f"{hub.url}/topics/shown/ws"):
        await shows(hub, "hidden", {"ws": 1})
        async with hub.session.get(f"{hub.url}/metrics") as resp:
            body = await resp.text()
        assert "hidden" not in body
        clients = series(body, "rshub_topic_clients")
        assert clients[frozenset({("topic", "(private)"), ("kind", "ws")})] == 1
        assert clients[frozenset({("topic", "shown"), ("kind", "ws")})] == 1
        async with hub.session.get(f"{hub.url}/metrics", headers=READER) as resp:
            clients = series(await resp.text(), "rshub_topic_clients")
        assert clients[frozenset({("topic", "hidden"), ("kind", "ws")})] == 1
        async with hub.session.get(f"{hub.url}/admin/overview.json", headers=READER) as resp:
            assert resp.status == 403  # a read token is not an operator's
        async with hub.session.get(f"{hub.url}/admin/overview.json", headers=ADMIN) as resp:
            assert set(json.loads(await resp.text())["presence"]) == {"hidden", "shown"}


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def test_the_dashboard_badge_counts_the_clients_of_every_hub_process(
    hub: Hub, redis_url: str, tmp_path: Any
) -> None:
    """The header badge ("clients: N WebSocket, N SSE") reads ``clients`` of the overview:
    the clients of another hub *process* (``rshub serve``, its own metrics) count too."""
    import asyncio

    from tests.support import HubProcess

    assert (await hub.publish("t", notification(changes(1)))).status == 202
    child = HubProcess(str(tmp_path), None, "--redis-url", redis_url)
    await asyncio.to_thread(child.start)
    seen: dict[str, Any] = {}

    async def badge(want: dict[str, int]) -> bool:
        async with hub.session.get(f"{hub.url}/admin/overview.json", headers=ADMIN) as resp:
            seen.update(clients=(await resp.json())["clients"])
        return bool(seen["clients"] == want)

    try:
        async with aiohttp.ClientSession() as session, contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(session.get(f"{child.url}/topics/t/events"))
            await stack.enter_async_context(session.ws_connect(f"{child.url}/topics/t/ws"))
            await stack.enter_async_context(hub.session.ws_connect(f"{hub.url}/topics/t/ws"))
            await wait_for(lambda: badge({"ws": 2, "sse": 1}))
    finally:
        await asyncio.to_thread(child.stop)
    # The other process left: its clients (and ours, gone too) no longer count.
    await wait_for(lambda: badge({"ws": 0, "sse": 0}))

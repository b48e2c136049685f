"""Read tokens against a real hub: documents, streams, WebSub subscriptions, discovery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.support import changes, notification, wait_for

PUB = {"Authorization": "Bearer pub"}
READER = {"Authorization": "Bearer r1"}

DOCUMENTS = [
    "/topics/{t}",
    "/topics/{t}/capabilitylist.xml",
    "/topics/{t}/changelist.xml",
    "/topics/{t}/changelist/00000001.xml",
    "/topics/{t}/resourcelist.xml",
]


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"tokens": ["pub"], "topic_read_tokens": {"secret": ["r1"]}}


@pytest.fixture
async def published(hub: Hub) -> Hub:
    for topic in ("secret", "open"):
        assert (await hub.publish(topic, notification(changes(2)), **PUB)).status == 202
    return hub


async def status(hub: Hub, path: str, headers: dict[str, str] | None = None) -> int:
    async with hub.session.get(hub.url + path, headers=headers or {}) as resp:
        await resp.read()
        return resp.status


async def test_private_documents_need_a_read_or_publisher_token(published: Hub) -> None:
    hub = published
    for doc in DOCUMENTS:
        path = doc.format(t="secret")
        async with hub.session.get(hub.url + path) as resp:
            body = await resp.json()
            assert resp.status == 401 and body["status"] == 401, path
            assert "Bearer" in body["error"]
        assert await status(hub, path, {"Authorization": "Bearer wrong"}) == 403
        assert await status(hub, path, READER) == 200, path
        assert await status(hub, path, PUB) == 200, path  # publishers read what they write
        assert await status(hub, doc.format(t="open")) == 200
    # A private topic's answers are for its reader only; an unknown private topic is not
    # revealed as unknown to those without a token.
    async with hub.session.get(hub.url + "/topics/secret/changelist.xml", headers=READER) as r:
        assert r.headers["Cache-Control"] == "private, no-cache"
        assert "Authorization" in r.headers["Vary"]
    async with hub.session.get(hub.url + "/topics/open/changelist.xml") as r:
        assert "private" not in r.headers["Cache-Control"]


async def test_source_description_lists_what_the_request_may_read(published: Hub) -> None:
    hub = published
    async with hub.session.get(hub.url + "/.well-known/resourcesync") as resp:
        anonymous = await resp.text()
    assert "/topics/open/" in anonymous and "/topics/secret/" not in anonymous
    async with hub.session.get(hub.url + "/.well-known/resourcesync", headers=PUB) as resp:
        everything = await resp.text()
    assert "/topics/open/" in everything and "/topics/secret/" in everything


async def test_private_streams_need_a_token(published: Hub) -> None:
    hub = published
    for path in ("/topics/secret/ws", "/topics/secret/events"):
        assert await status(hub, path) == 401
        assert await status(hub, path, {"Authorization": "Bearer nope"}) == 403
    sse = await hub.session.get(hub.url + "/topics/secret/events?since=0", headers=READER)
    assert sse.status == 200
    ws = await hub.session.ws_connect(hub.url + "/topics/secret/ws?since=0", headers=READER)
    # Browsers cannot set headers on WebSockets: ?access_token= works there.
    ws_query = await hub.session.ws_connect(hub.url + "/topics/secret/ws?since=0&access_token=r1")
    try:
        for client in (ws, ws_query):
            message = await asyncio.wait_for(client.receive(), 5)
            assert [e["topic"] for e in orjson.loads(message.data)] == ["secret", "secret"]
        line = await asyncio.wait_for(sse.content.readuntil(b"data: "), 5)
        assert b"id: " in line
    finally:
        await ws.close()
        await ws_query.close()
        sse.close()
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await hub.session.ws_connect(hub.url + "/topics/secret/ws?access_token=bad")
    assert refused.value.status == 403


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def test_subscribing_to_a_private_topic_needs_a_token(
    published: Hub, callback: CallbackServer
) -> None:
    hub = published
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/secret",
        "hub.callback": callback.url,
    }
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 401 and "private" in (await resp.json())["error"]
    async with hub.session.post(hub.url + "/", data=form, headers=READER) as resp:
        assert resp.status == 202
    await wait_for(lambda: len(callback.verifications) == 1)
    from hub.web.app import RUNTIME

    await wait_for(lambda: ("secret", callback.url) in hub.app[RUNTIME].delivery.workers)
    ids = (await (await hub.publish("secret", notification(changes(1)), **PUB)).json())["ids"]
    await wait_for(lambda: callback.ids == ids)


class TestGlobalReadTokens:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"read_tokens": ["g"]}

    async def test_every_topic_is_private(self, hub: Hub) -> None:
        await hub.publish("a", notification(changes(1)))
        assert await status(hub, "/topics/a/capabilitylist.xml") == 401
        assert (
            await status(hub, "/topics/a/capabilitylist.xml", {"Authorization": "Bearer g"}) == 200
        )
        async with hub.session.get(hub.url + "/.well-known/resourcesync") as resp:
            assert "/topics/a/" not in await resp.text()
        headers = {"Authorization": "Bearer g"}
        async with hub.session.get(hub.url + "/.well-known/resourcesync", headers=headers) as resp:
            assert "/topics/a/" in await resp.text()

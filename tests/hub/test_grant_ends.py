"""Access ends when the grant ends: a WebSub lease made with a signed read token (JWT) ends
when the hub starts refusing that token (its ``exp`` plus the 10 s leeway), against a real
hub, with tokens of a few seconds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import jwt
import pytest

from hub.core.read_tokens import LEEWAY_SECONDS
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_read_access import PUB
from tests.support import TIME_SCALE, changes, notification, wait_for

KEY = "the-hub's-signing-key-0123456789abcdef"
READER = {"Authorization": "Bearer r"}


def token_for(seconds: float, topics: tuple[str, ...] = ("secret",)) -> tuple[str, float]:
    """A signed read token the hub accepts for ``seconds`` more (the leeway included), and
    the instant it stops: ``exp`` lies ``LEEWAY_SECONDS`` before it."""
    ends_at = time.time() + seconds * TIME_SCALE
    return jwt.encode({"topics": list(topics), "exp": ends_at - LEEWAY_SECONDS}, KEY), ends_at


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"tokens": ["pub"], "read_tokens": ["r"], "jwt_key": KEY}


async def publish(hub: Hub, n: int, start: int) -> None:
    body = notification(changes(n, start=start))
    assert (await hub.publish("secret", body, **PUB)).status == 202


async def subscribe(hub: Hub, callback: CallbackServer, token: str) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/secret",
        "hub.callback": callback.url,
    }
    headers = {"Authorization": f"Bearer {token}"}
    async with hub.session.post(hub.url + "/", data=form, headers=headers) as resp:
        assert resp.status == 202, await resp.text()


async def test_a_websub_lease_ends_with_the_token_it_was_made_with(hub: Hub) -> None:
    await publish(hub, 1, 0)
    token, ends_at = token_for(4)
    short, witness = await CallbackServer().start(), await CallbackServer().start()
    try:
        await subscribe(hub, witness, "r")  # a static read token: the default lease
        await subscribe(hub, short, token)
        await wait_for(lambda: len(short.verifications) == 1 and len(witness.verifications) == 1)
        # What the subscriber is told: no longer than the token's remaining life.
        told = int(short.verifications[0]["hub.lease_seconds"])
        assert 1 <= told <= ends_at - time.time() + 1, told
        assert witness.verifications[0]["hub.lease_seconds"] == str(10 * 86400)
        await wait_for(lambda: time.time() < ends_at)  # still within the grant
        await publish(hub, 1, 1)
        await wait_for(lambda: "http://example.org/r1" in short.locs, timeout=ends_at - time.time())
        await wait_for(lambda: time.time() > ends_at, timeout=10)
        # Past the token's end: the witness (subscribed before it) gets each change, the
        # subscription made with the token nothing more.
        for i in (2, 3):
            await publish(hub, 1, i)
            await wait_for(lambda i=i: f"http://example.org/r{i}" in witness.locs)
        assert "http://example.org/r2" not in short.locs
        assert "http://example.org/r3" not in short.locs
    finally:
        await short.stop()
        await witness.stop()


async def test_a_subscription_asking_for_a_short_lease_keeps_it(hub: Hub) -> None:
    token, _ends_at = token_for(3600)
    callback = await CallbackServer().start()
    try:
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/secret",
            "hub.callback": callback.url,
            "hub.lease_seconds": "120",
        }
        async with hub.session.post(
            hub.url + "/", data=form, headers={"Authorization": f"Bearer {token}"}
        ) as resp:
            assert resp.status == 202
        await wait_for(lambda: len(callback.verifications) == 1)
        assert callback.verifications[0]["hub.lease_seconds"] == "120"
        # Without asking: the default (10 days) cut to the token's hour.
        await subscribe(hub, callback, token)
        await wait_for(lambda: len(callback.verifications) == 2)
        assert 3590 <= int(callback.verifications[1]["hub.lease_seconds"]) <= 3600
    finally:
        await callback.stop()


async def read_sse_to_the_end(resp: aiohttp.ClientResponse) -> tuple[bytes, float]:
    """Everything an SSE response sends until its end, and when it ended."""
    body = b""
    async with asyncio.timeout(30 * TIME_SCALE):
        async for chunk in resp.content.iter_any():
            body += chunk
    return body, time.time()

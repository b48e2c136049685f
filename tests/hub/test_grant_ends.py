"""Access ends when the grant ends, on every transport: a WebSub lease, an SSE stream and a
WebSocket opened with a signed read token (JWT) all end when the hub starts refusing that
token (its ``exp`` plus the 10 s leeway), against a real hub, with tokens of a few seconds.
A WebSocket client may renew its token in-band; hostile renewals under the watchdog."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import pytest

from hub.core.read_tokens import LEEWAY_SECONDS
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_read_access import PUB
from tests.support import TIME_SCALE, HubProcess, changes, free_port, notification, wait_for
from tests.watchdog import Watchdog

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


async def subscribe(
    hub: Hub, callback: CallbackServer, token: str, lease_seconds: int | None = None
) -> None:
    """``callback`` subscribed to ``secret`` with ``token``, asking for ``lease_seconds``."""
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/secret",
        "hub.callback": callback.url,
    }
    if lease_seconds is not None:
        form["hub.lease_seconds"] = str(lease_seconds)
    headers = {"Authorization": f"Bearer {token}"}
    async with hub.session.post(hub.url + "/", data=form, headers=headers) as resp:
        assert resp.status == 202, await resp.text()


async def test_a_websub_lease_ends_with_the_token_it_was_made_with(hub: Hub) -> None:
    await publish(hub, 1, 0)
    token, ends_at = token_for(6)
    short, witness = await CallbackServer().start(), await CallbackServer().start()
    try:
        await subscribe(hub, witness, "r")  # a static read token: the default lease
        await subscribe(hub, short, token)
        await wait_for(lambda: len(short.verifications) == 1 and len(witness.verifications) == 1)
        # What the subscriber is told: no longer than the token's remaining life.
        told = int(short.verifications[0]["hub.lease_seconds"])
        assert 1 <= told <= 6 * TIME_SCALE, told  # not the default 10 days
        assert witness.verifications[0]["hub.lease_seconds"] == str(10 * 86400)
        await publish(hub, 1, 1)  # within the grant: delivered
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
    token, ends_at = token_for(3600)  # an hour or more: TIME_SCALE grows it on a busy machine
    callback = await CallbackServer().start()
    try:
        await subscribe(hub, callback, token, lease_seconds=120)
        await wait_for(lambda: len(callback.verifications) == 1)
        assert callback.verifications[0]["hub.lease_seconds"] == "120"
        # Without asking: the default (10 days) cut to the token's remaining life.
        before = time.time()
        await subscribe(hub, callback, token)
        await wait_for(lambda: len(callback.verifications) == 2)
        lease = int(callback.verifications[1]["hub.lease_seconds"])
        assert ends_at - time.time() - 1 <= lease <= ends_at - before + 1, lease
    finally:
        await callback.stop()


async def read_sse_to_the_end(resp: aiohttp.ClientResponse) -> tuple[bytes, float]:
    """Everything an SSE response sends until its end, and when it ended."""
    body = b""
    async with asyncio.timeout(30 * TIME_SCALE):
        async for chunk in resp.content.iter_any():
            body += chunk
    return body, time.time()


SETTINGS = {"tokens": ["pub"], "read_tokens": ["r"], "jwt_key": KEY}


# The lean path serves only open topics (a request with a token goes to aiohttp's): the
# stream a client gets ends as documented whichever path is on.
@pytest.mark.parametrize(
    "hub_settings",
    [{**SETTINGS, "lean_sse": True}, {**SETTINGS, "lean_sse": False}],
    ids=["lean-on", "lean-off"],
)
@pytest.mark.parametrize("how", ["query", "header"])
async def test_an_sse_stream_ends_when_its_token_does(hub: Hub, how: str) -> None:
    await publish(hub, 2, 0)
    token, ends_at = token_for(3)
    url, headers = f"{hub.url}/topics/secret/events?since=0", {}
    if how == "query":
        url += f"&access_token={token}"
    else:
        headers = {"Authorization": f"Bearer {token}"}
    async with hub.session.get(url, headers=headers) as resp:
        assert resp.status == 200
        body, ended = await read_sse_to_the_end(resp)
    assert body.count(b"\ndata: {") == 2, body  # the two changes, then the last event
    last = body.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"event: error\ndata: token expired; renew the token"), body[-200:]
    assert b"Last-Event-ID: " in last
    assert ends_at - 0.5 <= ended <= ends_at + 3 * TIME_SCALE, ended - ends_at
    async with hub.session.get(url, headers=headers) as again:
        assert again.status == 401 and "expired" in (await again.json())["error"]


async def receive_until_closed(
    ws: aiohttp.ClientWebSocketResponse,
) -> tuple[list[str], str, float]:
    """The events' ids a WebSocket receives until it is closed, the close reason, and when
    it was closed."""
    ids: list[str] = []
    async with asyncio.timeout(30 * TIME_SCALE):
        while True:
            msg = await ws.receive()
            if msg.type is aiohttp.WSMsgType.TEXT:
                ids += [e["id"] for e in orjson.loads(msg.data)]
                continue
            reason = msg.extra if msg.type is aiohttp.WSMsgType.CLOSE else ""
            return ids, str(reason or ""), time.time()


async def test_a_websocket_closes_with_4401_when_its_token_expires(hub: Hub) -> None:
    await publish(hub, 2, 0)
    token, ends_at = token_for(3)
    ws = await hub.session.ws_connect(f"{hub.url}/topics/secret/ws?since=0&access_token={token}")
    ids, reason, ended = await receive_until_closed(ws)
    assert len(ids) == 2
    assert ws.close_code == 4401
    assert reason == f"token expired; renew the token and resume with since={ids[-1]}"
    assert ends_at - 0.5 <= ended <= ends_at + 3 * TIME_SCALE, ended - ends_at


async def test_a_websocket_renews_its_token_in_band_without_a_gap(hub: Hub) -> None:
    first, first_ends = token_for(3)
    later, later_ends = token_for(8)
    ws = await hub.session.ws_connect(f"{hub.url}/topics/secret/ws?access_token={first}")
    try:
        await ws.send_str(orjson.dumps({"access_token": later}).decode())
        await wait_for(lambda: time.time() > first_ends + 0.5, timeout=10)
        await publish(hub, 1, 0)  # past the first token's end: still streaming
        msg = await asyncio.wait_for(ws.receive(), 5 * TIME_SCALE)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        ids, reason, ended = await receive_until_closed(ws)
        assert ids == [] and ws.close_code == 4401 and "renew the token" in reason
        assert later_ends - 0.5 <= ended <= later_ends + 3 * TIME_SCALE, ended - later_ends
    finally:
        await ws.close()


def _not_a_renewal(rng: random.Random) -> str | bytes:
    """A message that renews nothing: ignored, as any client message was before."""
    choice = rng.randrange(6)
    if choice == 0:  # bytes, some of them near the JSON shape
        alphabet = '{}[]":,access_token ab\\\x00é'
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(60)))
    if choice == 1:  # the key with a value that is not a token
        value = rng.choice([None, 5, 1e30, [], {}, ["r"], "", "   ", True])
        return orjson.dumps({"access_token": value}).decode()
    if choice == 2:  # other JSON shapes
        return orjson.dumps(rng.choice([[1, 2], "access_token", {"token": "x"}, 7])).decode()
    if choice == 3:  # a binary frame with a token in it
        return orjson.dumps({"access_token": "r"})
    if choice == 4:  # nested
        return orjson.dumps({"x": {"access_token": "r"}}).decode()
    return "access_token" * rng.randrange(1, 100)


async def test_hostile_renewals_are_ignored_or_refused_naming_the_problem(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rng = random.Random(2026_12_02)
    first, first_ends = token_for(3)
    url = f"{hub.url}/topics/secret/ws?access_token={first}"
    async with Watchdog() as dog:
        ws = await hub.session.ws_connect(url)
        # A static read token does not expire: the stream no longer ends.
        await ws.send_str(orjson.dumps({"access_token": "r"}).decode())
        for _ in range(300):
            message = _not_a_renewal(rng)
            if isinstance(message, bytes):
                await ws.send_bytes(message)
            else:
                await ws.send_str(message)
        await wait_for(lambda: time.time() > first_ends + 0.5, timeout=10)
        await publish(hub, 1, 0)
        msg = await asyncio.wait_for(ws.receive(), 5 * TIME_SCALE)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        await ws.close()
        # A token the hub refuses closes the stream at once, naming the problem.
        refused = {
            "garbage": ("a.b.c", 4401, "not a valid JWT"),
            "unknown": ("nope", 4403, "may not read"),
            "expired": (token_for(-1)[0], 4401, "expired"),
            "other topic": (token_for(60, ("other",))[0], 4403, "'other'"),
            "exp a string": (
                jwt.encode({"topics": ["secret"], "exp": "9999999999"}, KEY),
                4401,
                "'exp'",
            ),
            "exp 1e30": (jwt.encode({"topics": ["secret"], "exp": 1e30}, KEY), 4401, "'exp'"),
        }
        for case, (token, code, said) in refused.items():
            ws = await hub.session.ws_connect(url.replace(first, token_for(30)[0]))
            await ws.send_str(orjson.dumps({"access_token": token}).decode())
            ids, reason, _ended = await receive_until_closed(ws)
            assert (ws.close_code, ids) == (code, []), case
            assert said in reason, (case, reason)
    await dog.sockets_back(slack=2)  # the topic's feed holds pooled Redis connections
    assert KEY not in caplog.text


async def test_revoking_a_static_read_token_is_a_restart_that_ends_its_streams(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """A restart without a static read token still revokes it (besides the admin API's
    revocations, tests/hub/test_token_revocation.py): it ends its streams, and the token is
    refused after."""
    port = free_port()
    before = {"RSHUB_TOKENS": '["pub"]', "RSHUB_READ_TOKENS": '["r", "old"]'}
    hub = await asyncio.to_thread(HubProcess(str(tmp_path), port, env=before).start)
    try:
        body = notification(changes(1))
        headers = {"Content-Type": "application/xml", **PUB}
        async with session.post(f"{hub.url}/topics/secret", data=body, headers=headers) as r:
            assert r.status == 202
        url = f"{hub.url}/topics/secret/events?since=0"
        async with session.get(url, headers={"Authorization": "Bearer old"}) as resp:
            assert resp.status == 200
            await asyncio.wait_for(resp.content.readuntil(b"data: {"), 10 * TIME_SCALE)
            stopping = asyncio.create_task(asyncio.to_thread(hub.stop))
            streamed, _ended = await read_sse_to_the_end(resp)
            await stopping
        assert b"event: shutdown" in streamed.rstrip(b"\n").rsplit(b"\n\n", 1)[-1], streamed
        after = {**before, "RSHUB_READ_TOKENS": '["r"]'}
        hub = await asyncio.to_thread(HubProcess(str(tmp_path), port, env=after).start)
        async with session.get(url, headers={"Authorization": "Bearer old"}) as refused:
            assert refused.status == 403 and "may not read" in (await refused.json())["error"]
        async with session.get(url, headers={"Authorization": "Bearer r"}) as kept:
            assert kept.status == 200
    finally:
        await asyncio.to_thread(hub.stop)

"""The subscriber's WebSocket client runs on websockets' reconnecting asyncio client
(``websockets.asyncio.client.connect`` as an async iterator), as the design card says.

Against a scripted hub that records each handshake: every connection carries the token
and resumes after the last event id handed over (``since=``); 1001/1008/1013 reconnect at
once, or after the wait the close asks for (``retry after S s``) within ``max_backoff``;
other codes (4401: the token expired) end a stream that is not persistent with the code and
reason; a persistent stream retries a hub that cannot be reached with back-off until it
answers; a 4xx handshake is the hub's refusal, with its message.
"""

from __future__ import annotations

import asyncio
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from subscriber.exceptions import HubRefused, StreamClosed
from subscriber.stream import MAX_MESSAGE_BYTES, HubStream
from tests.conftest import Hub
from tests.hub.test_grant_ends import KEY, token_for
from tests.publisher.helpers import serve
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for

ROOT = Path(__file__).resolve().parents[2]


def event(n: int) -> dict[str, object]:
    return {
        "id": f"{n}-0",
        "topic": "t",
        "loc": f"http://e.invalid/{n}",
        "lastmod": "2026-01-01T00:00:00Z",
        "change": "created",
    }


@dataclass
class Connection:
    """What one connection sends: events (one message each), then a close."""

    events: list[int]
    code: int
    reason: str = ""


@dataclass
class ScriptedHub:
    """A hub whose ``/topics/t/ws`` plays one :class:`Connection` per handshake."""

    script: list[Connection]
    handshakes: list[dict[str, str]] = field(default_factory=list)
    #: When each handshake came (the loop's clock).
    arrivals: list[float] = field(default_factory=list)
    refuse: tuple[int, bytes] | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/topics/t/ws", self.ws)
        return app

    async def ws(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(asyncio.get_running_loop().time())
        self.handshakes.append(
            {
                "since": request.query.get("since", ""),
                "authorization": request.headers.get("Authorization", ""),
                "user-agent": request.headers.get("User-Agent", ""),
            }
        )
        if self.refuse is not None:
            status, body = self.refuse
            return web.Response(status=status, body=body, content_type="application/json")
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        plan = self.script.pop(0) if self.script else Connection([], 1000)
        for n in plan.events:
            await socket.send_str(orjson.dumps([event(n)]).decode())
        await socket.close(code=plan.code, message=plan.reason.encode())
        return socket


async def collect(stream: HubStream, into: list[str]) -> None:
    async for batch in stream.batches():
        into.extend(str(e.id) for e in batch)


def test_websockets_is_a_dependency_with_a_floor() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [pin] = [d for d in project["dependencies"] if d.startswith("websockets")]
    assert pin.startswith("websockets>="), pin


async def test_each_connection_carries_the_token_and_resumes_after_the_last_id(
    session: aiohttp.ClientSession,
) -> None:
    hub = ScriptedHub(
        [
            Connection([1, 2], 1013, "too slow; resume with since=2-0"),
            Connection([3], 1008, "too slow"),
            Connection([], 1001, "shutdown; resume with since=3-0"),
            Connection([4], 4401, "token expired; renew the token and resume with since=4-0"),
        ]
    )
    got: list[str] = []
    async with serve(hub.app()) as base:
        stream = HubStream(session, base, "t", since="0", token="tok-1")
        with pytest.raises(StreamClosed) as ended:
            await asyncio.wait_for(collect(stream, got), 20)
    assert got == ["1-0", "2-0", "3-0", "4-0"]
    assert [h["since"] for h in hub.handshakes] == ["0", "2-0", "3-0", "3-0"]
    assert {h["authorization"] for h in hub.handshakes} == {"Bearer tok-1"}
    assert all("websockets/" in h["user-agent"] for h in hub.handshakes), hub.handshakes
    assert ended.value.code == 4401 and "renew the token" in ended.value.reason
    assert stream.last_id == "4-0"


async def test_a_client_dropped_as_too_slow_comes_back_when_the_hub_says(
    session: aiohttp.ClientSession,
) -> None:
    """The hub spreads the clients one storm drops over a window: each close names its
    client's wait (``retry after S s``), which the client takes, within ``max_backoff``."""
    hub = ScriptedHub(
        [
            Connection([1], 1013, "too slow; resume with since=1-0; retry after 0.60 s"),
            Connection([2], 1013, "too slow; resume with since=2-0; retry after 99.00 s"),
            Connection([3], 4401, "token expired; renew the token and resume with since=3-0"),
        ]
    )
    got: list[str] = []
    async with serve(hub.app()) as base:
        stream = HubStream(session, base, "t", since="0", max_backoff=1.5)
        with pytest.raises(StreamClosed):
            await asyncio.wait_for(collect(stream, got), 20)
    assert got == ["1-0", "2-0", "3-0"]
    assert [h["since"] for h in hub.handshakes] == ["0", "1-0", "2-0"]
    first, second = (b - a for a, b in zip(hub.arrivals, hub.arrivals[1:], strict=False))
    assert 0.6 <= first < 0.6 + 2 * TIME_SCALE, first  # as asked
    assert 1.5 <= second < 1.5 + 2 * TIME_SCALE, second  # asked 99 s: cut to max_backoff


async def test_a_persistent_stream_waits_for_a_hub_that_is_not_up_yet(
    session: aiohttp.ClientSession,
) -> None:
    port = free_port()
    stream = HubStream(
        session, f"http://127.0.0.1:{port}", "t", since="7-0", persistent=True, max_backoff=0.3
    )
    got: list[str] = []
    following = asyncio.create_task(collect(stream, got))
    try:
        await asyncio.sleep(0.5)  # refused meanwhile: retried, not raised
        assert not following.done()
        hub = ScriptedHub([Connection([8], 1011, "internal error")])
        runner = web.AppRunner(hub.app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            # 1011 is no resumable close: a persistent stream comes back after back-off.
            await wait_for(lambda: len(hub.handshakes) >= 2, 10)
        finally:
            await runner.cleanup()
    finally:
        following.cancel()
    assert got == ["8-0"]
    assert [h["since"] for h in hub.handshakes[:2]] == ["7-0", "8-0"]


@pytest.mark.parametrize("persistent", [False, True])
async def test_a_refused_handshake_is_the_hubs_refusal_with_its_message(
    session: aiohttp.ClientSession, persistent: bool
) -> None:
    hub = ScriptedHub([])
    hub.refuse = (401, b'{"error": "topic \'t\' is private: reading it needs a token"}')
    async with serve(hub.app()) as base:
        stream = HubStream(session, base, "t", persistent=persistent)
        with pytest.raises(HubRefused) as refused:
            await asyncio.wait_for(collect(stream, []), 10)
    assert refused.value.status == 401
    assert refused.value.message == "topic 't' is private: reading it needs a token"
    assert len(hub.handshakes) == 1  # no retry can fix it


async def test_a_lost_connection_ends_a_stream_that_is_not_persistent(
    session: aiohttp.ClientSession,
) -> None:
    hub = ScriptedHub([Connection([1], 1011, "internal error")])
    async with serve(hub.app()) as base:
        stream = HubStream(session, base, "t")
        got: list[str] = []
        with pytest.raises(StreamClosed) as ended:
            await asyncio.wait_for(collect(stream, got), 10)
    assert got == ["1-0"] and ended.value.code == 1011
    assert len(hub.handshakes) == 1


async def test_the_stream_closes_its_connection_when_its_consumer_stops(
    session: aiohttp.ClientSession,
) -> None:
    opened = asyncio.Event()
    closed = asyncio.Event()

    async def ws(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_str(orjson.dumps([event(1)]).decode())
        opened.set()
        async for _ in socket:
            pass
        closed.set()
        return socket

    app = web.Application()
    app.router.add_get("/topics/t/ws", ws)
    async with serve(app) as base:
        stream = HubStream(session, base, "t")
        batches = stream.batches()
        first = await asyncio.wait_for(anext(batches), 10)
        assert [e.id for e in first] == ["1-0"] and opened.is_set()
        await batches.aclose()
        await asyncio.wait_for(closed.wait(), 5)


async def test_a_message_past_the_limit_ends_the_stream_instead_of_filling_memory(
    session: aiohttp.ClientSession,
) -> None:
    async def ws(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_str(orjson.dumps([event(1)]).decode())
        await socket.send_str("[" + " " * MAX_MESSAGE_BYTES + "]")
        async for _ in socket:  # until the client closes
            pass
        return socket

    app = web.Application()
    app.router.add_get("/topics/t/ws", ws)
    got: list[str] = []
    async with serve(app) as base:
        stream = HubStream(session, base, "t")
        with pytest.raises(StreamClosed) as ended:
            await asyncio.wait_for(collect(stream, got), 10)
    assert got == ["1-0"]
    assert ended.value.code == 1009  # "message too big": the follower polls instead


@pytest.mark.parametrize(
    "hub_settings", [{"tokens": ["pub"], "read_tokens": ["r"], "jwt_key": KEY}], ids=["jwt"]
)
async def test_the_real_hub_ends_a_stream_whose_signed_token_expires_with_4401(
    hub: Hub, session: aiohttp.ClientSession
) -> None:
    """Against the hub itself: the token opens the stream and the replay comes; at the
    token's end the hub closes with 4401, which ends a stream that is not persistent with
    the hub's reason (the follower then polls, with the same token: its answer says why)."""
    body = notification(changes(2))
    assert (await hub.publish("secret", body, Authorization="Bearer pub")).status == 202
    token, _ = token_for(2)
    stream = HubStream(session, hub.url, "secret", since="0", token=token)
    got: list[str] = []
    with pytest.raises(StreamClosed) as ended:
        await asyncio.wait_for(collect(stream, got), 20 * TIME_SCALE)
    assert len(got) == 2
    assert ended.value.code == 4401
    assert ended.value.reason == f"token expired; renew the token and resume with since={got[-1]}"

"""Heartbeats: every open WebSocket (and lean SSE stream) of a process is beaten from one
timer (hub.live.heartbeats), never a timer of its own per connection; a WebSocket client that
answers stays, one that stays silent is cut off, and a client's own ping is answered."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hub.live.heartbeats import Heartbeats
from hub.web.streams import STREAMING
from tests.conftest import Hub
from tests.support import TIME_SCALE, changes, notification, wait_for

INTERVAL = 0.2
PATHS = ("/topics/t/ws", "/ws?topic=t")


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"heartbeat_seconds": INTERVAL}


@contextlib.asynccontextmanager
async def opened(hub: Hub, path: str) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    """A WebSocket that sees the hub's pings (it answers none by itself)."""
    await hub.publish("t", notification(changes(1)))
    async with hub.session.ws_connect(f"{hub.url}{path}", autoping=False) as ws:
        yield ws


async def next_frame(ws: aiohttp.ClientWebSocketResponse) -> aiohttp.WSMessage:
    """The next frame that is no event (a stream of several topics opens with one)."""
    while True:
        msg = await ws.receive()
        if msg.type is not aiohttp.WSMsgType.TEXT:
            return msg


@pytest.mark.parametrize("path", PATHS)
async def test_a_client_that_answers_pings_stays(hub: Hub, path: str) -> None:
    async with opened(hub, path) as ws:
        async with asyncio.timeout(30 * INTERVAL * TIME_SCALE):
            for _ in range(5):  # five rounds: each ping answered keeps it open
                msg = await next_frame(ws)
                assert msg.type is aiohttp.WSMsgType.PING, msg
                await ws.pong(msg.data)
        assert not ws.closed
        ids = (await (await hub.publish("t", notification(changes(1, start=5)))).json())["ids"]
        async with asyncio.timeout(10 * TIME_SCALE):
            while True:
                msg = await ws.receive()
                if msg.type is aiohttp.WSMsgType.TEXT and ids[0] in msg.data:
                    break
                assert msg.type is aiohttp.WSMsgType.PING, msg


@pytest.mark.parametrize("path", PATHS)
async def test_a_silent_client_is_cut_off(hub: Hub, path: str) -> None:
    async with opened(hub, path) as ws:
        loop = asyncio.get_running_loop()
        began = loop.time()
        pings = 0
        async with asyncio.timeout(30 * INTERVAL * TIME_SCALE):
            while (msg := await next_frame(ws)).type is aiohttp.WSMsgType.PING:
                pings += 1  # never answered
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), msg
        assert pings >= 1
        assert loop.time() - began >= INTERVAL  # not before it had a ping to answer
    await wait_for(lambda: hub.app[STREAMING].closing.open == 0)


@pytest.mark.parametrize("path", PATHS)
async def test_a_client_s_ping_gets_its_pong(hub: Hub, path: str) -> None:
    async with opened(hub, path) as ws:
        await ws.ping(b"are you there")
        async with asyncio.timeout(10 * TIME_SCALE):
            while (msg := await next_frame(ws)).type is aiohttp.WSMsgType.PING:
                await ws.pong(msg.data)
        assert (msg.type, msg.data) == (aiohttp.WSMsgType.PONG, b"are you there")


async def test_idle_websockets_hold_no_timer_each(hub: Hub) -> None:
    """50 idle WebSockets add no timer to the loop's (aiohttp's heartbeat armed one each)."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.BaseEventLoop):
        pytest.skip("the timers are counted on asyncio's own loop")

    def timers() -> int:
        return sum(not h.cancelled() for h in loop._scheduled)  # type: ignore[attr-defined]

    await hub.publish("t", notification(changes(1)))
    untimed = aiohttp.ClientTimeout(total=None)  # the client's own: no timer per socket
    async with aiohttp.ClientSession(timeout=untimed) as session:
        before = timers()
        sockets = [await session.ws_connect(f"{hub.url}/topics/t/ws") for _ in range(50)]
        await wait_for(lambda: hub.app[STREAMING].closing.open == 50)
        assert timers() - before < 25  # aiohttp: 50 more (others come and go meanwhile)
        assert len(hub.app[STREAMING].heartbeats) == 50
        for ws in sockets:
            await ws.close()


async def test_idle_lean_sse_streams_hold_no_timer_each(hub: Hub) -> None:
    """50 idle plain SSE subscribers (the lean path) add no timer to the loop's (each had
    one for its heartbeat), and still get their heartbeats."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.BaseEventLoop):
        pytest.skip("the timers are counted on asyncio's own loop")

    def timers() -> int:
        return sum(not h.cancelled() for h in loop._scheduled)  # type: ignore[attr-defined]

    await hub.publish("t", notification(changes(1)))
    untimed = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=untimed) as session:
        before = timers()
        streams = [await session.get(f"{hub.url}/topics/t/events") for _ in range(50)]
        await wait_for(lambda: hub.app[STREAMING].closing.open == 50)
        assert timers() - before < 25  # aiohttp: 50 more (others come and go meanwhile)
        assert len(hub.app[STREAMING].heartbeats) == 50  # all on the lean path
        async with asyncio.timeout(30 * INTERVAL * TIME_SCALE):
            for resp in streams:
                while (await resp.content.readline()) != b": heartbeat\n":
                    pass
        for resp in streams:
            resp.close()


class Beats:
    """A stream that counts its beats, and leaves once told to."""

    def __init__(self, loop: asyncio.AbstractEventLoop, per_tick: list[int]) -> None:
        self.loop, self.per_tick = loop, per_tick
        self.at: list[float] = []
        self.ended = False

    def beat(self) -> bool:
        if self.ended:
            return False
        self.at.append(self.loop.time())
        self.per_tick[-1] += 1
        return True


async def test_one_timer_beats_each_stream_once_an_interval() -> None:
    """1,000 streams that joined at once: each beaten once per round, the burst spread over
    ticks (none takes more than its bound), one that ended never again, and no timer left
    once none is registered."""
    interval = 0.2
    wheel = Heartbeats(interval, tick=0.01)
    loop = asyncio.get_running_loop()
    per_tick: list[int] = [0]
    run = wheel._run

    def counted_run() -> None:
        per_tick.append(0)
        run()

    wheel._run = counted_run  # type: ignore[method-assign]
    streams = [Beats(loop, per_tick) for _ in range(1000)]
    for stream in streams:
        wheel.add(stream)
    await wait_for(lambda: all(len(s.at) >= 3 for s in streams), timeout=10)
    for stream in streams[:500]:
        stream.ended = True
    stopped = [len(s.at) for s in streams[:500]]
    await wait_for(lambda: all(len(s.at) >= 6 for s in streams[500:]), timeout=10)
    assert [len(s.at) for s in streams[:500]] == stopped
    assert max(per_tick) <= max(32, 1000 * 0.01 / interval * 2)
    assert len(per_tick) > 10  # spread over ticks
    # Each beat an interval after the one before, or later: never more than a tick early
    # (those due within a tick go together).
    gaps = [b - a for s in streams[500:] for a, b in itertools.pairwise(s.at)]
    assert min(gaps) >= interval - wheel.tick - 1e-3
    for stream in streams[500:]:
        stream.ended = True
    await wait_for(lambda: wheel._timer is None, timeout=10)
    assert len(wheel) == 0


async def test_a_failing_beat_leaves_and_the_others_go_on() -> None:
    wheel = Heartbeats(0.1, tick=0.01)
    loop = asyncio.get_running_loop()
    per_tick = [0]

    class Broken:
        def beat(self) -> bool:
            raise RuntimeError("broken")

    good = Beats(loop, per_tick)
    wheel.add(Broken())
    wheel.add(good)
    await wait_for(lambda: len(good.at) >= 3, timeout=10)
    assert len(wheel) == 1
    good.ended = True
    await wait_for(lambda: wheel._timer is None, timeout=10)

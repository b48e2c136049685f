"""Push transports against the real (in-process) hub: WebSocket, SSE, WebSub callback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import aiohttp
import pytest

from subscriber.callback import CallbackReceiver
from subscriber.events import ChangeEvent
from subscriber.exceptions import PushUnavailable
from subscriber.stream import HubStream
from tests.conftest import Hub
from tests.support import changes, notification


async def _collect(it: AsyncGenerator[list[ChangeEvent], None], n: int) -> list[ChangeEvent]:
    out: list[ChangeEvent] = []
    try:
        async for batch in it:
            out.extend(batch)
            if len(out) >= n:
                return out
    finally:
        await it.aclose()  # closes the connection now, not at garbage collection
    return out


@pytest.mark.parametrize("transport", ["ws", "sse"])
async def test_stream_replays_since_and_follows_live(hub: Hub, transport: str) -> None:
    first = await hub.publish("t", notification(changes(3)))
    ids = (await first.json())["ids"] if first.content_type == "application/json" else None
    assert first.status == 202, ids
    async with aiohttp.ClientSession() as session:
        stream = HubStream(
            session,
            hub.url,
            "t",
            transport=transport,  # type: ignore[arg-type]
            since=ids[0],
        )
        task = asyncio.create_task(_collect(stream.batches(), 4))
        await asyncio.wait_for(stream.connected.wait(), 5)
        await hub.publish("t", notification(changes(2, start=3)))
        got = await asyncio.wait_for(task, 10)
    assert [e.loc for e in got] == [f"http://example.org/r{i}" for i in (1, 2, 3, 4)]
    assert got[0].id == ids[1] and got[0].topic == "t"
    assert stream.last_id == got[-1].id


async def test_stream_unreachable_raises_push_unavailable() -> None:
    async with aiohttp.ClientSession() as session:
        stream = HubStream(session, "http://127.0.0.1:9", "t")
        with pytest.raises(PushUnavailable):
            async for _ in stream.batches():
                pass


async def test_websub_receiver_verifies_signs_and_unsubscribes(hub: Hub) -> None:
    first = await hub.publish("w", notification(changes(2)))
    ids = (await first.json())["ids"]
    async with aiohttp.ClientSession() as session:
        receiver = CallbackReceiver(session, hub.url, "w", lease_seconds=600)
        await receiver.start()
        await receiver.subscribe(since=ids[0])
        task = asyncio.create_task(_collect(receiver.batches(), 3))
        await hub.publish("w", notification(changes(2, start=2)))
        got = await asyncio.wait_for(task, 10)
        assert [e.loc for e in got][:3] == [f"http://example.org/r{i}" for i in (1, 2, 3)]
        assert got[0].id == ids[1]
        assert all(e.id for e in got)
        assert receiver.rejected == 0
        await receiver.close()

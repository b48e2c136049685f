"""A topic whose Source also publishes ``changedump-notification``\\ s: the subscriber's push
transports (WebSocket, SSE, WebSub callback) go past its packages, which are no change of a
resource, and keep following the changes on push (no fall back to polling, no 400 that
would make the hub retry and disable the subscription)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import aiohttp
import pytest

from subscriber.callback import CallbackReceiver
from subscriber.events import ChangeEvent
from subscriber.stream import HubStream
from tests.conftest import Hub
from tests.hub.test_changedump_notifications import PACKAGE, dump_notification
from tests.support import changes, notification


async def _collect(it: AsyncGenerator[list[ChangeEvent], None], n: int) -> list[ChangeEvent]:
    out: list[ChangeEvent] = []
    try:
        async for batch in it:
            out.extend(batch)
            if len(out) >= n:
                return out
    finally:
        await it.aclose()
    return out


async def _publish(hub: Hub, topic: str, body: bytes) -> list[str]:
    resp = await hub.publish(topic, body)
    assert resp.status == 202, await resp.text()
    ids: list[str] = (await resp.json())["ids"]
    return ids


@pytest.mark.parametrize("transport", ["ws", "sse"])
async def test_a_stream_goes_past_packages(hub: Hub, transport: str) -> None:
    first = await _publish(hub, "t", notification(changes(1)))
    await _publish(hub, "t", dump_notification(PACKAGE))
    last = await _publish(hub, "t", notification(changes(1, start=1)))
    async with aiohttp.ClientSession() as session:
        stream = HubStream(session, hub.url, "t", transport=transport, since="0")  # type: ignore[arg-type]
        got = await asyncio.wait_for(_collect(stream.batches(), 2), 10)
    assert [e.id for e in got] == first + last
    assert stream.last_id == last[0]


async def test_the_websub_receiver_takes_a_changedump_notification(hub: Hub) -> None:
    first = await _publish(hub, "w", notification(changes(1)))
    async with aiohttp.ClientSession() as session:
        receiver = CallbackReceiver(session, hub.url, "w", lease_seconds=600)
        await receiver.start()
        try:
            await receiver.subscribe(since=first[0])
            task = asyncio.create_task(_collect(receiver.batches(), 1))
            await _publish(hub, "w", dump_notification(PACKAGE))
            last = await _publish(hub, "w", notification(changes(1, start=1)))
            got = await asyncio.wait_for(task, 10)
            assert [e.id for e in got] == last, "the package was taken, the change came next"
            assert receiver.rejected == 0
        finally:
            await receiver.close()

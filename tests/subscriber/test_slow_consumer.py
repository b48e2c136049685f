"""A subscriber too slow for the hub's live stream is dropped (1013) and resumes losslessly."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest

from hub.web.app import RUNTIME
from subscriber.stream import HubStream
from tests.conftest import Hub
from tests.support import changes, notification, wait_for


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"client_buffer_events": 50, "heartbeat_seconds": 30}


async def test_stream_resumes_after_too_slow_close(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="subscriber.stream")
    ids = (await (await hub.publish("t", notification(changes(1)))).json())["ids"]
    got: list[str] = []
    go = asyncio.Event()
    total: list[int] = []

    async with aiohttp.ClientSession() as session:
        stream = HubStream(session, hub.url, "t", since="0")

        async def consume() -> None:
            async for batch in stream.batches():
                got.extend(str(e.id) for e in batch)
                if len(got) == 1:
                    await go.wait()  # stop reading: the hub's bounded queue for us fills
                if total and len(got) >= total[0]:
                    return

        task = asyncio.create_task(consume())
        try:
            await wait_for(lambda: len(got) == 1)
            big = [{**c, "loc": c["loc"] + "/" + "x" * 2000} for c in changes(100, start=1)]
            async with asyncio.timeout(30):
                while hub.app[RUNTIME].feeds.consumer_count > 0:  # until the hub drops us
                    body = await (await hub.publish("t", notification(big))).json()
                    ids += body["ids"]
            total.append(len(ids))
            go.set()
            await asyncio.wait_for(task, 30)
        finally:
            task.cancel()
    assert got == ids  # every event once, in order, across the reconnection
    closes = [r.getMessage() for r in caplog.records if "resuming after" in r.getMessage()]
    assert closes and "1013" in closes[0] and "too slow" in closes[0]

"""Crash test: SIGKILL the hub process mid-stream; every follower still gets everything."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import aiohttp
import pytest

from tests.hub.callback_server import CallbackServer
from tests.support import HubProcess, changes, notification, wait_for

TOTAL = 10_000
BATCH = 100


def first_occurrences(ids: list[str]) -> list[str]:
    seen: set[str] = set()
    return [i for i in ids if not (i in seen or seen.add(i))]  # type: ignore[func-returns-value]


async def follow_ws(url: str, got: list[str], stop: asyncio.Event) -> None:
    """A WebSocket client that reconnects from its last id whatever happens."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            since = got[-1] if got else "0"
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.ws_connect(f"{url}/topics/crash/ws?since={since}") as ws:
                    async for msg in ws:
                        if msg.type != aiohttp.WSMsgType.TEXT:
                            break
                        got.extend(e["id"] for e in json.loads(msg.data))
            await asyncio.sleep(0.05)  # reconnect pacing, not a wait for state


async def follow_sse(url: str, got: list[str], stop: asyncio.Event) -> None:
    """An SSE client that resumes with Last-Event-ID whatever happens."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            headers = {"Last-Event-ID": got[-1] if got else "0"}
            with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
                async with session.get(f"{url}/topics/crash/events", headers=headers) as resp:
                    async for line in resp.content:
                        if line.startswith(b"data: "):
                            got.append(json.loads(line[6:])["id"])
            await asyncio.sleep(0.05)  # reconnect pacing


async def publish_all(
    url: str, published: list[str], restart_at: int, crash: asyncio.Event, back: asyncio.Event
) -> None:
    """Publish TOTAL changes; each batch is retried with its Idempotency-Key until stored."""
    async with aiohttp.ClientSession() as session:
        for batch in range(TOTAL // BATCH):
            if batch == restart_at:
                crash.set()
                await back.wait()
            body = notification(changes(BATCH, start=batch * BATCH))
            for _attempt in range(400):
                try:
                    async with session.post(
                        f"{url}/topics/crash",
                        data=body,
                        headers={
                            "Content-Type": "application/xml",
                            "Idempotency-Key": f"batch-{batch}",
                        },
                    ) as resp:
                        if resp.status == 202:
                            published.extend((await resp.json())["ids"])
                            break
                except (aiohttp.ClientError, OSError):
                    pass
                await asyncio.sleep(0.05)  # publisher back-off while the hub is down
            else:
                raise AssertionError(f"batch {batch} never stored")


@pytest.mark.timeout(180)
async def test_sigkill_midway_loses_nothing(tmp_path: Path) -> None:
    hub = HubProcess(str(tmp_path), None, "--allow-private-callbacks").start()
    callback = await CallbackServer().start()
    ws_ids: list[str] = []
    sse_ids: list[str] = []
    published: list[str] = []
    stop, crash, back = asyncio.Event(), asyncio.Event(), asyncio.Event()
    followers: list[asyncio.Task[None]] = []
    try:
        async with aiohttp.ClientSession() as session:
            form = {
                "hub.mode": "subscribe",
                "hub.topic": f"{hub.url}/topics/crash",
                "hub.callback": callback.url,
                "hub.since": "0",
            }
            assert (await session.post(hub.url + "/", data=form)).status == 202
        await wait_for(lambda: len(callback.verifications) == 1)
        followers = [
            asyncio.create_task(follow_ws(hub.url, ws_ids, stop)),
            asyncio.create_task(follow_sse(hub.url, sse_ids, stop)),
        ]
        publisher = asyncio.create_task(
            publish_all(hub.url, published, TOTAL // BATCH // 2, crash, back)
        )
        await asyncio.wait_for(crash.wait(), 60)
        # Let the followers get some of the first half before the crash, not all of it.
        await wait_for(lambda: len(ws_ids) > 0 and len(sse_ids) > 0 and callback.ids, 30)
        hub.kill()
        hub.start()
        back.set()
        await asyncio.wait_for(publisher, 120)
        assert len(published) == TOTAL == len(set(published))

        def complete() -> bool:
            return all(len(set(ids)) >= TOTAL for ids in (ws_ids, sse_ids, callback.ids))

        await wait_for(complete, 90)
        for name, ids in (("websub", callback.ids), ("websocket", ws_ids), ("sse", sse_ids)):
            assert first_occurrences(ids) == published, name
    finally:
        stop.set()
        for task in followers:
            task.cancel()
        for task in followers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await callback.stop()
        hub.stop()

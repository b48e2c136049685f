"""The follower over each push transport, and `rshub subscribe` as a process."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import aiohttp
import orjson
import pytest

from subscriber.follower import Follower
from subscriber.position import EventCursor
from tests.conftest import Hub
from tests.support import changes, notification


@pytest.mark.parametrize("via", ["ws", "sse", "webhook", "poll"])
async def test_follower_delivers_each_change_once(hub: Hub, via: str) -> None:
    await hub.publish("f", notification(changes(3)))
    async with aiohttp.ClientSession() as session:
        position = EventCursor()
        follower = Follower(
            session,
            position,
            hub=hub.url,
            topic="f",
            via=via,  # type: ignore[arg-type]
            poll_interval=0.1,
        )
        got: list[str] = []
        want = 5 if via == "poll" else 2  # push starts live, polling from what is retained

        async def consume() -> None:
            async for event in follower.events():
                got.append(event.loc)
                if len(got) >= want:
                    return

        async with follower:
            await hub.publish("f", notification(changes(2, start=3)))
            await asyncio.wait_for(consume(), 15)
    expected = [f"http://example.org/r{i}" for i in range(5)]
    if via == "poll":
        assert got == expected
    else:  # push starts live: the last two (and nothing twice)
        assert got[-2:] == expected[-2:] and len(set(got)) == len(got)


class _PublishingAfterTheCheck(Follower):
    """A follower whose topic gets its first publish right after it found the topic empty,
    before push connects: the window the CLI's users hit (1 in ~6 runs of
    test_client_mistakes' fresh-topic case)."""

    publish: Callable[[], Awaitable[object]]

    async def _check_topic(self) -> None:
        await super()._check_topic()
        await self.publish()


@pytest.mark.parametrize("via", ["ws", "sse", "webhook"])
async def test_a_first_publish_before_push_connects_is_not_missed(hub: Hub, via: str) -> None:
    async with aiohttp.ClientSession() as session:
        follower = _PublishingAfterTheCheck(
            session,
            EventCursor(),
            hub=hub.url,
            topic="new",
            via=via,
            poll_interval=0.1,  # type: ignore[arg-type]
        )
        follower.publish = lambda: hub.publish("new", notification(changes(1)))
        got: list[str] = []

        async def consume() -> None:
            async for event in follower.events():
                got.append(event.loc)
                return

        async with follower:
            assert follower._new_topic
            await asyncio.wait_for(consume(), 15)
    assert got == ["http://example.org/r0"]


async def test_rshub_subscribe_prints_json_lines(hub: Hub) -> None:
    ids = (await (await hub.publish("s", notification(changes(3)))).json())["ids"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rshub",
        "subscribe",
        "--hub",
        hub.url,
        "--topic",
        "s",
        "--since",
        ids[0],
        "--limit",
        "2",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 20)
    lines = [orjson.loads(line) for line in out.splitlines()]
    assert [e["id"] for e in lines] == ids[1:]
    assert lines[0]["topic"] == "s" and lines[0]["change"] == "updated"

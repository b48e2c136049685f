"""Ctrl-C (SIGINT) ends every long-running client command within 2 s, with exit code 130.

Each command runs as a real process against a hub that is down (a closed port) and
against a live one; SIGINT is sent once the command shows it is at work.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from hub.core.settings import Settings
from tests.commands import Command
from tests.conftest import Hub, start_hub
from tests.publisher.helpers import StaticSource, serve, stored_events
from tests.publisher.test_bridge import changelist, v10
from tests.support import TIME_SCALE, free_port, notification, wait_for

#: The promise: from SIGINT to exit.
LIMIT = 2.0


async def check_interrupt(cmd: Command, ready: Callable[[], bool | Awaitable[bool]]) -> float:
    await cmd.start()
    try:
        await wait_for(lambda: ready() or cmd.proc is None or cmd.proc.returncode is not None, 20)
        elapsed, code = await cmd.interrupt()
    finally:
        if cmd.proc is not None and cmd.proc.returncode is None:
            cmd.proc.kill()
            await cmd.proc.wait()
    print(f"{' '.join(cmd.argv[:1])}: exit {code} {elapsed:.2f}s after SIGINT")
    assert code == 130, cmd.stderr
    assert elapsed < LIMIT * TIME_SCALE, f"{elapsed:.1f}s: {cmd.stderr}"
    assert "Traceback" not in cmd.stderr, cmd.stderr
    return elapsed


def says(cmd: Command, text: str) -> Callable[[], bool]:
    return lambda: text in cmd.stderr


@pytest.fixture
def dead_hub() -> str:
    return f"http://127.0.0.1:{free_port()}"


@asynccontextmanager
async def source_with_changes(n: int) -> AsyncIterator[str]:
    source = StaticSource()
    async with serve(source.app) as base:
        source.docs["/cl.xml"] = changelist([v10(f"r{i}", "created", i) for i in range(n)], 0)
        yield base + "/cl.xml"


# -- publish ----------------------------------------------------------------------------------


async def test_publish_interrupted_while_the_hub_is_down(dead_hub: str) -> None:
    cmd = Command(
        "publish", "--hub", dead_hub, "--topic", "t", "--loc", "http://e.org/a",
        "--retry-for", "600",
    )  # fmt: skip
    await check_interrupt(cmd, says(cmd, "retrying"))


async def test_publish_interrupted_while_sending_a_file(
    hub: Hub, redis_url: str, tmp_path: Path
) -> None:
    big = tmp_path / "big.xml"
    big.write_bytes(notification({"loc": f"http://e.org/{i}"} for i in range(20_000)))
    cmd = Command("publish", "--hub", hub.url, "--topic", "t", "--batch-size", "5", str(big))

    async def storing() -> bool:
        return len(await stored_events(redis_url, "t")) > 0

    await check_interrupt(cmd, storing)


# -- wikipedia --------------------------------------------------------------------------------


async def test_wikipedia_interrupted_while_the_hub_is_down(dead_hub: str, tmp_path: Path) -> None:
    cmd = Command(
        "wikipedia", "--hub", dead_hub, "--replay", "sample", "--state", str(tmp_path / "s"),
    )  # fmt: skip
    await check_interrupt(cmd, says(cmd, "retrying"))


async def test_wikipedia_interrupted_while_publishing(hub: Hub, tmp_path: Path) -> None:
    cmd = Command(
        "wikipedia", "--hub", hub.url, "--replay", "sample", "--rate", "20",
        "--state", str(tmp_path / "s"),
    )  # fmt: skip
    await check_interrupt(cmd, says(cmd, "publishing"))


# -- bridge -----------------------------------------------------------------------------------


async def test_bridge_interrupted_while_the_hub_is_down(dead_hub: str, tmp_path: Path) -> None:
    async with source_with_changes(3) as url:
        cmd = Command(
            "bridge", "--hub", dead_hub, "--topic", "t", "--source", url,
            "--state", str(tmp_path / "s"),
        )  # fmt: skip
        await check_interrupt(cmd, says(cmd, "retrying"))


async def test_bridge_interrupted_between_polls(hub: Hub, tmp_path: Path) -> None:
    async with source_with_changes(3) as url:
        cmd = Command(
            "bridge", "--hub", hub.url, "--topic", "t", "--source", url,
            "--state", str(tmp_path / "s"),
        )  # fmt: skip
        await check_interrupt(cmd, says(cmd, "published 3 new changes"))


# -- subscribe --------------------------------------------------------------------------------


async def test_subscribe_interrupted_while_the_hub_is_down(dead_hub: str) -> None:
    cmd = Command("subscribe", "--hub", dead_hub, "--topic", "t", "-v")
    await check_interrupt(cmd, says(cmd, "waiting for it"))


@pytest.mark.parametrize("via", ["ws", "sse", "poll"])
async def test_subscribe_interrupted_while_following(hub: Hub, via: str) -> None:
    await hub.publish("t", notification([{"loc": "http://e.org/a", "change": "deleted"}]))
    cmd = Command("subscribe", "--hub", hub.url, "--topic", "t", "--via", via, "-v")
    await check_interrupt(cmd, says(cmd, f"now {'poll' if via == 'poll' else 'push'}"))


# -- sync -------------------------------------------------------------------------------------


async def test_sync_interrupted_while_the_hub_is_down(redis_url: str, tmp_path: Path) -> None:
    settings = Settings(host="127.0.0.1", port=free_port())
    runner, _app = await start_hub(settings, redis_url)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{settings.public_url}/topics/t",
            data=notification([{"loc": "http://e.org/a", "change": "deleted"}]),
            headers={"Content-Type": "application/xml"},
        ) as resp:
            assert resp.status == 202
    argv = ["sync", "--hub", settings.public_url, "--topic", "t", "--dest", str(tmp_path / "m")]
    try:
        first = await Command(*argv, "--once").start()
        assert first.proc is not None
        assert await asyncio.wait_for(first.proc.wait(), 20) == 0, first.stderr
    finally:
        await runner.cleanup()
    cmd = Command(*argv, "--interval", "0.2")
    await check_interrupt(cmd, says(cmd, "waiting for it"))


async def test_sync_interrupted_while_following(hub: Hub, tmp_path: Path) -> None:
    await hub.publish("t", notification([{"loc": "http://e.org/a", "change": "deleted"}]))
    cmd = Command("sync", "--hub", hub.url, "--topic", "t", "--dest", str(tmp_path / "m"))
    await check_interrupt(cmd, says(cmd, "baseline:"))

"""``rshub sync`` from the hub alone: baseline from its Resource List, then push or polling
its Change Lists (real hub and sync processes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support import HubProcess, wait_for

from .helpers import Child, expected_files, mirror_files, publish
from .source import TestSource

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def source() -> AsyncIterator[TestSource]:
    src = TestSource()
    await src.start()
    yield src
    await src.stop()


async def test_sync_from_hub_documents_push_and_poll(tmp_path: Path, source: TestSource) -> None:
    hub = HubProcess(str(tmp_path))
    await asyncio.to_thread(hub.start)
    children: list[Child] = []

    def converged(dest: Path) -> bool:
        return mirror_files(dest) == expected_files(source.url, source.files)

    async with aiohttp.ClientSession() as session:
        try:
            await publish(
                session,
                hub.url,
                "docs",
                [source.put(f"d{i}", f"first {i}".encode()) for i in range(15)],
            )
            push_dest, poll_dest = tmp_path / "push", tmp_path / "poll"
            for dest, via in ((push_dest, "ws"), (poll_dest, "poll")):
                children.append(
                    Child(
                        tmp_path / f"{via}.log",
                        "sync",
                        "--dest",
                        str(dest),
                        "--hub",
                        hub.url,
                        "--topic",
                        "docs",
                        "--via",
                        via,
                        "--interval",
                        "0.2",
                        "--no-progress",
                        "-v",
                    ).start()
                )
            await wait_for(lambda: converged(push_dest) and converged(poll_dest), 20)
            changes = [source.put(f"d{i}", f"second {i}".encode()) for i in range(5)]
            changes += [source.delete("d14"), source.put("sub/e", b"e")]
            await publish(session, hub.url, "docs", changes)
            await wait_for(lambda: converged(push_dest) and converged(poll_dest), 20)
            for child in children:
                assert child.stop() == 130, child.log()  # stopped by SIGTERM
            audit = Child(
                tmp_path / "audit.log",
                "sync",
                "--audit",
                "--dest",
                str(poll_dest),
                "--hub",
                hub.url,
                "--topic",
                "docs",
            ).start()
            assert await asyncio.to_thread(audit.proc.wait, 20) == 0, audit.log()  # type: ignore[union-attr]
        finally:
            for child in children:
                if child.proc is not None and child.proc.poll() is None:
                    child.stop()
            await asyncio.to_thread(hub.stop)

"""``rshub sync`` end to end with real processes: test Source → hub → mirror.

The Source is a standard ResourceSync Source on 127.0.0.1 (files, Resource List, Change
Lists). Each change made there is published to a real ``rshub serve`` process; a real
``rshub sync`` process keeps a mirror. The mirror must equal the Source after every step:
live push, hub killed (polling the Source meanwhile) and restarted, the subscriber stopped
and restarted, and a resource whose bytes do not match the announced hash is rejected.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support import HubProcess, wait_for

from .helpers import Child, expected_files, mirror_files, publish
from .source import TestSource

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def source() -> AsyncIterator[TestSource]:
    src = TestSource(page_size=20)
    await src.start()
    yield src
    await src.stop()


def _converged(dest: Path, src: TestSource) -> bool:
    return mirror_files(dest) == expected_files(src.url, src.files)


async def test_mirror_follows_source_through_hub_restart_and_subscriber_restart(
    tmp_path: Path, source: TestSource
) -> None:
    hub = HubProcess(str(tmp_path))
    await asyncio.to_thread(hub.start)
    dest = tmp_path / "mirror"
    args = (
        "sync",
        "--dest",
        str(dest),
        "--hub",
        hub.url,
        "--topic",
        "files",
        "--source",
        f"{source.url}/.well-known/resourcesync",
        "--interval",
        "0.2",
        "--push-retry",
        "0.3",
        "-v",
        "--no-progress",
    )
    sync = Child(tmp_path / "sync.log", *args)
    async with aiohttp.ClientSession() as session:
        try:
            # Baseline from the Source's Resource List.
            await publish(
                session,
                hub.url,
                "files",
                [source.put(f"f{i}.txt", f"v0 {i}".encode()) for i in range(20)],
            )
            sync.start()
            await wait_for(lambda: _converged(dest, source), 20)
            await wait_for(lambda: "baseline:" in sync.log(), 5)

            # Live changes by push.
            changes = [source.put(f"f{i}.txt", f"v1 {i}".encode()) for i in range(5)]
            changes += [source.delete("f19.txt"), source.put("new/one.txt", b"one")]
            await publish(session, hub.url, "files", changes)
            await wait_for(lambda: _converged(dest, source), 10)

            # Hub killed: changes still reach the mirror by polling the Source.
            await asyncio.to_thread(hub.kill)
            source.put("f5.txt", b"while the hub is down")
            source.delete("f6.txt")
            await wait_for(lambda: _converged(dest, source), 10)

            # Hub back on the same port and data: push again.
            await asyncio.to_thread(hub.start)
            await wait_for(lambda: "now push (push is back)" in sync.log(), 10)
            await publish(session, hub.url, "files", [source.put("f7.txt", b"after restart")])
            await wait_for(lambda: _converged(dest, source), 10)

            # Subscriber stopped; changes published meanwhile; restarted: catches up.
            assert sync.stop() == 130, sync.log()  # stopped by SIGTERM
            assert "summary:" in sync.log()
            await publish(
                session,
                hub.url,
                "files",
                [source.put(f"g{i}.txt", b"while away") for i in range(10)]
                + [source.delete("f8.txt")],
            )
            sync = Child(tmp_path / "sync2.log", *args).start()
            await wait_for(lambda: _converged(dest, source), 15)
            assert "baseline:" not in sync.log()  # resumed, no second baseline

            # Bytes that do not match the announced hash are reported, not written.
            source.served_bytes["evil.txt"] = b"tampered"
            await publish(session, hub.url, "files", [source.put("evil.txt", b"genuine")])
            await wait_for(lambda: "rejected" in sync.log() and "evil.txt" in sync.log(), 10)
            evil = dest / "http" / source.url.removeprefix("http://").replace(":", "_")
            assert not (evil / "files" / "evil.txt").exists()
            assert sync.stop() == 130  # stopped by SIGTERM; the summary tells the problems
            assert "rejected 1" in sync.log()

            # Audit: the mirror differs from the Source's Resource List by evil.txt only.
            audit = Child(
                tmp_path / "audit.log",
                "sync",
                "--audit",
                "--dest",
                str(dest),
                "--source",
                f"{source.url}/.well-known/resourcesync",
            ).start()
            assert audit.proc is not None
            assert await asyncio.to_thread(audit.proc.wait, 20) == 1
            assert "1 missing, 0 extra, 0 different" in audit.log()
            del source.served_bytes["evil.txt"]
            Path(dest / "http").joinpath("stray.txt").write_bytes(b"x")
            audit = Child(
                tmp_path / "audit2.log",
                "sync",
                "--audit",
                "--dest",
                str(dest),
                "--source",
                f"{source.url}/.well-known/resourcesync",
            ).start()
            assert await asyncio.to_thread(audit.proc.wait, 20) == 1  # type: ignore[union-attr]
            assert "1 missing, 1 extra, 0 different" in audit.log()
        finally:
            if sync.proc is not None and sync.proc.poll() is None:
                sync.stop()
            await asyncio.to_thread(hub.stop)

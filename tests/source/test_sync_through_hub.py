"""``rshub source DIR`` → hub → ``rshub sync``, all real processes but the hub: a directory
of a few hundred files is mirrored through the hub's push, then creations, updates,
deletions and renames (of files and of a directory) reach the mirror, also across a
restart of the Source during which the directory changed. The hub stores each change
once: a restart neither loses one nor sends one again."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from tests.commands import Command
from tests.conftest import Hub
from tests.publisher.helpers import stored_events
from tests.source.support import SourceProcess, tree
from tests.support import HubProcess, wait_for

pytestmark = pytest.mark.timeout(300)


def fill(root: Path, count: int) -> None:
    for i in range(count):
        path = root / f"part{i % 5}" / f"file{i:04d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"{i}\n".encode() * (1 + i % 50))


async def test_a_directory_is_mirrored_through_the_hub_across_changes_and_restarts(
    hub: Hub, redis_url: str, tmp_path: Path
) -> None:
    topic = f"dir-{uuid.uuid4().hex[:8]}"
    root, state, dest = tmp_path / "dir", tmp_path / "source.json", tmp_path / "mirror"
    fill(root, 300)
    source = SourceProcess(root, state, "--hub", hub.url, "--topic", topic)
    await source.start()
    mirrored = dest / "http" / f"127.0.0.1_{source.port}" / "files"

    async def events() -> list[dict[str, object]]:
        return await stored_events(redis_url, topic)

    async def pushed(count: int) -> bool:
        return len(await events()) == count

    await wait_for(lambda: pushed(300), timeout=60)
    sync = await Command("sync", "--dest", str(dest), "--hub", hub.url, "--topic", topic).start()
    try:

        async def mirror_equal() -> bool:
            return tree(mirrored) == tree(root)

        await wait_for(mirror_equal, timeout=90)

        # Creations, updates, deletions, renames of files and of a directory.
        for i in range(20):
            (root / "new" / f"n{i}.txt").parent.mkdir(exist_ok=True)
            (root / "new" / f"n{i}.txt").write_text(f"new {i}\n")
            (root / "part1" / f"file{5 * i + 1:04d}.txt").write_text(f"updated {i}\n")
            (root / "part2" / f"file{5 * i + 2:04d}.txt").unlink()
            os.rename(root / "part3" / f"file{5 * i + 3:04d}.txt", root / "part3" / f"moved{i}")
        os.rename(root / "part4", root / "part4-renamed")
        await wait_for(mirror_equal, timeout=90)
        # 20 + 20 + 20 + 2 x 20 + 2 x 60 (the directory's files)
        await wait_for(lambda: pushed(300 + 220), timeout=30)

        # Stopped, the directory changes; restarted, the differences are pushed once.
        assert await source.stop() == 130
        (root / "part0" / "file0000.txt").write_text("changed while stopped\n")
        (root / "part0" / "file0005.txt").unlink()
        (root / "while-stopped.txt").write_text("created while stopped\n")
        await source.start()
        await wait_for(mirror_equal, timeout=90)
        await wait_for(lambda: pushed(300 + 220 + 3), timeout=30)

        # A restart with nothing changed sends nothing.
        assert await source.stop() == 130
        await source.start()
        (root / "after-restarts.txt").write_text("the watcher is back\n")
        await wait_for(mirror_equal, timeout=90)
        await wait_for(lambda: pushed(300 + 220 + 3 + 1), timeout=30)
        stored = await events()
        keys = [(e["loc"], e["change"], e["lastmod"]) for e in stored]
        assert len(set(keys)) == len(keys), "a change stored twice"
    finally:
        await sync.stop()
        if source.command is not None:
            await source.command.stop()


async def test_each_of_the_three_processes_restarts_and_the_mirror_follows(
    tmp_path: Path,
) -> None:
    """``rshub source`` → ``rshub serve`` → ``rshub sync``, each a process of its own, each
    stopped in turn while the directory changes (the hub killed outright): after each
    restart the mirror equals the directory again, and the subscriber never baselines a
    second time."""
    hub = HubProcess(str(tmp_path / "hub"))
    os.makedirs(hub.data_dir)
    await asyncio.to_thread(hub.start)
    topic = "dir"
    root, state, dest = tmp_path / "dir", tmp_path / "source.json", tmp_path / "mirror"
    fill(root, 100)
    source = SourceProcess(root, state, "--hub", hub.url, "--topic", topic)
    sync_args = ("sync", "--dest", str(dest), "--hub", hub.url, "--topic", topic)
    sync: Command | None = None
    try:
        await source.start()
        mirrored = dest / "http" / f"127.0.0.1_{source.port}" / "files"

        async def mirror_equal() -> bool:
            return tree(mirrored) == tree(root)

        sync = await Command(*sync_args).start()
        await wait_for(mirror_equal, timeout=90)

        # The Source stopped; the directory changes; restarted, it pushes the differences.
        assert await source.stop() == 130
        (root / "part0" / "file0000.txt").write_text("changed while the source was down\n")
        (root / "part1" / "file0001.txt").unlink()
        await source.start()
        await wait_for(mirror_equal, timeout=90)

        # The hub killed; the directory changes (the Source's pushes wait and retry);
        # the hub back on its port and data: the changes reach the mirror by push.
        await asyncio.to_thread(hub.kill)
        (root / "part2" / "file0002.txt").write_text("changed while the hub was down\n")
        (root / "made-while-the-hub-was-down.txt").write_text("new\n")
        await asyncio.to_thread(hub.start)
        await wait_for(mirror_equal, timeout=90)

        # The subscriber stopped; the directory changes; restarted, it catches up from its
        # position, without a second baseline.
        assert "baseline:" in sync.stderr, sync.stderr  # the first run's, once
        await sync.interrupt()
        (root / "part3" / "file0003.txt").write_text("changed while the mirror was down\n")
        (root / "part4" / "file0004.txt").unlink()
        sync = await Command(*sync_args).start()
        await wait_for(mirror_equal, timeout=90)
        assert "baseline:" not in sync.stderr, sync.stderr
    finally:
        if sync is not None:
            await sync.stop()
        if source.command is not None:
            await source.command.stop()
        await asyncio.to_thread(hub.stop)

"""``rshub sync`` retries the fetches that failed, and ``--audit --repair`` fixes a mirror."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rshub.cli import main
from tests.commands import Command
from tests.support import wait_for

from .helpers import expected_files, mirror_files
from .source import TestSource


@pytest.fixture
async def source() -> AsyncIterator[TestSource]:
    src = TestSource()
    await src.start()
    src.put("a.txt", b"alpha")
    src.put("b.txt", b"bravo")
    src.put("c.txt", b"charlie")
    yield src
    await src.stop()


def sync(source: TestSource, dest: Path, *flags: str) -> list[str]:
    return [
        "sync",
        "--source",
        f"{source.url}/.well-known/resourcesync",
        "--dest",
        str(dest),
        *flags,
    ]


async def rshub(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_a_fetch_failed_in_the_baseline_is_retried_next_run(
    source: TestSource, tmp_path: Path
) -> None:
    source.failing["b.txt"] = 6  # the baseline's tries and the run's own retry
    dest = tmp_path / "m"
    assert await rshub(*sync(source, dest, "--once")) == 1
    assert "failed" in (dest / ".rshub" / "state.json").read_text()
    assert len(mirror_files(dest)) == 2
    assert await rshub(*sync(source, dest, "--once")) == 0
    assert mirror_files(dest) == expected_files(source.url, source.files)


async def test_a_following_sync_retries_failed_fetches_by_itself(
    source: TestSource, tmp_path: Path
) -> None:
    source.failing["b.txt"] = 3
    dest = tmp_path / "m"
    cmd = await Command(*sync(source, dest, "--interval", "0.2")).start()
    try:
        await wait_for(lambda: "failed" in cmd.stderr, 20)
        # No change to b.txt comes: only the retry can fetch it.
        await wait_for(lambda: mirror_files(dest) == expected_files(source.url, source.files), 10)
        _, code = await cmd.interrupt()
    finally:
        await cmd.stop()
    assert code == 130


async def test_audit_repair_fixes_missing_different_and_extra_files(
    source: TestSource, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    assert await rshub(*sync(source, dest, "--once")) == 0
    files = {Path(dest, rel) for rel in mirror_files(dest)}
    a, b, _ = sorted(files)
    a.unlink()
    b.write_bytes(b"tampered")
    (dest / "stray.txt").write_bytes(b"extra")
    assert await rshub(*sync(source, dest, "--audit")) == 1
    assert await rshub(*sync(source, dest, "--audit", "--repair")) == 0
    assert await rshub(*sync(source, dest, "--audit")) == 0
    assert mirror_files(dest) == expected_files(source.url, source.files)


async def test_baseline_progress_bar_only_when_asked(source: TestSource, tmp_path: Path) -> None:
    drawn = await Command(*sync(source, tmp_path / "m1", "--once", "--progress")).start()
    quiet = await Command(*sync(source, tmp_path / "m2", "--once")).start()
    try:
        assert await drawn.wait() == 0 and await quiet.wait() == 0
    finally:
        await drawn.stop()
        await quiet.stop()
    assert "baseline: 100%" in drawn.stderr and "3/3" in drawn.stderr
    assert "3/3" not in quiet.stderr  # stderr is a pipe: no bar by default

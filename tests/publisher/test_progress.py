"""Progress bars of the long publisher jobs: drawn when asked (or on a terminal), not in pipes."""

from __future__ import annotations

from pathlib import Path

from tests.commands import Command
from tests.conftest import Hub
from tests.publisher.helpers import StaticSource, serve
from tests.publisher.test_bridge import changelist, discovery, index, v10
from tests.support import changes, notification


async def run(*argv: str) -> Command:
    cmd = await Command(*argv).start()
    try:
        assert await cmd.wait(60) == 0, cmd.stderr
    finally:
        await cmd.stop()
    return cmd


async def test_publishing_a_file_shows_changes_sent(hub: Hub, tmp_path: Path) -> None:
    path = tmp_path / "changes.xml"
    path.write_bytes(notification(changes(250)))
    argv = ("publish", "--hub", hub.url, "--topic", "p", str(path), "--batch-size", "100")
    drawn = await run(*argv, "--progress")
    quiet = await run(*argv)
    assert "published: 100%" in drawn.stderr and "250/250" in drawn.stderr
    assert len(drawn.lines) == 250  # every event id still printed on stdout
    assert "250/250" not in quiet.stderr  # stderr is a pipe: no bar by default


async def test_wikipedia_replay_shows_events_read(hub: Hub, tmp_path: Path) -> None:
    argv = ("wikipedia", "--hub", hub.url, "--topic", "w", "--replay", "sample", "--limit", "300")
    drawn = await run(*argv, "--state", str(tmp_path / "a.json"), "--progress")
    quiet = await run(*argv, "--state", str(tmp_path / "b.json"))
    assert "events read:" in drawn.stderr and "300/2400" in drawn.stderr
    assert "300/2400" not in quiet.stderr


async def test_bridge_catch_up_shows_changes_published(hub: Hub, tmp_path: Path) -> None:
    source = StaticSource()
    async with serve(source.app) as base:
        discovery(source, base)
        source.docs["/cl1.xml"] = changelist([v10(f"r{i}", "created", i) for i in range(40)], 0)
        source.docs["/changelist-index.xml"] = index(base, [("/cl1.xml", 0, None)])
        start = base + "/.well-known/resourcesync"
        argv = ("bridge", "--hub", hub.url, "--topic", "b", "--source", start, "--once")
        drawn = await run(*argv, "--state", str(tmp_path / "a.json"), "--progress")
        quiet = await run(*argv, "--state", str(tmp_path / "b.json"))
    assert "changes published: 100%" in drawn.stderr and "40/40" in drawn.stderr
    assert "40/40" not in quiet.stderr

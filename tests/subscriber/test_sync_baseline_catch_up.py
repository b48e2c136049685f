"""``rshub sync --hub --topic --once`` fetches each file once: the catch-up that follows a
baseline skips the changes the baseline already holds, and applies every change after it.

The baseline covers every change the hub received before its ``at`` (the Resource List's:
the hub's Redis time, the clock of its event ids); a change received before it whose
``(loc, lastmod, change)`` the baseline listed is not fetched again. Before, every catch-up
event after the first was judged by its id alone and fetched again (here 23 GETs for 12
resources). A Resource Dump's ``at`` is the Source's clock, counted less ``--overlap``: the
dump case runs with no overlap, so that it counts whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rshub.cli import main
from tests.conftest import Hub
from tests.hub.test_changedump_notifications import PACKAGE, dump_notification
from tests.support import notification

from .helpers import expected_files, mirror_files
from .test_sync_dump import DumpSource, gets

#: Resources, and the versions of each published before the first run.
RESOURCES, VERSIONS = 12, 3


@pytest.fixture
async def source() -> AsyncIterator[DumpSource]:
    src = DumpSource()
    src.dump = False
    await src.start()
    yield src
    await src.stop()


async def _publish_versions(hub: Hub, source: DumpSource) -> None:
    """Each resource created, then updated; one notification per change, so the hub
    holds ``RESOURCES * VERSIONS`` events, each with its own id."""
    for version in range(VERSIONS):
        for n in range(RESOURCES):
            change = source.put(f"r/{n:02d}.txt", b"resource %d version %d\n" % (n, version))
            assert (await hub.publish("t", notification([change]))).status == 202


def _sync(hub: Hub, dest: Path) -> list[str]:
    return ["sync", "--hub", hub.url, "--topic", "t", "--dest", str(dest), "--no-progress"]


@pytest.mark.parametrize("baseline", ["resourcelist", "resourcedump"])
async def test_once_fetches_each_file_once_then_applies_later_updates(
    hub: Hub, source: DumpSource, tmp_path: Path, baseline: str
) -> None:
    await _publish_versions(hub, source)
    argv = [*_sync(hub, tmp_path / "m"), "--once"]
    if baseline == "resourcedump":
        source.dump = True
        declared = {"resourcedump": f"{source.url}/resourcedump.xml"}
        resp = await hub.publish("t", dump_notification(PACKAGE, declared=declared))
        assert resp.status == 202, await resp.text()
        # The dump's ``at`` is the Source's clock: with no skew tolerated, it counts whole.
        argv += ["--overlap", "0"]
    assert await asyncio.to_thread(main, argv) == 0
    files = gets(source, "/files/")
    if baseline == "resourcelist":
        assert files == RESOURCES, f"{files} GETs for {RESOURCES} resources"
    else:
        assert files == 0, f"{files} GETs after a Resource Dump baseline"
        assert gets(source, "/dump/") == len(source.packages) >= 1
    assert mirror_files(tmp_path / "m") == expected_files(source.url, source.files)

    # A change after the baseline is applied by the next run, and only it is fetched.
    change = source.put("r/03.txt", b"after the baseline\n")
    assert (await hub.publish("t", notification([change]))).status == 202
    assert await asyncio.to_thread(main, argv) == 0
    assert gets(source, "/files/") == files + 1
    assert mirror_files(tmp_path / "m") == expected_files(source.url, source.files)

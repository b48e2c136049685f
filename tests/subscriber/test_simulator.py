"""``rshub sync`` in polling mode against ``resync-simulator``, with no hub at all.

The simulator is a standard pull-only ResourceSync Source (Source Description, Capability
List, Resource List, a dynamic Change List) whose resources change in memory. The mirror
must end equal to the simulator's Resource List, hashes included (``rshub sync --audit``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support import TIME_SCALE, free_port, wait_for

from .helpers import Child

pytestmark = pytest.mark.timeout(60)

CONFIG = """
source:
  name: rshub test source
  number_of_resources: 40
  change_delay: {delay}
  event_types: [create, update, delete]
  average_payload: 200
  max_events: {events}
  stats_interval: 1000
resource_list_builder:
  class: DynamicResourceListBuilder
  uri_path: resourcelist.xml
changememory:
  class: DynamicChangeList
  uri_path: changelist.xml
  max_changes: 10000
"""

LOGGING = """
version: 1
handlers:
  null: {class: logging.NullHandler}
root: {level: WARNING, handlers: [null]}
"""


@pytest.mark.parametrize("spec", ["1.1", "1.0"])
async def test_polling_sync_keeps_mirror_in_step_with_resync_simulator(
    tmp_path: Path, spec: str
) -> None:
    events = 60
    (tmp_path / "sim.yaml").write_text(CONFIG.format(delay=0.04, events=events))
    (tmp_path / "log.yaml").write_text(LOGGING)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sim = _launch(tmp_path, port, spec)
    dest = tmp_path / "mirror"
    sync = Child(
        tmp_path / "sync.log",
        "sync",
        "--dest",
        str(dest),
        "--source",
        f"{url}/.well-known/resourcesync",
        "--interval",
        "0.2",
        "--no-progress",
    )
    try:
        async with aiohttp.ClientSession() as session:

            async def changelist_entries() -> int:
                try:
                    async with session.get(f"{url}/changelist.xml") as resp:
                        return (await resp.text()).count("<url>") if resp.status == 200 else -1
                except aiohttp.ClientError:
                    return -1

            await wait_for(lambda: _up(changelist_entries), 15)
            sync.start()
            # Let the simulator finish its changes while the mirror follows them.
            await wait_for(lambda: _at_least(changelist_entries, events), 30)

            async def in_step() -> bool:
                audit = Child(
                    tmp_path / "audit.log",
                    "sync",
                    "--audit",
                    "--dest",
                    str(dest),
                    "--source",
                    f"{url}/.well-known/resourcesync",
                ).start()
                assert audit.proc is not None
                return await asyncio.to_thread(audit.proc.wait, 20 * TIME_SCALE) == 0

            await wait_for(in_step, 20, interval=0.3)
        assert "baseline:" in sync.log()
        assert len(list((dest / "http").rglob("*"))) > 20
    finally:
        if sync.proc is not None:
            sync.stop()
        sim.terminate()
        sim.wait(10)


def _launch(tmp_path: Path, port: int, spec: str) -> subprocess.Popen[bytes]:
    with open(tmp_path / "sim.log", "wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("simulator_launcher.py")),
                str(port),
                str(tmp_path / "sim.yaml"),
                str(tmp_path / "log.yaml"),
                "--spec-version",
                spec,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


async def _up(count: object) -> bool:
    return await count() >= 0  # type: ignore[operator, no-any-return]


async def _at_least(count: object, n: int) -> bool:
    return await count() >= n  # type: ignore[operator, no-any-return]

"""Run ``resync-simulator`` (PyPI, Tornado) as a local pull-only ResourceSync Source.

resync-simulator 1.1.0 calls ``random.sample(dict.keys(), n)``, which Python 3.11 rejects
("Population must be a sequence"); the launcher patches ``random.sample`` to accept any
iterable. It also keeps the HTTP interface serving after the simulation's last change
(the simulator would otherwise try to stop Tornado from the wrong thread), so a test can
read the final Change List, and touches a marker file when that last change is made.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from pathlib import Path

import aiohttp

from tests.support import free_port, wait_for

LAUNCHER = """
import random, runpy, sys
_sample = random.sample
def _sample_any(population, k, **kw):
    if not isinstance(population, (list, tuple, range, str)):
        population = list(population)
    return _sample(population, k, **kw)
random.sample = _sample_any
import simulator.http
simulator.http.HTTPInterface.stop = lambda self: None  # keep serving after the last change
import simulator.source
_simulate = simulator.source.Source.simulate_changes
def _simulate_then_mark(self):
    _simulate(self)
    open(marker, "w").close()  # the simulation is over: the Change List is final
simulator.source.Source.simulate_changes = _simulate_then_mark
script, marker = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
"""

CONFIG = """
source:
  name: rshub bridge test source
  number_of_resources: {resources}
  change_delay: {delay}
  event_types: [create, update, delete]
  average_payload: 100
  max_events: {events}
  stats_interval: 100000
resource_list_builder:
  class: DynamicResourceListBuilder
  uri_path: resourcelist.xml
changememory:
  class: DynamicChangeList
  uri_path: changelist.xml
  max_changes: 100000
"""

LOGGING = """
version: 1
disable_existing_loggers: true
root: {level: ERROR, handlers: []}
"""


def script_path() -> str:
    found = shutil.which("resync-simulator") or str(
        Path(sys.executable).parent / "resync-simulator"
    )
    if not Path(found).exists():
        raise RuntimeError("resync-simulator is not installed (pip install -e '.[test]')")
    return found


class Simulator:
    """One simulator process on 127.0.0.1; ``events`` changes, ``delay`` seconds apart."""

    def __init__(
        self,
        workdir: Path,
        *,
        events: int,
        delay: float = 0.01,
        resources: int = 30,
        spec_version: str = "1.1",
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.events = events
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "simulator.yaml"
        config.write_text(CONFIG.format(resources=resources, delay=delay, events=events))
        logging_config = workdir / "logging.yaml"
        logging_config.write_text(LOGGING)
        self.done_marker = workdir / "simulation-done"
        self.args = [
            sys.executable,
            "-c",
            LAUNCHER,
            script_path(),
            str(self.done_marker),
            "--port",
            str(self.port),
            "--base-uri",
            self.url,
            "--config-file",
            str(config),
            "--log-config",
            str(logging_config),
            "--spec-version",
            spec_version,
        ]
        self.stderr = workdir / "simulator.stderr"
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Simulator:
        with self.stderr.open("wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *self.args, stdout=asyncio.subprocess.DEVNULL, stderr=err, start_new_session=True
            )

        async def up() -> bool:
            assert self.proc is not None
            if self.proc.returncode is not None:
                tail = self.stderr.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"resync-simulator exited: {tail}")
            try:
                async with aiohttp.ClientSession() as s, s.get(self.url + "/") as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(up, timeout=20)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()

    @property
    def done(self) -> bool:
        """Whether the simulation made its last change."""
        return self.done_marker.exists()

    async def changelist(self) -> bytes:
        async with aiohttp.ClientSession() as s, s.get(self.url + "/changelist.xml") as resp:
            return await resp.read() if resp.status == 200 else b""

"""A Source for the tests: ``rshub source``'s parts in this process (so that the watchdog
sees its event loop), or ``rshub source`` itself as a child process; trees compared."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from publisher.client import Publisher
from source.app import create_app
from source.documents import Site
from source.dumps import Dumps
from source.pusher import Pusher
from source.runtime import SourceRuntime, resolved_directory
from tests.commands import Command
from tests.support import TIME_SCALE, free_port

# Run through the interpreter: resync installs a plain script whose ``#!`` line pip copies
# verbatim, which the kernel cannot follow when the venv's path holds a space.
RESYNC = (sys.executable, str(Path(sys.executable).with_name("resync-sync")))


def tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (but ``.rshub`` state), by relative path; a file
    removed while it is listed (a mirror at work) is left out."""
    if not root.is_dir():
        return {}
    files = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root)
        if any(part.startswith(".rshub") for part in name.parts) or path.is_symlink():
            continue
        try:
            if path.is_file():
                files[str(name)] = path.read_bytes()
        except FileNotFoundError:
            continue
    return files


@dataclass
class InProcessSource:
    site: Site
    runtime: SourceRuntime
    port: int

    @property
    def url(self) -> str:
        return self.site.base_url


@asynccontextmanager
async def in_process_source(
    root: Path,
    state: Path,
    *,
    hub: str | None = None,
    topic: str | None = None,
    port: int | None = None,
    resourcelist_entries: int = 50_000,
    changelist_entries: int = 1000,
    dumps: dict[str, Any] | None = None,
) -> AsyncIterator[InProcessSource]:
    """``dumps``: serve dumps, written under ``dumps["directory"]`` (the other keys are
    :class:`source.dumps.Dumps`'s)."""
    port = port or free_port()
    site = Site(
        f"http://127.0.0.1:{port}",
        hub=hub,
        topic=topic,
        resourcelist_entries=resourcelist_entries,
        changelist_entries=changelist_entries,
    )
    runtime = SourceRuntime(resolved_directory(str(root)), site, state, debounce_ms=400)
    runner = web.AppRunner(create_app(runtime), access_log=None)
    await runner.setup()
    publisher = None
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        pusher = None
        if hub is not None and topic is not None:
            publisher = Publisher(hub, topic, up=site.capabilitylist_url)
            await publisher.start()
            pusher = Pusher(runtime.inventory, site, publisher, runtime.save)
        dumper = None
        if dumps is not None:
            options = dict(dumps)
            dumper = Dumps(
                runtime.root,
                site,
                runtime.inventory,
                str(options.pop("directory")),
                publisher=publisher,
                **options,
            )
        await runtime.start(pusher, dumper)
        yield InProcessSource(site, runtime, port)
    finally:
        await runtime.close()
        if publisher is not None:
            await publisher.close(timeout=0)
        await runner.cleanup()


async def resync_sync(work: Path, *args: str) -> tuple[int, str]:
    """``resync-sync ARGS`` in ``work`` (where it keeps its state file)."""
    proc = await asyncio.create_subprocess_exec(
        *RESYNC,
        *args,
        cwd=work,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120 * TIME_SCALE)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


class SourceProcess:
    """``rshub source DIR`` as a child process on a fixed port (restartable on it)."""

    def __init__(self, root: Path, state: Path, *args: str, port: int | None = None) -> None:
        self.root, self.state, self.args = root, state, args
        self.port = port or free_port()
        self.command: Command | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> SourceProcess:
        self.command = await Command(
            "source",
            str(self.root),
            "--port",
            str(self.port),
            "--state",
            str(self.state),
            *self.args,
        ).start()
        deadline = asyncio.get_running_loop().time() + 30 * TIME_SCALE
        while "rshub source: serving" not in self.command.stderr:
            assert self.command.proc is not None
            if self.command.proc.returncode is not None:
                raise AssertionError(f"rshub source exited: {self.command.stderr}")
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"rshub source not serving: {self.command.stderr}")
            await asyncio.sleep(0.05)
        return self

    async def stop(self) -> int:
        """SIGINT, as Ctrl-C; the exit code."""
        assert self.command is not None
        _, code = await self.command.interrupt()
        return code

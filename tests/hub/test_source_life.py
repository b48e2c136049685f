"""The scripted life of a Source, mirrored by polling the hub's documents as docs/polling.md
says: with the reference client (``resync-sync``, a child process) and with ``rshub sync
--via poll --once``.

Real parts: a hub on the session's Redis, a static web server on 127.0.0.1 serving the
Source's files, the clients as child processes writing real mirror directories. The Source
publishes by plain POSTs of change notifications, one change each, with ``lastmod`` from
clocks skewed by +5 s and -5 s. Between two runs it creates and deletes a resource, closes
Change List pages (3 entries a page), updates a file twice with one lastmod (a clock of
whole seconds), and lets retention (6 events) trim changes the client already applied, once exactly
through the newest change the client had read. After every
run the mirror equals the Source byte for byte; at the end ``resync-sync --audit`` says
``IN SYNC``.

A client that stays behind while retention trims changes it never read fails loudly: resync
exits non-zero naming the hub's ``changes-lost`` URL, ``rshub sync`` says it re-baselines,
and the documented recovery brings resync's mirror back.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from hub.store import keys
from tests.commands import Command
from tests.conftest import Hub
from tests.support import TIME_SCALE, free_port, notification

pytestmark = pytest.mark.timeout(240)

# Run through the interpreter: resync installs a plain script whose ``#!`` line pip copies
# verbatim, which the kernel cannot follow when the venv's path holds a space.
RESYNC = (sys.executable, str(Path(sys.executable).with_name("resync-sync")))
TOPIC = "site"
#: What docs/polling.md gives ``--changelist-uri``, under the topic's URL.
CHANGES = "/changes.xml"


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "changelist_page_entries": 3,
        "changelist_page_seconds": 2,
        "retention_max_events": 0,
        "topic_retention_max_events": {TOPIC: 6},
        "retention_hold_max_events": 0,
    }


class Source:
    """A directory served over HTTP, whose changes are published to the hub."""

    def __init__(self, hub: Hub, root: Path, url: str) -> None:
        self.hub = hub
        self.root = root
        self.url = url

    async def _publish(self, name: str, change: str, skew: float, at: datetime | None) -> None:
        stamp = at or datetime.now(UTC) + timedelta(seconds=skew)
        item: dict[str, Any] = {
            "loc": f"{self.url}/{name}",
            "change": change,
            "lastmod": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if change != "deleted":
            data = (self.root / name).read_bytes()
            item.update(length=len(data), hash="md5:" + hashlib.md5(data).hexdigest())
        resp = await self.hub.publish(TOPIC, notification([item]))
        assert resp.status == 202, (name, change, resp.status)

    async def put(
        self, name: str, data: bytes, *, skew: float = 0, at: datetime | None = None
    ) -> None:
        """Write the file, then publish the change (``lastmod``: ``at``, else now + skew)."""
        path = self.root / name
        change = "updated" if path.exists() else "created"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        await self._publish(name, change, skew, at)

    async def delete(self, name: str, *, skew: float = 0) -> None:
        (self.root / name).unlink()
        await self._publish(name, "deleted", skew, None)

    def files(self) -> dict[str, bytes]:
        return tree(self.root)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (but a client's own state), by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".rshub" not in p.relative_to(root).parts
    }


@pytest.fixture
async def source(hub: Hub, tmp_path: Path) -> AsyncIterator[Source]:
    root = tmp_path / "source"
    root.mkdir()
    app = web.Application()
    app.router.add_static("/files", root)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield Source(hub, root, f"http://127.0.0.1:{port}/files")
    await runner.cleanup()


@dataclass
class Run:
    code: int
    output: str


async def resync_sync(work: Path, *args: str) -> Run:
    """``resync-sync ARGS`` in ``work`` (where it keeps its state file)."""
    proc = await asyncio.create_subprocess_exec(
        *RESYNC,
        *args,
        cwd=work,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60 * TIME_SCALE)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(errors="replace"))


class Resync:
    """The reference client, run exactly as docs/polling.md gives its commands."""

    def __init__(self, hub: Hub, source: Source, dest: Path, work: Path) -> None:
        dest.mkdir()
        work.mkdir()
        self.dest, self.work = dest, work
        topic = f"{hub.url}/topics/{TOPIC}"
        self.common = ["--noauth", "--sitemap", f"{topic}/resourcelist.xml"]
        self.changes = f"{topic}{CHANGES}"
        self.mapping = f"{source.url}={dest}"
        self.baselined = False

    async def baseline(self, *extra: str) -> Run:
        return await resync_sync(self.work, "--baseline", *extra, *self.common, self.mapping)

    async def incremental(self, *extra: str) -> Run:
        return await resync_sync(
            self.work,
            "--incremental",
            "--delete",
            *self.common,
            "--changelist-uri",
            self.changes,
            *extra,
            self.mapping,
        )

    async def sync(self) -> Run:
        run = await (self.incremental() if self.baselined else self.baseline())
        self.baselined = True
        assert run.code == 0 and "FatalError" not in run.output, run.output
        return run

    def mirror(self) -> dict[str, bytes]:
        return tree(self.dest)


class RshubSync:
    """``rshub sync --via poll --once`` into its own mirror directory."""

    def __init__(self, hub: Hub, source: Source, dest: Path) -> None:
        self.hub, self.dest = hub, dest
        # the mirror keeps a Source's files under scheme/host_port/path
        host = source.url.removeprefix("http://").split("/", 1)[0].replace(":", "_")
        self.files = dest / "http" / host / "files"

    async def run(self) -> Run:
        args = ["sync", "--dest", str(self.dest), "--hub", self.hub.url, "--topic", TOPIC]
        cmd = await Command(*args, "--via", "poll", "--once").start()
        code = await cmd.wait(60 * TIME_SCALE)
        return Run(code, cmd.stderr)

    async def sync(self) -> Run:
        run = await self.run()
        assert run.code == 0, run.output
        return run

    def mirror(self) -> dict[str, bytes]:
        return tree(self.files) if self.files.exists() else {}


Client = Resync | RshubSync


async def trimmed_through(hub: Hub) -> str | None:
    value = await hub.redis.hget(keys.topic_meta(TOPIC), keys.TRIMMED_THROUGH)
    return None if value is None else keys.text(value)


async def last_id(hub: Hub) -> str:
    return keys.text(await hub.redis.hget(keys.topic_meta(TOPIC), keys.LAST_ID))


async def live(source: Source, client: Client, hub: Hub) -> None:
    async def step(what: str) -> None:
        run = await client.sync()
        assert client.mirror() == source.files(), f"after {what}:\n{run.output[-3000:]}"

    # 1. Three resources, announced by a clock 5 s ahead of the hub's; the baseline.
    await source.put("a.txt", b"alpha\n", skew=5)
    await source.put("b.bin", bytes(range(256)) * 40, skew=5)
    await source.put("sub/c.html", b"<p>c</p>", skew=5)
    await step("the baseline")
    # 2. Changes within those 5 s, on a right clock: they follow the baseline all the same.
    await source.put("a.txt", b"alpha, edited\n")
    await source.put("d.txt", b"delta\n")
    await step("changes on a clock behind the baseline's lastmod")
    # 3. Created and deleted within one interval; deleted, what was there before the
    #    baseline; a clock 5 s behind.
    await source.put("x.txt", b"short-lived", skew=-5)
    await source.delete("x.txt", skew=-5)
    await source.delete("b.bin", skew=-5)
    await step("a create and a delete in one interval")
    assert await trimmed_through(hub) is not None  # retention (6 events) trimmed applied ones
    # 4. Five changes: a Change List page (3 entries) closes between two runs.
    second = datetime.now(UTC).replace(microsecond=0)
    await source.put("sub/c.html", b"<p>c, edited</p>", skew=5)
    await source.put("e.txt", b"echo", skew=5)
    await source.put("e.txt", b"echo, again", at=second)
    await source.put("d.txt", b"delta, edited\n", skew=5)
    await source.put("f.txt", b"foxtrot", skew=5)
    await step("a page closed between two runs")
    # 5. Six changes: retention trims exactly through the newest change the client read.
    newest_read = await last_id(hub)
    await source.put("a.txt", b"alpha, third\n", skew=-5)
    # ... one an update announced with the lastmod of the last one the client applied (a
    # publisher's clock of whole seconds): a new change all the same
    await source.put("e.txt", b"echo, third", at=second)
    await source.put("h.txt", b"hotel", skew=-5)
    await source.put("h.txt", b"hotel, edited", skew=-5)
    await source.put("i.txt", b"india", skew=-5)
    await source.put("sub/c.html", b"<p>c, third</p>", skew=-5)
    assert await trimmed_through(hub) == newest_read
    await step("a trim through the newest change the client had read")
    # 6. More, after a pause longer than a page's window (2 s): time closes the open page.
    await asyncio.sleep(2.5)
    await source.put("g.txt", b"golf")
    await source.put("f.txt", b"foxtrot, edited")
    await source.delete("d.txt")
    await source.delete("e.txt")
    await step("a page closed by time")


async def test_resync_follows_the_life_of_a_source(
    hub: Hub, source: Source, tmp_path: Path
) -> None:
    client = Resync(hub, source, tmp_path / "dest", tmp_path / "work")
    await live(source, client, hub)
    audit = await resync_sync(client.work, "--audit", *client.common, client.mapping)
    assert audit.code == 0 and "IN SYNC" in audit.output, audit.output


async def test_rshub_sync_by_polling_follows_the_life_of_a_source(
    hub: Hub, source: Source, tmp_path: Path
) -> None:
    client = RshubSync(hub, source, tmp_path / "mirror")
    await live(source, client, hub)
    cmd = await Command(
        "sync", "--dest", str(client.dest), "--hub", hub.url, "--topic", TOPIC, "--audit"
    ).start()
    assert await cmd.wait(60 * TIME_SCALE) == 0, cmd.stderr


async def _behind(hub: Hub, source: Source) -> str:
    """Seven changes while a client does not run: retention (6) trims the first of them."""
    before = await trimmed_through(hub)
    for n in range(7):
        await source.put(f"n{n}.txt", b"%d" % n)
    lost = await trimmed_through(hub)
    assert lost is not None and lost != before
    return lost


async def test_resync_behind_a_retention_trim_fails_loudly_then_recovers(
    hub: Hub, source: Source, tmp_path: Path
) -> None:
    client = Resync(hub, source, tmp_path / "dest", tmp_path / "work")
    await source.put("a.txt", b"a")
    await client.sync()
    await _behind(hub, source)

    run = await client.incremental()
    assert run.code != 0, run.output
    lost_url = f"{hub.url}/topics/{TOPIC}/changes-lost"
    assert lost_url in run.output, run.output
    assert client.mirror() != source.files()  # nothing applied: the client stays where it was
    again = await client.incremental()  # and it keeps failing, never silently
    assert again.code != 0 and lost_url in again.output

    # What the marker's URL answers: 410, and the way back.
    async with hub.session.get(lost_url) as resp:
        assert resp.status == 410
        body = await resp.json()
    assert "baseline" in body["error"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", body["from"]), body

    # The recovery docs/polling.md gives: a new baseline, then one incremental with --from.
    run = await client.baseline("--delete")
    assert run.code == 0 and "FatalError" not in run.output, run.output
    assert client.mirror() == source.files()
    run = await client.incremental("--from", body["from"])
    assert run.code == 0 and "FatalError" not in run.output, run.output
    await source.put("after.txt", b"after the recovery")
    await client.sync()
    assert client.mirror() == source.files()


async def test_rshub_sync_behind_a_retention_trim_says_so_and_rebaselines(
    hub: Hub, source: Source, tmp_path: Path
) -> None:
    client = RshubSync(hub, source, tmp_path / "mirror")
    await source.put("a.txt", b"a")
    await client.sync()
    await source.delete("a.txt")  # a deletion the client misses: trimmed before it runs
    lost = await _behind(hub, source)

    run = await client.sync()
    assert "re-baselin" in run.output and lost in run.output, run.output
    assert client.mirror() == source.files()
    await source.put("after.txt", b"after")  # and it follows on from there
    run = await client.sync()
    assert "re-baselin" not in run.output, run.output
    assert client.mirror() == source.files()

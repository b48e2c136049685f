"""``rshub source --dumps``: a Resource Dump of bounded packages and a Change Dump package
per closed Change List period, read as a Destination reads them (every document valid,
every package's length and hash as listed, its manifest served beside it, unpacked and
checked by ``resourcesync.package_reader``): unpacking the Resource Dump, then applying
the Change Dump packages in order, gives the directory. Each sealed package is announced
to the hub once by a ``changedump-notification``, across restarts.

The hub here is a small recording server on 127.0.0.1: the hub's own ingest of
``changedump-notification`` is not this package's (tests/hub cover it); what matters here is
the document the Source sends, and that it sends each one once."""

from __future__ import annotations

import hashlib
import io
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from resourcesync import (
    CapabilityList,
    Change,
    ChangeDump,
    ChangeDumpNotification,
    ResourceDump,
    parse,
)
from resourcesync.package_reader import UnpackedPackage, unpack_package
from tests.commands import Command
from tests.conftest import Hub
from tests.publisher.helpers import stored_events
from tests.source.support import in_process_source, tree
from tests.support import free_port, wait_for

pytestmark = pytest.mark.timeout(120)


class RecordingHub:
    """Answers every publish 202 with one id per entry, as the hub does, and keeps it."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []
        self.url = ""

    async def publish(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.bodies.append((request.headers["Idempotency-Key"], body))
        count = body.count(b"<url>")
        ids = [f"{len(self.bodies)}-{i}" for i in range(count)]
        return web.Response(
            status=202,
            body=orjson.dumps({"topic": request.match_info["topic"], "ids": ids}),
            content_type="application/json",
        )

    def notifications(self) -> list[tuple[str, ChangeDumpNotification]]:
        out = []
        for key, body in self.bodies:
            if b"changedump-notification" in body:
                doc = parse(body)
                assert isinstance(doc, ChangeDumpNotification)
                out.append((key, doc))
        return out


@pytest.fixture
async def recording_hub() -> AsyncIterator[RecordingHub]:
    hub = RecordingHub()
    app = web.Application()
    app.router.add_post("/topics/{topic}", hub.publish)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    hub.url = f"http://127.0.0.1:{port}"
    yield hub
    await runner.cleanup()


async def fetch(session: aiohttp.ClientSession, url: str) -> bytes:
    async with session.get(url) as resp:
        assert resp.status == 200, (url, resp.status)
        return await resp.read()


def digest(data: bytes) -> str:
    return f"md5:{hashlib.md5(data).hexdigest()} sha-256:{hashlib.sha256(data).hexdigest()}"


async def unpacked(session: aiohttp.ClientSession, entry_loc: str, target: Path) -> UnpackedPackage:
    return unpack_package(io.BytesIO(await fetch(session, entry_loc)), target)


async def test_dumps_rebuild_the_directory_and_are_announced_once(
    tmp_path: Path, recording_hub: RecordingHub, session: aiohttp.ClientSession
) -> None:
    root, state, dumps = tmp_path / "dir", tmp_path / "state.json", tmp_path / "dumps"
    root.mkdir()
    for i in range(40):
        (root / f"f{i:02d}.txt").write_bytes(f"file {i}\n".encode() * 60)  # ~500 bytes
    options = {"directory": dumps, "max_bytes": 4000, "min_age": 0.0}
    port = free_port()
    source_args = {
        "hub": recording_hub.url,
        "topic": "t",
        "port": port,
        "changelist_entries": 10,
        "dumps": options,
    }
    async with in_process_source(root, state, **source_args) as source:  # type: ignore[arg-type]
        base = source.url
        capabilities = parse(await fetch(session, f"{base}/capabilitylist.xml"))
        assert isinstance(capabilities, CapabilityList)
        offered = {str(e.md.capability): e.loc for e in capabilities.entries if e.md}
        assert offered["resourcedump"] == f"{base}/resourcedump.xml"
        assert offered["changedump"] == f"{base}/changedump.xml"

        # The Resource Dump: several packages, each as listed, unpacked to the directory.
        dump = parse(await fetch(session, offered["resourcedump"]))
        assert isinstance(dump, ResourceDump) and len(dump.entries) >= 5
        restored = tmp_path / "restored"
        restored.mkdir()
        for n, entry in enumerate(dump.entries):
            assert entry.md is not None and entry.md.type == "application/zip"
            data = await fetch(session, entry.loc)
            assert entry.md.length == len(data) and entry.md.hash == digest(data)
            [contents] = [ln.href for ln in entry.links if ln.rel == "contents"]
            manifest = await fetch(session, contents)
            package = unpack_package(io.BytesIO(data), tmp_path / f"rd{n}")
            assert parse(manifest) == package.manifest
            for bit in package.bitstreams:
                assert bit.file is not None
                shutil.copy(bit.file, restored / bit.file.name)
        assert tree(restored) == tree(root)

        # 40 creations: 4 closed periods, 4 sealed packages, each announced.
        await wait_for(lambda: len(recording_hub.notifications()) == 4, 20)
        for i in range(5):
            (root / f"f{i:02d}.txt").write_text(f"updated {i}\n")
            (root / f"f{39 - i:02d}.txt").unlink()
        await wait_for(lambda: len(recording_hub.notifications()) == 5, 20)

        changes = parse(await fetch(session, offered["changedump"]))
        assert isinstance(changes, ChangeDump) and len(changes.entries) == 5
        mirror = tmp_path / "mirror"
        mirror.mkdir()
        last_until = None
        for n, entry in enumerate(changes.entries):
            assert entry.md is not None and entry.md.from_ is not None
            if last_until is not None:
                assert entry.md.from_ == last_until
            last_until = entry.md.until
            package = await unpacked(session, entry.loc, tmp_path / f"cd{n}")
            for bit in package.bitstreams:
                name = bit.entry.loc.rsplit("/", 1)[1]
                if bit.entry.change is Change.DELETED:
                    (mirror / name).unlink()
                else:
                    assert bit.file is not None
                    shutil.copy(bit.file, mirror / name)
        assert tree(mirror) == tree(root)

        sent = recording_hub.notifications()
        for (key, note), entry in zip(sent, changes.entries, strict=True):
            [announced] = note.entries
            assert announced.loc == entry.loc and announced.md == entry.md
            assert [ln.href for ln in announced.links] == [ln.href for ln in entry.links]
            assert key.endswith(f"-changedump-{sent.index((key, note))}")

    # Restarted: the sealed packages are read back, none announced again.
    async with in_process_source(root, state, **source_args) as source:  # type: ignore[arg-type]
        again = parse(await fetch(session, f"{source.url}/changedump.xml"))
        assert again == changes
        (root / "late.txt").write_text("late\n")
        await wait_for(lambda: source.runtime.inventory.pushed == 51, 20)
    assert len(recording_hub.notifications()) == 5


async def test_rshub_sync_baselines_from_the_resource_dump_the_source_declared(
    hub: Hub, redis_url: str, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """The Source declares its dumps in its ``changedump-notification``s; the hub lists them
    in the topic's Capability List; ``rshub sync --hub --topic`` then baselines from the
    Source's Resource Dump, not one GET per file."""
    topic = f"dumps-{uuid.uuid4().hex[:8]}"
    root, state, dest = tmp_path / "dir", tmp_path / "state.json", tmp_path / "mirror"
    root.mkdir()
    for i in range(60):
        (root / f"f{i:02d}.txt").write_bytes(f"file {i}\n".encode() * 40)
    options = {"directory": tmp_path / "dumps", "max_bytes": 8000, "min_age": 0.0}
    async with in_process_source(
        root, state, hub=hub.url, topic=topic, changelist_entries=10, dumps=options
    ) as source:
        caplist = f"{hub.url}/topics/{topic}/capabilitylist.xml"

        async def declared() -> bool:
            async with session.get(caplist) as resp:
                if resp.status == 404:  # nothing published to the topic yet
                    return False
                assert resp.status == 200
                doc = parse(await resp.read())
            offered = {str(e.md.capability): e.loc for e in doc.entries if e.md}
            return offered.get("resourcedump") == f"{source.url}/resourcedump.xml"

        await wait_for(declared, timeout=30)

        async def packages() -> list[dict[str, object]]:
            stored = await stored_events(redis_url, topic)
            return [e for e in stored if e["change"] == "changedump"]

        async def announced() -> bool:
            return len(await packages()) == 6

        await wait_for(announced, timeout=30)
        assert len(await stored_events(redis_url, topic)) == 66
        assert [p["loc"] for p in await packages()] == [
            f"{source.url}/changedump/{n:08d}.zip" for n in range(6)
        ]
        cmd = await Command("sync", "--hub", hub.url, "--topic", topic, "--dest", str(dest),
                            "--once").start()  # fmt: skip
        assert await cmd.wait(60) == 0, cmd.stderr
        assert "Resource Dump failed" not in cmd.stderr
        mirrored = dest / "http" / f"127.0.0.1_{source.port}" / "files"
        assert tree(mirrored) == tree(root)
        # The baseline took the Resource Dump's packages (the catch-up that follows fetches
        # the changes of the last moments again: rshub sync's overlap).
        dump = parse(await fetch(session, f"{source.url}/resourcedump.xml"))
        assert len(dump.entries) >= 2  # 60 files of 320 bytes, 8000 bytes a package
        assert source.runtime.packages_served >= len(dump.entries)
        assert "baseline: fetched 60," in cmd.stderr

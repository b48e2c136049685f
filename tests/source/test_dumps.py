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

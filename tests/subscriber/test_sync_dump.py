"""``rshub sync`` baselines from a Resource Dump when the Source offers one: the same
mirror as one GET per resource, in a few package downloads; a package that is damaged or
hostile is refused, writes nothing outside the mirror, and the baseline falls back to GETs.

The Source is :class:`tests.subscriber.source.TestSource` on 127.0.0.1, with a Resource
Dump written by :class:`resourcesync.package_writer.PackageWriter`.
"""

from __future__ import annotations

import asyncio
import io
import random
import zipfile
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from resourcesync import PackageError, serialize
from resourcesync.digests import Digests
from resourcesync.package_writer import (
    PackageEntry,
    PackageWriter,
    WrittenPackage,
    resource_dump,
)
from rshub.cli import main
from subscriber.dumps import baseline_from_dump
from subscriber.exceptions import IntegrityError
from subscriber.mirror import Mirror
from subscriber.poller import Poller
from tests.conftest import Hub
from tests.hub.test_changedump_notifications import PACKAGE, dump_notification
from tests.support import notification
from tests.watchdog import Watchdog

from .helpers import expected_files, mirror_files
from .source import NS, TestSource


class DumpSource(TestSource):
    """A :class:`TestSource` whose Capability List also offers a Resource Dump (``dump``),
    its packages written afresh for each read of ``/resourcedump.xml``."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__()
        self.dump = True
        #: Package bytes by index; ``tamper(index, bytes) -> bytes`` changes what is served
        #: (and, with ``announce``, what the dump announces: a package hostile yet whole).
        self.packages: dict[int, bytes] = {}
        self.tamper: dict[int, bytes] = {}
        self.announce_tampered = False

    def more_routes(self, app: web.Application) -> None:
        app.router.add_get("/resourcedump.xml", self._resource_dump)
        app.router.add_get("/dump/{n:[0-9]+}.zip", self._package)

    async def _capabilities(self, request: web.Request) -> web.Response:
        dump = (
            f'<url><loc>{self.url}/resourcedump.xml</loc><rs:md capability="resourcedump"/></url>'
            if self.dump
            else ""
        )
        return self._xml(
            request,
            f'<urlset {NS}><rs:md capability="capabilitylist"/>'
            f"<url><loc>{self.url}/resourcelist.xml</loc>"
            '<rs:md capability="resourcelist"/></url>'
            f"<url><loc>{self.url}/changelist.xml</loc>"
            f'<rs:md capability="changelist"/></url>{dump}</urlset>',
        )

    async def _resource_dump(self, request: web.Request) -> web.Response:
        store: dict[int, bytes] = {}

        class Kept(io.BytesIO):
            def __init__(self, n: int) -> None:
                super().__init__()
                self.n = n

            def close(self) -> None:
                store[self.n] = self.getvalue()
                super().close()

        with PackageWriter(Kept, at=datetime.now(UTC), max_bytes=4000) as writer:
            for name, data in sorted(self.files.items()):
                writer.add(
                    PackageEntry(
                        loc=self.loc(name),
                        path="/" + name,
                        length=len(data),
                        open=partial(io.BytesIO, data),
                        lastmod=self.lastmods[name],
                    )
                )
        self.packages = {n: self.tamper.get(n, data) for n, data in store.items()}
        packages = writer.packages
        if self.announce_tampered:
            packages = [_announced(p, self.packages[p.index]) for p in packages]
        doc = resource_dump(packages, [f"{self.url}/dump/{p.index}.zip" for p in packages])
        body = serialize(doc).decode().split("\n", 1)[1]
        return self._xml(request, body)

    async def _package(self, request: web.Request) -> web.Response:
        data = self.packages.get(int(request.match_info["n"]))
        if data is None:
            raise web.HTTPNotFound()
        return web.Response(body=data, content_type="application/zip")


def _announced(package: WrittenPackage, data: bytes) -> WrittenPackage:
    """``package`` as the dump announces it, for bytes ``data``."""
    digests = Digests()
    digests.update(data)
    return replace(package, length=len(data), hash=digests.value())


async def written(source: DumpSource) -> None:
    """Have ``source`` write its packages (a GET of its Resource Dump), to tamper with."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{source.url}/resourcedump.xml") as resp:
            assert resp.status == 200


FILES = {
    "a.txt": b"alpha\n",
    "empty": b"",
    "dir/b.bin": random.Random(2).randbytes(3000),
    "dir/deeper/c.txt": b"charlie " * 400,
    **{f"many/{n:02d}.txt": b"file %d\n" % n * (n + 1) for n in range(24)},
}


@pytest.fixture
async def source() -> AsyncIterator[DumpSource]:
    src = DumpSource()
    await src.start()
    for name, data in FILES.items():
        src.put(name, data)
    yield src
    await src.stop()


def sync(source: TestSource, dest: Path, *flags: str) -> list[str]:
    where = f"{source.url}/.well-known/resourcesync"
    return ["sync", "--source", where, "--dest", str(dest), "--no-progress", *flags]


def gets(source: TestSource, prefix: str) -> int:
    return sum(1 for path, _ in source.requests if path.startswith(prefix))


async def test_a_dump_baseline_gives_the_mirror_the_gets_give(
    source: DumpSource, tmp_path: Path
) -> None:
    by_dump, by_get = tmp_path / "dump", tmp_path / "get"
    assert await asyncio.to_thread(main, sync(source, by_dump, "--once")) == 0
    assert gets(source, "/files/") == 0, "every file came in a package"
    assert gets(source, "/dump/") == len(source.packages) > 2
    source.dump = False
    assert await asyncio.to_thread(main, sync(source, by_get, "--once")) == 0
    assert gets(source, "/files/") == len(FILES)
    assert mirror_files(by_dump) == mirror_files(by_get) == expected_files(source.url, FILES)


async def test_a_dump_baseline_prunes_and_keeps_as_the_gets_do(
    source: DumpSource, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    assert await asyncio.to_thread(main, sync(source, dest, "--once")) == 0
    stray = dest / next(iter(expected_files(source.url, {"stray": b""})))
    stray.write_bytes(b"not at the Source")
    for path in (dest / "http").rglob("a.txt"):
        path.write_bytes(b"damaged")
    (dest / ".rshub" / "state.json").unlink()  # a fresh baseline over the old mirror
    assert await asyncio.to_thread(main, sync(source, dest, "--once")) == 0
    assert mirror_files(dest) == expected_files(source.url, FILES)


async def test_a_dump_baseline_takes_only_what_prefix_names(
    source: DumpSource, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    prefix = f"{source.url}/files/many/"
    assert await asyncio.to_thread(main, sync(source, dest, "--once", "--prefix", prefix)) == 0
    wanted = {name: data for name, data in FILES.items() if name.startswith("many/")}
    assert mirror_files(dest) == expected_files(source.url, wanted)
    assert gets(source, "/files/") == 0


def _hostile_zip(outside: str) -> bytes:
    """A package whose one entry would land at ``outside`` (its manifest truthful)."""
    from resourcesync.models import Entry, Metadata, ResourceDumpManifest

    body = b"pwned"
    digests = Digests()
    digests.update(body)
    manifest = ResourceDumpManifest(
        md=Metadata(at=datetime.now(UTC)),
        entries=(
            Entry(
                loc="http://127.0.0.1/files/x",
                md=Metadata(path="/x", length=len(body), hash=digests.value()),
            ),
        ),
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(outside, body)
        archive.writestr("manifest.xml", serialize(manifest))
    return out.getvalue()


@pytest.mark.parametrize(
    ("tampering", "announced", "error"),
    [
        ("flipped", False, IntegrityError),
        ("cut", False, IntegrityError),
        ("escape", True, PackageError),
        ("cut", True, PackageError),
    ],
    ids=["flipped-byte", "cut-off", "escaping-entry", "cut-off-announced"],
)
async def test_a_bad_package_is_refused_without_writing_outside_the_mirror(
    source: DumpSource, tmp_path: Path, tampering: str, announced: bool, error: type[Exception]
) -> None:
    await written(source)
    good = source.packages[1]
    source.tamper[1] = {
        "flipped": good[:100] + bytes([good[100] ^ 1]) + good[101:],
        "cut": good[: len(good) // 2],
        "escape": _hostile_zip("../../escaped"),
    }[tampering]
    source.announce_tampered = announced
    dest = tmp_path / "mirror" / "m"
    async with Watchdog() as dog, aiohttp.ClientSession() as session:
        mirror = Mirror(dest, session)
        poller = Poller(session, f"{source.url}/.well-known/resourcesync")
        with pytest.raises(error):
            await baseline_from_dump(mirror, poller, f"{source.url}/resourcedump.xml")
    await dog.sockets_back()
    assert "escaped" not in _names(tmp_path)
    assert _names(dest / ".rshub") <= {".rshub"}, "no package or staging directory is left"


def _names(root: Path) -> set[str]:
    """Every name under ``root`` (``root``'s own too)."""
    return {root.name, *(p.name for p in root.rglob("*"))}


async def test_sync_falls_back_to_gets_when_a_package_is_hostile(
    source: DumpSource, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await written(source)
    source.tamper[0] = _hostile_zip("/etc/escaped")
    source.announce_tampered = True
    dest = tmp_path / "m"
    code = await asyncio.to_thread(main, sync(source, dest, "--once"))
    assert code == 0
    assert mirror_files(dest) == expected_files(source.url, FILES)
    assert gets(source, "/files/") > 0, "the fallback fetched what the dump did not place"
    said = capsys.readouterr().err
    assert "the Resource Dump failed" in said and "entry.name-unsafe" in said, said


async def test_sync_through_the_hub_baselines_from_the_dump_the_source_declared(
    hub: Hub, source: DumpSource, tmp_path: Path
) -> None:
    """The topic's Capability List on the hub links the Resource Dump its Source declared
    in a changedump-notification: ``rshub sync --hub --topic`` baselines from it."""
    assert (await hub.publish("t", notification(source.log))).status == 202
    declared = {"resourcedump": f"{source.url}/resourcedump.xml"}
    resp = await hub.publish("t", dump_notification(PACKAGE, declared=declared))
    assert resp.status == 202, await resp.text()
    dest = tmp_path / "m"
    argv = ["sync", "--hub", hub.url, "--topic", "t", "--dest", str(dest), "--once"]
    assert await asyncio.to_thread(main, [*argv, "--no-progress"]) == 0
    paths = [path for path, _ in source.requests]
    assert paths.count("/resourcedump.xml") == 1
    last_package = max(i for i, path in enumerate(paths) if path.startswith("/dump/"))
    # The baseline took every file from the packages; the catch-up that follows it reads
    # the hub's changes.xml and fetches by GET what it judges new.
    assert not any(path.startswith("/files/") for path in paths[:last_package])
    assert gets(source, "/dump/") == len(source.packages) > 2
    assert mirror_files(dest) == expected_files(source.url, FILES)


async def test_seeded_fuzz_of_served_packages(source: DumpSource, tmp_path: Path) -> None:
    """Packages mutated on the wire (the dump announcing the mutated bytes, so that only the
    reader stands between them and the mirror): each baseline either refuses with a typed
    error or leaves exactly the Source's files, never anything outside the mirror."""
    rng = random.Random(1202)
    await written(source)
    originals = dict(source.packages)
    source.announce_tampered = True
    refused = 0
    async with Watchdog() as dog, aiohttp.ClientSession() as session:
        for n in range(30):
            index = rng.randrange(len(originals))
            data = bytearray(originals[index])
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            source.tamper = {index: bytes(data)}
            dest = tmp_path / f"m{n}" / "mirror"
            mirror = Mirror(dest, session)
            poller = Poller(session, f"{source.url}/.well-known/resourcesync")
            try:
                await baseline_from_dump(mirror, poller, f"{source.url}/resourcedump.xml")
            except (PackageError, IntegrityError):
                refused += 1
            else:
                assert mirror_files(dest) == expected_files(source.url, FILES)
            assert _names(dest.parent) <= {f"m{n}", "mirror", "http", ".rshub", *_names(dest)}
    await dog.sockets_back()
    assert refused > 5

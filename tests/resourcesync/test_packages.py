"""Resource Dump and Change Dump packages: written, read back, and their documents."""

from __future__ import annotations

import io
import random
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from resourcesync import (
    Change,
    ChangeDump,
    ChangeDumpManifest,
    PackageWriteError,
    ResourceDump,
    ResourceDumpManifest,
    parse,
    serialize,
    validate,
)
from resourcesync.digests import Digests
from resourcesync.package_reader import deletions, unpack_package
from resourcesync.package_writer import (
    MANIFEST_NAME,
    PackageEntry,
    PackageWriter,
    WrittenPackage,
    change_dump,
    resource_dump,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
UP = "http://source.invalid/capabilitylist.xml"


class Kept(io.BytesIO):
    """A package stream whose bytes outlive the writer's ``close``."""

    def __init__(self, store: dict[int, bytes], index: int) -> None:
        super().__init__()
        self.store, self.index = store, index

    def close(self) -> None:
        self.store[self.index] = self.getvalue()
        super().close()


def bodies(count: int = 12) -> dict[str, bytes]:
    return {f"/res/{n:02d}.txt": b"resource %d\n" % n * (n * 300 + 1) for n in range(count)}


def entry(path: str, body: bytes, **fields: object) -> PackageEntry:
    return PackageEntry(
        loc=f"http://source.invalid{path}",
        path=path,
        length=len(body),
        open=lambda: io.BytesIO(body),
        type="text/plain",
        **fields,  # type: ignore[arg-type]
    )


def write_dump(
    files: dict[str, bytes], **options: object
) -> tuple[list[WrittenPackage], dict[int, bytes]]:
    store: dict[int, bytes] = {}
    with PackageWriter(lambda n: Kept(store, n), at=T0, up=UP, **options) as writer:  # type: ignore[arg-type]
        for path, body in files.items():
            writer.add(entry(path, body))
    return writer.packages, store


def test_round_trip_gives_back_every_byte_in_bounded_packages(tmp_path: Path) -> None:
    files = bodies()
    packages, store = write_dump(files, max_bytes=20_000)
    assert len(packages) > 2, "the bound splits the dump"
    seen: dict[str, bytes] = {}
    for package in packages:
        data = store[package.index]
        assert package.length == len(data)
        digests = Digests()
        digests.update(data)
        assert package.hash == digests.value()
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
        assert MANIFEST_NAME in names
        bitstream_bytes = sum(len(files["/" + n]) for n in names if n != MANIFEST_NAME)
        assert bitstream_bytes <= 20_000 or len(names) == 2  # one oversized alone
        unpacked = unpack_package(io.BytesIO(data), tmp_path / f"p{package.index}")
        assert unpacked.manifest == package.manifest
        assert (unpacked.directory / MANIFEST_NAME).read_bytes() == serialize(package.manifest)
        for bitstream in unpacked.bitstreams:
            assert bitstream.file is not None and bitstream.entry.md is not None
            seen[bitstream.entry.md.path or ""] = bitstream.file.read_bytes()
    assert seen == files


def test_manifest_says_what_the_standard_asks() -> None:
    files = bodies(3)
    packages, _ = write_dump(files)
    (package,) = packages
    manifest = package.manifest
    assert isinstance(manifest, ResourceDumpManifest)
    validate(manifest)
    assert manifest.up == UP
    assert manifest.md.at is not None and manifest.md.completed is not None
    for item in manifest.entries:
        md = item.md
        assert md is not None and md.path is not None and md.hash is not None
        body = files[md.path]
        digests = Digests()
        digests.update(body)
        assert md.hash == digests.value() and md.hash.startswith("md5:")
        assert "sha-256:" in md.hash and md.length == len(body) and md.type == "text/plain"
    assert type(parse(serialize(manifest))) is ResourceDumpManifest


def test_resource_dump_document_round_trips() -> None:
    packages, _ = write_dump(bodies(), max_bytes=20_000)
    locs = [f"http://source.invalid/dump/part{p.index}.zip" for p in packages]
    manifests = [f"http://source.invalid/dump/part{p.index}.xml" for p in packages]
    dump = resource_dump(packages, locs, up=UP, manifest_locs=manifests)
    validate(dump)
    again = parse(serialize(dump))
    assert isinstance(again, ResourceDump) and again == dump
    first = again.entries[0]
    assert first.md is not None and first.md.type == "application/zip"
    assert first.md.length == packages[0].length and first.md.hash == packages[0].hash
    assert [(ln.rel, ln.href) for ln in first.links] == [("contents", manifests[0])]
    with pytest.raises(PackageWriteError, match="one package URI"):
        resource_dump(packages, locs[:1])


def test_change_dump_packages_carry_changes_and_deletions(tmp_path: Path) -> None:
    store: dict[int, bytes] = {}
    body = b"new text"
    with PackageWriter(lambda n: Kept(store, n), from_=T0, up=UP, max_entries=2) as writer:
        for n in range(3):
            writer.add(entry(f"/c{n}", body, change=Change.UPDATED, lastmod=T0 + timedelta(n)))
        writer.add(
            PackageEntry(
                loc="http://source.invalid/gone",
                change=Change.DELETED,
                lastmod=T0 + timedelta(5),
            )
        )
    packages = writer.packages
    assert len(packages) == 2
    assert packages[0].from_ == T0 and packages[1].from_ == packages[0].until
    for package in packages:
        assert isinstance(package.manifest, ChangeDumpManifest)
        validate(package.manifest)
    last = unpack_package(io.BytesIO(store[1]), tmp_path / "last")
    assert [e.loc for e in deletions(last)] == ["http://source.invalid/gone"]
    changed = [b for b in last.bitstreams if b.file is not None]
    assert [b.file.read_bytes() for b in changed if b.file] == [body]
    dump = change_dump(
        packages, ["http://source.invalid/a.zip", "http://source.invalid/b.zip"], from_=T0
    )
    validate(dump)
    assert isinstance(parse(serialize(dump)), ChangeDump)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("res", "does not start"),
        ("/a/../b", "'..'"),
        ("/a\\b", "backslash"),
        ("/", "does not name a file"),
        ("/a//b", "does not name a file"),
        ("/manifest.xml", "manifest"),
        ("/c:/x", "drive letter"),
        ("/a\x01b", "control"),
    ],
)
def test_writer_refuses_paths_a_reader_would_refuse(path: str, problem: str) -> None:
    with pytest.raises(PackageWriteError, match=problem):
        write_dump({path: b"x"})


def test_writer_refuses_a_source_that_changed_while_packaged() -> None:
    store: dict[int, bytes] = {}
    with pytest.raises(PackageWriteError, match="changed while"):
        with PackageWriter(lambda n: Kept(store, n), at=T0) as writer:
            writer.add(
                PackageEntry(
                    loc="http://source.invalid/a",
                    path="/a",
                    length=3,
                    open=lambda: io.BytesIO(b"longer than three"),
                )
            )
    assert writer.packages == []


def test_writer_refuses_a_duplicate_path_and_out_of_order_changes() -> None:
    with pytest.raises(PackageWriteError, match="is in this package"):
        _duplicate()
    store: dict[int, bytes] = {}
    with pytest.raises(PackageWriteError, match="time order"):
        with PackageWriter(lambda n: Kept(store, n), from_=T0) as writer:
            writer.add(entry("/a", b"1", change=Change.CREATED, lastmod=T0 + timedelta(1)))
            writer.add(entry("/b", b"1", change=Change.CREATED, lastmod=T0))


def _duplicate() -> None:
    store: dict[int, bytes] = {}
    with PackageWriter(lambda n: Kept(store, n), at=T0) as writer:
        writer.add(entry("/a", b"1"))
        writer.add(entry("/a", b"2"))


def test_writer_streams_without_holding_a_bitstream(tmp_path: Path) -> None:
    """A 32 MiB bitstream is packaged and unpacked with little Python memory."""
    import tracemalloc

    big = tmp_path / "big"
    noise = random.Random(7)  # incompressible, so that it is no ZIP bomb either
    with open(big, "wb") as out:
        for _ in range(512):
            out.write(noise.randbytes(65536))
    size = big.stat().st_size
    package = tmp_path / "dump.zip"
    tracemalloc.start()
    try:
        with PackageWriter(lambda n: open(package, "wb"), at=T0) as writer:
            writer.add(
                PackageEntry(
                    loc="http://source.invalid/big",
                    path="/big",
                    length=size,
                    open=lambda: open(big, "rb"),
                )
            )
        with open(package, "rb") as stream:
            unpacked = unpack_package(stream, tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"peak {peak}"
    assert (unpacked.directory / "big").stat().st_size == size

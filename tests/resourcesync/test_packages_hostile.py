"""Hostile packages: each is refused with its typed error, writes nothing, costs little.

Named cases for each way a package can attack a Destination (escaping names, symlinks,
bombs, lying manifests, entry floods, truncation), then a seeded fuzz of package bytes.
"""

from __future__ import annotations

import io
import random
import stat
import struct
import tracemalloc
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from resourcesync import (
    DamagedPackageError,
    ManifestMismatchError,
    PackageError,
    UnsafePackageError,
    serialize,
)
from resourcesync.digests import Digests
from resourcesync.models import Entry, Metadata, ResourceDumpManifest
from resourcesync.package_reader import PackageLimits, unpack_package
from resourcesync.package_writer import PackageEntry, PackageWriter

T0 = datetime(2026, 1, 2, tzinfo=UTC)
MB = 1024 * 1024


def manifest_for(files: dict[str, bytes], **overrides: dict[str, object]) -> bytes:
    """A manifest listing ``files`` truthfully, except where ``overrides`` say."""
    entries = []
    for path, body in files.items():
        digests = Digests()
        digests.update(body)
        md: dict[str, object] = {"path": path, "length": len(body), "hash": digests.value()}
        md.update(overrides.get(path, {}))
        entries.append(Entry(loc=f"http://source.invalid{path}", md=Metadata.model_validate(md)))
    return serialize(ResourceDumpManifest(md=Metadata(at=T0), entries=tuple(entries)))


def build(
    members: list[tuple[zipfile.ZipInfo | str, bytes]],
    manifest: bytes | None = None,
    compression: int = zipfile.ZIP_DEFLATED,
) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as archive:
        for name, body in members:
            archive.writestr(name, body)
        if manifest is not None:
            archive.writestr("manifest.xml", manifest)
    return out.getvalue()


def honest(files: dict[str, bytes]) -> bytes:
    return build([(p[1:], b) for p, b in files.items()], manifest_for(files))


GOOD = {"/a.txt": b"alpha\n" * 50, "/dir/b.txt": b"beta\n" * 70}


def refuse(
    tmp_path: Path, data: bytes, error: type[PackageError], rule: str, **limits: int
) -> PackageError:
    target = tmp_path / "target"
    with pytest.raises(error) as info:
        unpack_package(io.BytesIO(data), target, limits=PackageLimits(**limits))
    assert info.value.rule == rule, info.value
    assert list(tmp_path.iterdir()) == [], "a refused package leaves nothing behind"
    return info.value


def test_an_honest_package_is_unpacked(tmp_path: Path) -> None:
    unpacked = unpack_package(io.BytesIO(honest(GOOD)), tmp_path / "target")
    assert (unpacked.directory / "dir/b.txt").read_bytes() == GOOD["/dir/b.txt"]


@pytest.mark.parametrize(
    "name",
    ["../x", "/etc/x", "a/../../x", "a\\..\\x", "C:/x", "c:x", "a/./b", "a//b", "a\x01b",
     "x" * 300],
    ids=["dotdot", "absolute", "deep-dotdot", "backslash", "drive", "drive-relative", "dot",
         "empty-segment", "control", "long-segment"],
)  # fmt: skip
def test_escaping_names_are_refused(tmp_path: Path, name: str) -> None:
    info = zipfile.ZipInfo(name)
    info.filename = name  # as written: ZipInfo would turn a backslash into "/" on Windows
    data = build([(info, b"pwned")], manifest_for(GOOD))
    refuse(tmp_path, data, UnsafePackageError, "entry.name-unsafe")
    assert not (tmp_path.parent / "x").exists()


def test_a_symlink_entry_is_refused(tmp_path: Path) -> None:
    info = zipfile.ZipInfo("a.txt")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    info.create_system = 3
    data = build([(info, b"/etc/passwd")], manifest_for({"/a.txt": b"/etc/passwd"}))
    refuse(tmp_path, data, UnsafePackageError, "entry.symlink")


def test_a_device_entry_is_refused(tmp_path: Path) -> None:
    info = zipfile.ZipInfo("a.txt")
    info.external_attr = (stat.S_IFCHR | 0o666) << 16
    data = build([(info, b"")], manifest_for({"/a.txt": b""}))
    refuse(tmp_path, data, UnsafePackageError, "entry.kind")


def test_a_zip_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    zeros = bytes(16 * MB)
    data = build([("a.txt", zeros)], manifest_for({"/a.txt": zeros}))
    assert len(data) < MB
    tracemalloc.start()
    try:
        refuse(tmp_path, data, UnsafePackageError, "zip.bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MB


def test_total_size_is_bounded(tmp_path: Path) -> None:
    files = {f"/f{n}": random.Random(n).randbytes(4096) for n in range(8)}
    refuse(tmp_path, honest(files), UnsafePackageError, "zip.bomb", max_total_bytes=20_000)


def test_an_entry_that_expands_past_its_declared_size_is_damaged(tmp_path: Path) -> None:
    body = b"x" * 100_000
    data = bytearray(build([("a.txt", body)], manifest_for({"/a.txt": body[:10]})))
    # Declare 10 bytes in the central directory: zipfile stops there and the CRC fails.
    central = data.rindex(b"PK\x01\x02")
    struct.pack_into("<L", data, central + 24, 10)
    local = data.index(b"PK\x03\x04")
    struct.pack_into("<L", data, local + 22, 10)
    refuse(tmp_path, bytes(data), DamagedPackageError, "zip.damaged")


@pytest.mark.parametrize(
    ("override", "rule"),
    [
        ({"hash": "md5:" + "0" * 32}, "manifest.hash"),
        ({"hash": "sha-256:" + "0" * 64}, "manifest.hash"),
        ({"length": 3}, "manifest.length"),
        ({"length": 10**6}, "manifest.length"),
        ({"path": "/elsewhere.txt"}, "manifest.path-missing"),
    ],
    ids=["md5", "sha-256", "short", "long", "path"],
)
def test_a_manifest_that_lies_is_refused(
    tmp_path: Path, override: dict[str, object], rule: str
) -> None:
    data = build(
        [(p[1:], b) for p, b in GOOD.items()], manifest_for(GOOD, **{"/dir/b.txt": override})
    )
    refuse(tmp_path, data, ManifestMismatchError, rule)


def test_an_entry_the_manifest_does_not_list_is_refused(tmp_path: Path) -> None:
    data = build([(p[1:], b) for p, b in GOOD.items()] + [("extra", b"x")], manifest_for(GOOD))
    refuse(tmp_path, data, ManifestMismatchError, "manifest.path-unlisted")


def test_a_manifest_listing_a_path_twice_is_refused(tmp_path: Path) -> None:
    twice = manifest_for(GOOD).replace(b"/a.txt", b"/dir/b.txt")
    data = build([(p[1:], b) for p, b in GOOD.items()], twice)
    with pytest.raises(ManifestMismatchError):
        unpack_package(io.BytesIO(data), tmp_path / "target")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("manifest", "rule"),
    [
        (None, "manifest.missing"),
        (b"<not-xml", "manifest.invalid"),
        (b'<!DOCTYPE x [<!ENTITY e "e">]><urlset/>', "manifest.invalid"),
        (
            serialize(ResourceDumpManifest(md=Metadata(at=T0))).replace(
                b"resourcedump-manifest", b"resourcelist"
            ),
            "manifest.capability",
        ),
    ],
    ids=["missing", "not-xml", "doctype", "not-a-manifest"],
)
def test_a_missing_or_bad_manifest_is_refused(
    tmp_path: Path, manifest: bytes | None, rule: str
) -> None:
    refuse(tmp_path, build([("a.txt", b"a")], manifest), ManifestMismatchError, rule)


def test_two_entries_of_one_name_are_refused(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="Duplicate name"):  # zipfile warns, and writes it
        data = build([("a.txt", b"1"), ("a.txt", b"2")], manifest_for({"/a.txt": b"2"}))
    refuse(tmp_path, data, UnsafePackageError, "entry.duplicate")


def test_a_file_where_a_directory_must_be_is_refused(tmp_path: Path) -> None:
    files = {"/a": b"1", "/a/b": b"2"}
    refuse(tmp_path, honest(files), UnsafePackageError, "entry.name-conflict")


def test_an_encrypted_entry_is_refused(tmp_path: Path) -> None:
    data = bytearray(honest(GOOD))
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature)
        flags = struct.unpack_from("<H", data, at + offset)[0]
        struct.pack_into("<H", data, at + offset, flags | 1)
    refuse(tmp_path, bytes(data), UnsafePackageError, "entry.encrypted")


def test_another_compression_method_is_refused(tmp_path: Path) -> None:
    data = build([("a.txt", b"a")], manifest_for({"/a.txt": b"a"}), zipfile.ZIP_BZIP2)
    refuse(tmp_path, data, UnsafePackageError, "entry.compression")


def claim_entries(data: bytes, count: int) -> bytes:
    """``data`` with a ZIP64 end record that claims ``count`` entries (as a million-entry
    package would), the classic end record pointing to it."""
    end = data.rindex(zipfile.stringEndArchive)
    fields = list(struct.unpack(zipfile.structEndArchive, data[end : end + 22]))
    size, offset = fields[5], fields[6]
    record64 = struct.pack(
        zipfile.structEndArchive64,
        zipfile.stringEndArchive64, 44, 45, 45, 0, 0, count, count, size, offset,
    )  # fmt: skip
    locator = struct.pack(zipfile.structEndArchive64Locator, zipfile.stringEndArchive64Locator,
                          0, end, 1)  # fmt: skip
    fields[3] = fields[4] = 0xFFFF
    return data[:end] + record64 + locator + struct.pack(zipfile.structEndArchive, *fields)


def test_a_million_entries_are_refused_from_the_end_record(tmp_path: Path) -> None:
    data = claim_entries(honest(GOOD), 1_000_000)
    tracemalloc.start()
    try:
        refuse(tmp_path, data, UnsafePackageError, "zip.too-many-entries")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MB


def test_more_entries_than_the_limit_are_refused(tmp_path: Path) -> None:
    files = {f"/f{n}": b"%d" % n for n in range(40)}
    refuse(tmp_path, honest(files), UnsafePackageError, "zip.too-many-entries", max_entries=20)


def test_a_manifest_with_too_many_entries_is_refused(tmp_path: Path) -> None:
    flood = b"".join(
        b"<url><loc>http://source.invalid/%d</loc><rs:md path='/%d'/></url>" % (n, n)
        for n in range(60_000)
    )
    manifest = serialize(ResourceDumpManifest(md=Metadata(at=T0))).replace(
        b"</urlset>", flood + b"</urlset>"
    )
    error = refuse(tmp_path, build([], manifest), ManifestMismatchError, "manifest.invalid")
    assert "60000 entries" in str(error)


def test_the_manifest_size_is_bounded(tmp_path: Path) -> None:
    data = build([("a.txt", b"a")], manifest_for({"/a.txt": b"a"}) + b" " * 5000)
    refuse(tmp_path, data, UnsafePackageError, "manifest.too-large", max_manifest_bytes=4096)


def test_the_package_size_is_bounded(tmp_path: Path) -> None:
    refuse(tmp_path, honest(GOOD), UnsafePackageError, "zip.too-large", max_package_bytes=100)


@pytest.mark.parametrize("keep", [0, 10, 0.5, -1], ids=["empty", "head", "half", "last-byte"])
def test_a_package_cut_off_is_refused(tmp_path: Path, keep: float) -> None:
    data = honest(GOOD)
    cut = data[: int(len(data) * keep) if isinstance(keep, float) else keep]
    refuse(tmp_path, cut, DamagedPackageError, "zip.not-zip")


def test_a_target_that_exists_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "mine").write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        unpack_package(io.BytesIO(honest(GOOD)), tmp_path / "target")
    assert (tmp_path / "target" / "mine").read_bytes() == b"keep"


def _mutations(rng: random.Random, data: bytes) -> Callable[[], bytes]:
    def flip() -> bytes:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)

    def truncate() -> bytes:
        return data[: rng.randrange(len(data))]

    def splice() -> bytes:
        at = rng.randrange(len(data))
        return data[:at] + rng.randbytes(rng.randint(1, 64)) + data[at:]

    return rng.choice([flip, flip, flip, truncate, splice])


def test_seeded_fuzz_of_package_bytes(tmp_path: Path) -> None:
    """Mutated packages: each is unpacked truthfully or refused with a PackageError."""
    rng = random.Random(20261202)
    files = {
        "/a.txt": b"alpha\n" * 40,
        "/d/b.bin": random.Random(1).randbytes(3000),
        "/d/e/c": b"",
    }
    store: dict[int, bytes] = {}

    class Kept(io.BytesIO):
        def close(self) -> None:
            store[0] = self.getvalue()
            super().close()

    with PackageWriter(lambda n: Kept(), at=T0, now=lambda: T0) as writer:  # the same bytes
        for path, body in files.items():
            writer.add(
                PackageEntry(
                    loc=f"http://source.invalid{path}",
                    path=path,
                    length=len(body),
                    open=lambda body=body: io.BytesIO(body),
                )
            )
    originals = [store[0], honest(files)]  # the writer's packages, and zipfile's own
    refused = 0
    for n in range(1500):
        data = _mutations(rng, originals[n % 2])()
        target = tmp_path / f"t{n}"
        try:
            unpacked = unpack_package(io.BytesIO(data), target)
        except PackageError:
            refused += 1
            assert not target.exists()
            continue
        for bitstream in unpacked.bitstreams:  # what was accepted was verified
            assert bitstream.file is not None and bitstream.entry.md is not None
            assert bitstream.file.read_bytes() == files[bitstream.entry.md.path or ""]
    assert refused > 750, refused
    leftovers = [p.name for p in tmp_path.iterdir() if not p.name.startswith("t")]
    assert leftovers == [], "no staging directory survives"


@pytest.mark.timeout(120)
def test_a_manifest_of_a_million_entries_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """A real million-entry manifest (about 70 MB of XML, deflated to little): refused from
    its sizes before a byte of it is decompressed."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("manifest.xml", "w", force_zip64=True) as manifest:
            manifest.write(serialize(ResourceDumpManifest(md=Metadata(at=T0)))[:-11])
            for block in range(100):
                manifest.write(
                    b"".join(
                        b"<url><loc>http://s.invalid/%d</loc><rs:md path='/%d'/></url>" % (n, n)
                        for n in range(block * 10_000, (block + 1) * 10_000)
                    )
                )
            manifest.write(b"</urlset>\n")
    data = out.getvalue()
    tracemalloc.start()
    try:
        error = refuse(tmp_path, data, UnsafePackageError, "manifest.too-large")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "manifest.xml" in str(error)
    assert peak < 4 * MB, f"peak {peak}"


@pytest.mark.parametrize(
    ("bit", "rule"),
    [(0x20, "entry.unsupported"), (0x40, "entry.encrypted")],
    ids=["patched", "strong-encryption"],
)
def test_a_central_record_asking_for_patched_or_strongly_encrypted_data_is_refused(
    tmp_path: Path, bit: int, rule: str
) -> None:
    """Found by the fuzz: zipfile raised NotImplementedError for these flags."""
    data = bytearray(honest(GOOD))
    at = data.index(b"PK\x01\x02")
    flags = struct.unpack_from("<H", data, at + 8)[0]
    struct.pack_into("<H", data, at + 8, flags | bit)
    refuse(tmp_path, bytes(data), UnsafePackageError, rule)

"""Reading a ZIP package of a Resource Dump or Change Dump, as a Destination must: warily.

:func:`unpack_package` checks a package from another party before anything of it reaches
the caller: every entry's name (no ``..``, no leading ``/``, no backslash or drive letter,
no control character), its kind (no symlinks or devices, no encryption), its sizes (a
bound on entries, on total bytes, and on the compression ratio, against ZIP bombs), and
every bitstream against ``manifest.xml`` (same set of paths, each one's ``length`` and
``hash``). The bitstreams are streamed into a fresh directory beside the target and that
directory is renamed to the target only after all of them passed, so a refused package
leaves nothing behind, and a package is never half-applied.

Decompression, CRCs and ZIP64 are :mod:`zipfile`'s; this module adds only the checks.
Its one use of a private name, ``zipfile._EndRecData``, reads the end record's entry
count before :class:`zipfile.ZipFile` builds an object per entry, so that a package
claiming a million entries costs a few bytes of reading, not gigabytes of memory; where
the name is missing, the package's byte bound still caps the cost.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .digests import Digests
from .exceptions import (
    DamagedPackageError,
    DocumentError,
    ManifestMismatchError,
    UnsafePackageError,
)
from .limits import Limits
from .models import Change, ChangeDumpManifest, Entry, ResourceDumpManifest
from .namespaces import MAX_BYTES, MAX_ENTRIES
from .package_writer import MANIFEST_NAME
from .parse import parse

__all__ = [
    "DEFAULT_PACKAGE_LIMITS",
    "PackageLimits",
    "UnpackedBitstream",
    "UnpackedPackage",
    "check_entry_name",
    "deletions",
    "unpack_package",
]

#: Bytes decompressed at a time.
CHUNK = 64 * 1024
#: Below this size an entry's compression ratio is not checked: a small run of zeros may
#: compress a thousandfold and still costs nothing.
_RATIO_FLOOR = 1024 * 1024
#: The longest name a file system takes for one path segment (bytes).
_MAX_SEGMENT = 255
_FILE_TYPE_BITS = 0o170000


@dataclass(frozen=True, slots=True)
class PackageLimits:
    """How much of a package the reader will take; each is checked before the work."""

    #: Bytes of the package file itself.
    max_package_bytes: int = 1024 * 1024 * 1024
    #: Entries in the ZIP (bitstreams, directories and the manifest).
    max_entries: int = MAX_ENTRIES + 1
    #: Bytes of all bitstreams, uncompressed.
    max_total_bytes: int = 4 * 1024 * 1024 * 1024
    #: Uncompressed over compressed size of one entry (for entries over 1 MiB).
    max_ratio: int = 200
    #: Bytes of ``manifest.xml``, uncompressed (the Sitemaps limit).
    max_manifest_bytes: int = MAX_BYTES
    #: Characters in one entry name.
    max_name_chars: int = 1024


DEFAULT_PACKAGE_LIMITS = PackageLimits()


@dataclass(frozen=True, slots=True)
class UnpackedBitstream:
    """One manifest entry and, unless it is a deletion, where its verified bytes are."""

    entry: Entry
    file: Path | None


@dataclass(frozen=True, slots=True)
class UnpackedPackage:
    """A package that passed every check, its bitstreams under ``directory``."""

    manifest: ResourceDumpManifest | ChangeDumpManifest
    directory: Path
    bitstreams: tuple[UnpackedBitstream, ...]


def check_entry_name(name: str, limits: PackageLimits = DEFAULT_PACKAGE_LIMITS) -> None:
    """Refuse a ZIP entry name that could land outside the directory it is unpacked in.

    Raises:
        UnsafePackageError: ``rule`` ``entry.name-unsafe``.
    """
    problem = None
    if not name or len(name) > limits.max_name_chars:
        problem = "empty or too long"
    elif name.startswith("/"):
        problem = "absolute"
    elif "\\" in name:
        problem = "holds a backslash"
    elif len(name) > 1 and name[1] == ":":
        problem = "starts with a drive letter"
    elif any(c < " " or c == "\x7f" for c in name):
        problem = "holds a control character"
    else:
        segments = name.removesuffix("/").split("/")
        if any(s in ("", ".", "..") for s in segments):
            problem = "has an empty, '.' or '..' segment"
        elif any(len(s.encode("utf-8", "surrogatepass")) > _MAX_SEGMENT for s in segments):
            problem = f"has a segment over {_MAX_SEGMENT} bytes"
    if problem is not None:
        raise UnsafePackageError("entry.name-unsafe", f"entry name {name[:200]!r} {problem}")


def _end_record_entries(package: BinaryIO) -> int | None:
    """The entry count the ZIP's end record claims, read without reading the entries."""
    end_record: Any = getattr(zipfile, "_EndRecData", None)
    if end_record is None:
        return None
    try:
        record = end_record(package)
    except (OSError, ValueError, TypeError, IndexError):
        return None
    finally:
        package.seek(0)
    if not record:
        raise DamagedPackageError("zip.not-zip", "no ZIP end record: not a ZIP, or cut off")
    count = record[4]  # zipfile._ECD_ENTRIES_TOTAL
    return count if isinstance(count, int) else None


def _open_zip(package: BinaryIO, limits: PackageLimits) -> zipfile.ZipFile:
    size = package.seek(0, os.SEEK_END)
    package.seek(0)
    if size > limits.max_package_bytes:
        raise UnsafePackageError(
            "zip.too-large", f"{size} bytes, more than the limit of {limits.max_package_bytes}"
        )
    count = _end_record_entries(package)
    if count is not None and count > limits.max_entries:
        raise UnsafePackageError(
            "zip.too-many-entries", f"{count} entries, more than the limit of {limits.max_entries}"
        )
    try:
        archive = zipfile.ZipFile(package)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        ValueError,
        EOFError,
        OSError,
        struct.error,
    ) as exc:
        raise DamagedPackageError("zip.not-zip", f"not a readable ZIP: {exc}") from None
    except NotImplementedError as exc:
        raise UnsafePackageError("zip.unsupported", str(exc)) from None
    if len(archive.infolist()) > limits.max_entries:
        archive.close()
        raise UnsafePackageError(
            "zip.too-many-entries",
            f"{len(archive.infolist())} entries, more than the limit of {limits.max_entries}",
        )
    return archive


def _check_infos(archive: zipfile.ZipFile, limits: PackageLimits) -> dict[str, zipfile.ZipInfo]:
    """The file entries by name, after every check that needs no decompression."""
    files: dict[str, zipfile.ZipInfo] = {}
    directories: set[str] = set()
    total = 0
    for info in archive.infolist():
        name = info.filename
        check_entry_name(name, limits)
        mode = info.external_attr >> 16
        kind = mode & _FILE_TYPE_BITS
        if info.is_dir():
            if kind not in (0, stat.S_IFDIR):
                raise UnsafePackageError("entry.kind", f"{name!r} is not a plain directory")
            directories.add(name.removesuffix("/"))
            continue
        if stat.S_ISLNK(mode):
            raise UnsafePackageError("entry.symlink", f"{name!r} is a symbolic link")
        if kind not in (0, stat.S_IFREG):
            raise UnsafePackageError("entry.kind", f"{name!r} is not a regular file")
        if info.flag_bits & 0x41:  # encrypted, or strongly encrypted
            raise UnsafePackageError("entry.encrypted", f"{name!r} is encrypted")
        if info.flag_bits & 0x20:
            raise UnsafePackageError("entry.unsupported", f"{name!r} holds patched data")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise UnsafePackageError(
                "entry.compression",
                f"{name!r} uses compression method {info.compress_type}; only stored and"
                " deflated are read",
            )
        if name in files:
            raise UnsafePackageError("entry.duplicate", f"{name!r} appears twice")
        if info.file_size > _RATIO_FLOOR and info.file_size > limits.max_ratio * max(
            info.compress_size, 1
        ):
            raise UnsafePackageError(
                "zip.bomb",
                f"{name!r} expands {info.compress_size} bytes to {info.file_size}, over the"
                f" ratio limit of {limits.max_ratio}",
            )
        total += info.file_size
        if total > limits.max_total_bytes:
            raise UnsafePackageError(
                "zip.bomb",
                f"the entries expand to more than the limit of {limits.max_total_bytes} bytes",
            )
        files[name] = info
    for name in files:  # a file where another entry needs a directory: "a" and "a/b"
        parts = name.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in files:
                raise UnsafePackageError(
                    "entry.name-conflict", f"{name!r} lies under a file of the same package"
                )
    conflicts = directories & files.keys()
    if conflicts:
        raise UnsafePackageError(
            "entry.name-conflict", f"{sorted(conflicts)[0]!r} is a file and a directory"
        )
    return files


def _read_manifest(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, limits: PackageLimits
) -> ResourceDumpManifest | ChangeDumpManifest:
    if info.file_size > limits.max_manifest_bytes:
        raise UnsafePackageError(
            "manifest.too-large",
            f"manifest.xml is {info.file_size} bytes, over {limits.max_manifest_bytes}",
        )
    data = bytearray()
    for chunk in _chunks(archive, info):
        data += chunk
        if len(data) > limits.max_manifest_bytes:
            raise UnsafePackageError("manifest.too-large", "manifest.xml is over its limit")
    try:
        manifest = parse(
            data,
            max_bytes=limits.max_manifest_bytes,
            limits=Limits(max_entries=min(limits.max_entries, MAX_ENTRIES)),
        )
    except DocumentError as exc:
        raise ManifestMismatchError("manifest.invalid", f"manifest.xml: {exc}") from None
    if not isinstance(manifest, ResourceDumpManifest | ChangeDumpManifest):
        raise ManifestMismatchError(
            "manifest.capability",
            f"manifest.xml is a {manifest.capability!s}, not a resourcedump-manifest or"
            " changedump-manifest",
        )
    return manifest


def _chunks(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The entry's bytes, decompressed a chunk at a time; damage as a typed error."""
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(CHUNK):
                yield chunk
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, struct.error, zlib.error) as exc:
        raise DamagedPackageError("zip.damaged", f"{info.filename!r}: {exc}") from None
    except (NotImplementedError, RuntimeError) as exc:
        # The entry's local header asks for what its central directory record did not
        # (patched data, strong or plain encryption): zipfile refuses, and so does this.
        raise UnsafePackageError("entry.unsupported", f"{info.filename!r}: {exc}") from None


def _expected(
    manifest: ResourceDumpManifest | ChangeDumpManifest, files: dict[str, zipfile.ZipInfo]
) -> list[tuple[Entry, str | None]]:
    """Each manifest entry with its ZIP entry name; refuses a manifest and a package
    that do not name the same bitstreams."""
    pairs: list[tuple[Entry, str | None]] = []
    named: set[str] = set()
    for i, entry in enumerate(manifest.entries):
        md = entry.md
        path = None if md is None else md.path
        if path is None:  # validation allows it only for a deletion in a Change Dump
            pairs.append((entry, None))
            continue
        name = path[1:]
        if name in named:
            raise ManifestMismatchError("manifest.path-repeated", f"entry {i}: {path!r} twice")
        if name not in files:
            raise ManifestMismatchError(
                "manifest.path-missing", f"entry {i}: {path!r} is not in the package"
            )
        named.add(name)
        pairs.append((entry, name))
    extra = files.keys() - named
    if extra:
        raise ManifestMismatchError(
            "manifest.path-unlisted", f"{sorted(extra)[0]!r} is in the package, not the manifest"
        )
    return pairs


def _write_verified(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, entry: Entry, target: Path
) -> None:
    md = entry.md
    assert md is not None
    length, expected = md.length, md.hash
    if length is not None and info.file_size != length:
        raise ManifestMismatchError(
            "manifest.length",
            f"{md.path!r}: the package holds {info.file_size} bytes, the manifest says {length}",
        )
    digests = Digests.expecting(expected) if expected is not None else Digests(())
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "xb") as out:
        for chunk in _chunks(archive, info):
            digests.update(chunk)
            if length is not None and digests.length > length:
                raise ManifestMismatchError(
                    "manifest.length", f"{md.path!r}: more bytes than the manifest's {length}"
                )
            out.write(chunk)
    if length is not None and digests.length != length:
        raise ManifestMismatchError(
            "manifest.length",
            f"{md.path!r}: {digests.length} bytes, the manifest says {length}",
        )
    if expected is not None:
        problem = digests.mismatch(expected)
        if problem is not None:
            raise ManifestMismatchError("manifest.hash", f"{md.path!r}: {problem}")


def unpack_package(
    package: BinaryIO,
    target: Path,
    *,
    limits: PackageLimits = DEFAULT_PACKAGE_LIMITS,
) -> UnpackedPackage:
    """Check ``package`` (a seekable binary file) and unpack its bitstreams into ``target``.

    ``target`` must not exist; its parent must. The bitstreams land at their manifest
    ``path`` under it, and ``manifest.xml`` beside them. On any refusal ``target`` is not
    created and nothing is left in its parent.

    Raises:
        UnsafePackageError: an unsafe name or kind of entry, a ZIP bomb, too many entries.
        DamagedPackageError: not a ZIP, cut off, an entry failing its CRC.
        ManifestMismatchError: no valid ``manifest.xml``, or one that lies about a path,
            a length or a hash.
        FileExistsError: ``target`` exists.
        OSError: the local file system failed (full, read-only), not the package.
    """
    if target.exists():
        raise FileExistsError(f"{target} exists")
    with _open_zip(package, limits) as archive:
        files = _check_infos(archive, limits)
        manifest_info = files.pop(MANIFEST_NAME, None)
        if manifest_info is None:
            raise ManifestMismatchError("manifest.missing", "no manifest.xml at the top level")
        manifest = _read_manifest(archive, manifest_info, limits)
        pairs = _expected(manifest, files)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            bitstreams = []
            for entry, name in pairs:
                if name is None:
                    bitstreams.append(UnpackedBitstream(entry, None))
                    continue
                _write_verified(archive, files[name], entry, staging / name)
                bitstreams.append(UnpackedBitstream(entry, target / name))
            with open(staging / MANIFEST_NAME, "xb") as out:
                for chunk in _chunks(archive, manifest_info):
                    out.write(chunk)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return UnpackedPackage(manifest, target, tuple(bitstreams))


def deletions(package: UnpackedPackage) -> list[Entry]:
    """The entries of a Change Dump package that delete a resource."""
    return [b.entry for b in package.bitstreams if b.entry.change is Change.DELETED]

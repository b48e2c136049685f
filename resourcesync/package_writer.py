"""Writing ZIP packages of bitstreams with their manifests (Z39.99-2014 Sections 11, 13).

A :class:`PackageWriter` takes :class:`PackageEntry` items one at a time, streams each
bitstream into the current ZIP package (never the whole file in memory), and starts a new
package when the next bitstream would take the current one over ``max_bytes``. Each
package ends with its Resource Dump Manifest (or Change Dump Manifest) as ``manifest.xml``
at the top level, as Section 11.2 requires, describing every bitstream with ``path``,
``length``, ``hash`` (md5 and sha-256) and ``type``. :func:`resource_dump` and
:func:`change_dump` then build the document that links the packages.

The writer does file I/O only through the file objects ``open_package`` hands it; which
files, and where they are served, is the caller's business. It writes the ZIP without
seeking (data descriptors after each entry), so that the package's own length and hash
are computed as it is written, and any writable stream will do.

Use::

    with PackageWriter(lambda n: open(f"part{n}.zip", "wb"), at=now, up=caplist) as writer:
        for path in files:
            writer.add(PackageEntry(loc=..., path="/" + name, length=size,
                                    open=lambda path=path: open(path, "rb")))
    packages = writer.packages
    dump = resource_dump(packages, [f"https://example.org/part{p.index}.zip" for p in packages],
                         up=caplist)
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import BinaryIO, Protocol

from .digests import Digests
from .exceptions import PackageWriteError
from .models import (
    Change,
    ChangeDump,
    ChangeDumpManifest,
    Entry,
    Link,
    Metadata,
    ResourceDump,
    ResourceDumpManifest,
)
from .namespaces import MAX_ENTRIES
from .serialize import serialize
from .validate import check_path, validate

__all__ = [
    "DEFAULT_MAX_PACKAGE_BYTES",
    "MANIFEST_NAME",
    "PACKAGE_TYPE",
    "PackageEntry",
    "PackageWriter",
    "WritableStream",
    "WrittenPackage",
    "change_dump",
    "package_name",
    "resource_dump",
]

#: The manifest's name inside every package (Section 11.2).
MANIFEST_NAME = "manifest.xml"
#: The Media Type of a package (Section 11.1).
PACKAGE_TYPE = "application/zip"
#: Default bound on the bitstream bytes of one package: 64 MiB.
DEFAULT_MAX_PACKAGE_BYTES = 64 * 1024 * 1024
#: Bytes read from a source at a time.
CHUNK = 64 * 1024
#: The earliest time a ZIP entry can carry (DOS dates start in 1980).
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


class WritableStream(Protocol):
    """Where a package is written: any binary stream (``flush``, if it has one, is used)."""

    def write(self, data: bytes, /) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PackageEntry:
    """One bitstream to package, or (in a Change Dump) one deletion, which has no bytes.

    ``open`` is called when the bitstream is written and what it returns is closed after;
    it must give exactly ``length`` bytes (a source that changed meanwhile is refused
    with :class:`PackageWriteError` rather than packaged under a wrong manifest).
    """

    #: The URI the Source associates with the bitstream (the manifest's ``<loc>``).
    loc: str
    #: Where the bitstream lies in the package: a leading ``/``, no ``.``/``..`` segments.
    path: str | None = None
    #: Its length in bytes.
    length: int = 0
    #: Opens it for reading; ``None`` only for a deletion.
    open: Callable[[], BinaryIO] | None = None
    #: ``<lastmod>``.
    lastmod: datetime | None = None
    #: Its Media Type (``rs:md/@type``), recommended by the standard.
    type: str | None = None
    #: In a Change Dump: the change (``created``, ``updated``, ``deleted``).
    change: Change | None = None
    #: In a Change Dump: when it changed (``rs:md/@datetime``; else ``lastmod`` is used).
    datetime: datetime | None = None


@dataclass(frozen=True, slots=True)
class WrittenPackage:
    """A finished package: what a Resource Dump or Change Dump says about it."""

    #: 0-based, in the order written; ``open_package`` was called with it.
    index: int
    #: The manifest inside it (also to be served on its own, ``rel="contents"``).
    manifest: ResourceDumpManifest | ChangeDumpManifest
    #: The package's bytes and their ``hash`` (md5 and sha-256).
    length: int
    hash: str
    #: For a Resource Dump: when packing started and ended (``at``, ``completed``).
    at: datetime | None = None
    completed: datetime | None = None
    #: For a Change Dump: the span of its changes (``from``, ``until``).
    from_: datetime | None = None
    until: datetime | None = None


def package_name(path: str) -> str:
    """The ZIP entry name of a manifest ``path``: without its leading ``/``.

    Raises:
        PackageWriteError: ``path`` is not one a reader would accept.
    """
    problem = check_path(path)
    if problem is not None:
        raise PackageWriteError(problem[1])
    name = path[1:]
    if not name or name.endswith("/") or "//" in name:
        raise PackageWriteError(f"path {path!r} does not name a file")
    if name == MANIFEST_NAME:
        raise PackageWriteError(f"path {path!r} is the manifest's own name")
    if any(c < " " or c == "\x7f" for c in name) or (len(name) > 1 and name[1] == ":"):
        raise PackageWriteError(f"path {path!r} holds a control character or a drive letter")
    return name


class _CountingSink:
    """Passes writes to ``out`` and digests them; no ``tell``/``seek``, so that
    :mod:`zipfile` writes the archive in one pass (data descriptors after each entry)."""

    def __init__(self, out: WritableStream) -> None:
        self.out = out
        self.digests = Digests()

    def write(self, data: bytes) -> int:
        self.digests.update(data)
        self.out.write(data)
        return len(data)

    def flush(self) -> None:
        flush = getattr(self.out, "flush", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        """The writer closes ``out`` itself, once the package is complete."""


def _zip_time(moment: datetime) -> tuple[int, int, int, int, int, int]:
    moment = moment.astimezone(UTC)
    stamp = (moment.year, moment.month, moment.day, moment.hour, moment.minute, moment.second)
    return max(stamp, _ZIP_EPOCH)


class PackageWriter:
    """Writes bitstreams into ZIP packages of bounded size, each with its manifest.

    A Resource Dump's packages need ``at`` (when the snapshot started); a Change Dump's
    need ``from_`` (the start of the changes' span) and entries with ``change``, in
    forward chronological order. A package holds at most ``max_entries`` bitstreams and,
    unless one bitstream alone is larger, at most ``max_bytes`` bytes of bitstreams (the
    ZIP's headers and the manifest come on top; compression only makes it smaller for
    compressible data). ``open_package(index)`` gives the stream a package is written to;
    the writer closes it when the package is complete.
    """

    def __init__(
        self,
        open_package: Callable[[int], WritableStream],
        *,
        at: datetime | None = None,
        from_: datetime | None = None,
        up: str | None = None,
        max_bytes: int = DEFAULT_MAX_PACKAGE_BYTES,
        max_entries: int = MAX_ENTRIES,
        compression: int = zipfile.ZIP_DEFLATED,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if (at is None) == (from_ is None):
            raise PackageWriteError("give at (a Resource Dump) or from_ (a Change Dump)")
        if max_bytes < 1 or not 1 <= max_entries <= MAX_ENTRIES:
            raise PackageWriteError(f"max_entries must be 1..{MAX_ENTRIES}, max_bytes over 0")
        self._open_package = open_package
        self._at = at
        self._from = from_
        self._up = up
        self._max_bytes = max_bytes
        self._max_entries = max_entries
        self._compression = compression
        self._now = now
        #: The packages finished so far, in order.
        self.packages: list[WrittenPackage] = []
        self._zip: zipfile.ZipFile | None = None
        self._sink: _CountingSink | None = None
        self._entries: list[Entry] = []
        self._names: set[str] = set()
        self._bytes = 0
        self._started: datetime | None = None
        self._last_change: datetime | None = None

    @property
    def is_change_dump(self) -> bool:
        return self._from is not None

    def __enter__(self) -> PackageWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            self._abandon()

    def add(self, entry: PackageEntry) -> None:
        """Write ``entry`` into the current package (starting a new one if it is full).

        Raises:
            PackageWriteError: a bad path, a duplicate path, a missing ``change`` or change
                time in a Change Dump, or a source that gave other than ``length`` bytes.
        """
        deleted = entry.change is Change.DELETED
        if self.is_change_dump:
            when = entry.datetime or entry.lastmod
            if entry.change is None or when is None:
                raise PackageWriteError(f"{entry.loc}: a Change Dump entry needs change and time")
            if self._last_change is not None and when < self._last_change:
                raise PackageWriteError(f"{entry.loc}: changes must come in time order")
        elif entry.change is not None:
            raise PackageWriteError(f"{entry.loc}: a Resource Dump entry has no change")
        name = None
        if not deleted:
            if entry.path is None or entry.open is None or entry.length < 0:
                raise PackageWriteError(f"{entry.loc}: a bitstream needs path, open and length")
            name = package_name(entry.path)
        full = len(self._entries) >= self._max_entries or (
            self._entries and self._bytes + entry.length > self._max_bytes
        )
        if self._zip is None or full:
            if self._zip is not None:
                self._finish()
            self._start()
        if name is not None:
            if name in self._names:
                raise PackageWriteError(f"{entry.loc}: path {entry.path!r} is in this package")
            digests = self._write_bitstream(entry, name)
            self._names.add(name)
            self._bytes += entry.length
        md = Metadata.model_construct(
            hash=None if name is None else digests.value(),
            length=None if name is None else entry.length,
            type=entry.type,
            path=None if name is None else entry.path,
            change=entry.change,
            datetime=entry.datetime,
            extra={},
        )
        self._entries.append(Entry(loc=entry.loc, lastmod=entry.lastmod, md=md))
        if self.is_change_dump:
            self._last_change = entry.datetime or entry.lastmod

    def close(self) -> list[WrittenPackage]:
        """Finish the last package; returns :attr:`packages`."""
        if self._zip is not None:
            self._finish()
        return self.packages

    def _start(self) -> None:
        index = len(self.packages)
        self._sink = _CountingSink(self._open_package(index))
        self._zip = zipfile.ZipFile(self._sink, "w", compression=self._compression)
        self._entries = []
        self._names = set()
        self._bytes = 0
        self._started = self._now()

    def _write_bitstream(self, entry: PackageEntry, name: str) -> Digests:
        assert self._zip is not None and entry.open is not None
        info = zipfile.ZipInfo(name, _zip_time(entry.lastmod or self._started or self._now()))
        info.compress_type = self._compression
        info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
        info.file_size = entry.length  # lets zipfile choose ZIP64 for large bitstreams
        digests = Digests()
        with entry.open() as source, self._zip.open(info, "w") as target:
            while chunk := source.read(CHUNK):
                digests.update(chunk)
                if digests.length > entry.length:
                    break
                target.write(chunk)
        if digests.length != entry.length:
            more = "more than " if digests.length > entry.length else ""
            raise PackageWriteError(
                f"{entry.loc}: the source gave {more}{digests.length} bytes, not"
                f" {entry.length}: it changed while it was packaged"
            )
        return digests

    def _manifest(self, completed: datetime) -> ResourceDumpManifest | ChangeDumpManifest:
        links = () if self._up is None else (Link(rel="up", href=self._up),)
        manifest: ResourceDumpManifest | ChangeDumpManifest
        if self.is_change_dump:
            start = self._from if not self.packages else self.packages[-1].until
            manifest = ChangeDumpManifest(
                md=Metadata.model_validate({"from": start, "until": self._last_change}),
                links=links,
                entries=tuple(self._entries),
            )
        else:
            manifest = ResourceDumpManifest(
                md=Metadata(at=self._started, completed=completed),
                links=links,
                entries=tuple(self._entries),
            )
        validate(manifest)
        return manifest

    def _finish(self) -> None:
        assert self._zip is not None and self._sink is not None and self._started is not None
        completed = max(self._now(), self._started)
        manifest = self._manifest(completed)
        info = zipfile.ZipInfo(MANIFEST_NAME, _zip_time(completed))
        info.compress_type = self._compression
        info.external_attr = 0o100644 << 16
        self._zip.writestr(info, serialize(manifest))
        self._zip.close()
        self._zip = None
        self._sink.out.close()
        md = manifest.md
        self.packages.append(
            WrittenPackage(
                index=len(self.packages),
                manifest=manifest,
                length=self._sink.digests.length,
                hash=self._sink.digests.value(),
                at=md.at,
                completed=md.completed,
                from_=md.from_,
                until=md.until,
            )
        )
        self._sink = None

    def _abandon(self) -> None:
        """After a failure: close the half-written package's stream; it is not listed."""
        sink, self._zip, self._sink = self._sink, None, None
        if sink is not None:
            sink.out.close()


def _package_entries(
    packages: Sequence[WrittenPackage], locs: Sequence[str], manifest_locs: Sequence[str] | None
) -> tuple[Entry, ...]:
    if len(locs) != len(packages) or (
        manifest_locs is not None and len(manifest_locs) != len(packages)
    ):
        raise PackageWriteError("give one package URI (and manifest URI) per package")
    entries = []
    for n, package in enumerate(packages):
        links: tuple[Link, ...] = ()
        if manifest_locs is not None:
            links = (Link(rel="contents", href=manifest_locs[n], type="application/xml"),)
        md = Metadata.model_validate(
            {
                "type": PACKAGE_TYPE,
                "length": package.length,
                "hash": package.hash,
                "at": package.at,
                "completed": package.completed,
                "from": package.from_,
                "until": package.until,
            }
        )
        entries.append(Entry(loc=locs[n], md=md, links=links))
    return tuple(entries)


def resource_dump(
    packages: Sequence[WrittenPackage],
    locs: Sequence[str],
    *,
    up: str | None = None,
    manifest_locs: Sequence[str] | None = None,
) -> ResourceDump:
    """The Resource Dump (Section 11.1) of ``packages``, served at ``locs`` (one each);
    ``manifest_locs``, when given, are where each manifest is also served on its own."""
    at = min((p.at for p in packages if p.at is not None), default=None)
    completed = max((p.completed for p in packages if p.completed is not None), default=None)
    return ResourceDump(
        md=Metadata(at=at or datetime.now(UTC), completed=completed),
        links=() if up is None else (Link(rel="up", href=up),),
        entries=_package_entries(packages, locs, manifest_locs),
    )


def change_dump(
    packages: Sequence[WrittenPackage],
    locs: Sequence[str],
    *,
    from_: datetime,
    until: datetime | None = None,
    up: str | None = None,
    manifest_locs: Sequence[str] | None = None,
) -> ChangeDump:
    """The Change Dump (Section 13.1) of ``packages``, served at ``locs`` (one each)."""
    return ChangeDump(
        md=Metadata.model_validate({"from": from_, "until": until}),
        links=() if up is None else (Link(rel="up", href=up),),
        entries=_package_entries(packages, locs, manifest_locs),
    )

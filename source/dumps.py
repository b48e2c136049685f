"""The Source's Resource Dump and Change Dumps (Z39.99 Sections 11 and 13), written with
:class:`resourcesync.package_writer.PackageWriter` into a directory of their own.

**Resource Dump** (``/resourcedump.xml``): a snapshot of every resource in ZIP packages of
at most ``max_bytes`` bytes of bitstreams each, each package with its manifest (inside it,
and served beside it, ``rel="contents"``). It is written on request, in a thread, when the
resources changed since the last one was written and that one is older than ``min_age``
seconds (a Resource Dump says when it was taken, ``at``; a Destination catches up from
there with the Change Lists). Each snapshot has its own URLs (``/resourcedump/B/N.zip``),
so a package never changes under a URL; a package being downloaded when a newer snapshot
replaces it is sent whole (the open descriptor outlives the file's name).

**Change Dumps** (``/changedump.xml``): one package per closed Change List page (same
span: ``from``, ``until``), sealed once the page closes and never written again. It holds
the latest change of each resource in the period, with the resource's bytes as they are
when the package is sealed (a later change of the resource is in a later period); a
resource gone by then is left out (its deletion is in a later period too). A sealed
package is kept as ``changedump/N/`` (package, manifest, and what the Change Dump says of
it), renamed into place only once complete, so a restart finds it whole or not at all.
Each sealed package is announced to the hub by a ``changedump-notification``, once (an
Idempotency-Key per package; a ``notified`` mark once the hub stored it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote

from publisher.client import Publisher
from publisher.exceptions import PublisherError
from resourcesync import (
    Change,
    ChangeDumpManifest,
    ChangeDumpNotification,
    Link,
    format_datetime,
    parse,
    parse_datetime,
    serialize,
)
from resourcesync.exceptions import PackageWriteError
from resourcesync.package_writer import (
    DEFAULT_MAX_PACKAGE_BYTES,
    PackageEntry,
    PackageWriter,
    WrittenPackage,
    change_dump,
    resource_dump,
)

from .documents import Site, page_name
from .exceptions import NotAResource, SourceError
from .inventory import ChangeRecord, Inventory
from .tree import FileFacts, media_type, open_resource

__all__ = ["DumpUnavailable", "Dumps"]

log = logging.getLogger(__name__)

#: Tries at writing a Resource Dump whose files keep changing under it.
_TRIES = 3


class DumpUnavailable(SourceError):
    """No Resource Dump could be written (the files kept changing while it was)."""


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A Resource Dump written: its number (the inventory version), when, its document."""

    build: int
    written: float
    document: bytes


def _package_path(key: str) -> str:
    """A bitstream's ``path`` in a package: the file's own path, when it is UTF-8 text
    without control characters; else its key (percent-encoded, always valid)."""
    try:
        name = unquote(key, errors="strict")
    except UnicodeDecodeError:
        return "/" + key
    if any(c < " " or c == "\x7f" or c == "\\" for c in name) or (len(name) > 1 and name[1] == ":"):
        return "/" + key
    return "/" + name


class _Bitstream:
    """A resource's open descriptor, handed to the package writer as a file it opens (and
    closes) when it writes the bitstream; closed here if the writer never did. Closing it
    twice would close whatever the number names by then, another thread's socket maybe."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def open(self) -> BinaryIO:
        fd, self.fd = self.fd, None
        if fd is None:
            raise PackageWriteError("a bitstream opened twice")
        return os.fdopen(fd, "rb")

    def close_unopened(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


class Dumps:
    """The dumps of the Source at ``root``, kept under ``directory``."""

    def __init__(
        self,
        root: str,
        site: Site,
        inventory: Inventory,
        directory: str,
        *,
        max_bytes: int = DEFAULT_MAX_PACKAGE_BYTES,
        min_age: float = 60.0,
        publisher: Publisher | None = None,
    ) -> None:
        self.root = root
        self.site = site
        self.inventory = inventory
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.min_age = min_age
        self.publisher = publisher
        self._snapshot: _Snapshot | None = None
        self._writing: asyncio.Future[_Snapshot] | None = None
        self._sealing = asyncio.Lock()
        self._wake = asyncio.Event()
        #: Change Dump packages sealed, by page number (``None``: a period with nothing
        #: left to package, every resource it changed gone since; it has no package).
        self.sealed: dict[int, WrittenPackage | None] = {}

    # -- URLs ------------------------------------------------------------------------------

    @property
    def resourcedump_url(self) -> str:
        return f"{self.site.base_url}/resourcedump.xml"

    @property
    def changedump_url(self) -> str:
        return f"{self.site.base_url}/changedump.xml"

    def resourcedump_package_url(self, build: int, n: int, manifest: bool = False) -> str:
        suffix = ".manifest.xml" if manifest else ".zip"
        return f"{self.site.base_url}/resourcedump/{build}/{page_name(n)[:-4]}{suffix}"

    def changedump_package_url(self, n: int, manifest: bool = False) -> str:
        suffix = ".manifest.xml" if manifest else ".zip"
        return f"{self.site.base_url}/changedump/{page_name(n)[:-4]}{suffix}"

    # -- files -----------------------------------------------------------------------------

    def resourcedump_file(self, build: int, n: int, manifest: bool) -> Path | None:
        snapshot = self._snapshot
        if snapshot is None or snapshot.build != build:
            return None  # only the current snapshot's packages are served
        name = f"{n:08d}.{'xml' if manifest else 'zip'}"
        return self.directory / "resourcedump" / str(build) / name

    def changedump_file(self, n: int, manifest: bool) -> Path | None:
        if self.sealed.get(n) is None:
            return None
        name = "manifest.xml" if manifest else "package.zip"
        return self.directory / "changedump" / f"{n:08d}" / name

    # -- Resource Dump ---------------------------------------------------------------------

    async def resource_dump(self) -> bytes:
        """The Resource Dump document, written first if it is missing or stale.

        Raises:
            DumpUnavailable: the files kept changing while it was written.
        """
        snapshot = self._snapshot
        version = self.inventory.version
        if snapshot is not None and (
            snapshot.build == version or time.monotonic() - snapshot.written < self.min_age
        ):
            return snapshot.document
        if self._writing is None or self._writing.done():
            self._writing = asyncio.ensure_future(self._write_resource_dump())
        return (await asyncio.shield(self._writing)).document

    async def _write_resource_dump(self) -> _Snapshot:
        for _ in range(_TRIES):
            version = self.inventory.version
            files = self.inventory.files  # replaced on change, never changed in place
            try:
                snapshot = await asyncio.to_thread(self._write_snapshot, version, files)
            except PackageWriteError as exc:
                log.info("the Resource Dump is written again: %s", exc)
                continue
            old, self._snapshot = self._snapshot, snapshot
            if old is not None and old.build != snapshot.build:
                await asyncio.to_thread(
                    shutil.rmtree, self.directory / "resourcedump" / str(old.build), True
                )
            return snapshot
        raise DumpUnavailable("the files kept changing while the Resource Dump was written")

    def _write_snapshot(self, build: int, files: Mapping[str, FileFacts]) -> _Snapshot:
        target = self.directory / "resourcedump" / str(build)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        at = datetime.now(UTC)
        writer = PackageWriter(
            lambda n: open(target / f"{n:08d}.zip", "wb"),
            at=at,
            up=self.site.capabilitylist_url,
            max_bytes=self.max_bytes,
        )
        try:
            with writer:
                for key in sorted(files):
                    self._add_resource(writer, key)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        packages = writer.packages
        for package in packages:
            (target / f"{package.index:08d}.xml").write_bytes(serialize(package.manifest))
        document = resource_dump(
            packages,
            [self.resourcedump_package_url(build, p.index) for p in packages],
            up=self.site.capabilitylist_url,
            manifest_locs=[self.resourcedump_package_url(build, p.index, True) for p in packages],
        )
        return _Snapshot(build, time.monotonic(), serialize(document))

    def _add_resource(self, writer: PackageWriter, key: str) -> None:
        try:
            fd, st = open_resource(self.root, key)
        except NotAResource:
            return  # gone since it was listed: the Change Lists say so
        bitstream = _Bitstream(fd)
        try:
            writer.add(
                PackageEntry(
                    loc=self.site.file_url(key),
                    path=_package_path(key),
                    length=st.st_size,
                    open=bitstream.open,
                    lastmod=datetime.fromtimestamp(st.st_mtime, UTC),
                    type=media_type(key),
                )
            )
        finally:
            bitstream.close_unopened()

    # -- Change Dumps ----------------------------------------------------------------------

    def load_sealed(self) -> None:
        """The Change Dump packages sealed before (a restart's)."""
        base = self.directory / "changedump"
        if not base.is_dir():
            return
        for entry in sorted(base.iterdir()):
            if not (entry.name.isdigit() and (entry / "package.json").is_file()):
                continue
            n = int(entry.name)
            try:
                facts = json.loads((entry / "package.json").read_text())
                if facts.get("empty"):
                    self.sealed[n] = None
                    continue
                manifest = parse((entry / "manifest.xml").read_bytes())
            except (OSError, ValueError) as exc:
                log.warning("Change Dump package %s is damaged and written again: %s", entry, exc)
                shutil.rmtree(entry, ignore_errors=True)
                continue
            assert isinstance(manifest, ChangeDumpManifest)
            self.sealed[n] = WrittenPackage(
                index=n,
                manifest=manifest,
                length=int(facts["length"]),
                hash=str(facts["hash"]),
                from_=parse_datetime(facts["from"]),
                until=parse_datetime(facts["until"]),
            )

    async def seal_closed_pages(self) -> None:
        """Seal a Change Dump package for every closed Change List page without one."""
        async with self._sealing:
            history = self.inventory.history[:]
            closed = len(history) // self.site.changelist_entries
            for n in range(closed):
                if n in self.sealed:
                    continue
                for _ in range(_TRIES):
                    try:
                        package = await asyncio.to_thread(self._seal, history, n)
                    except PackageWriteError as exc:
                        log.info("Change Dump package %d is written again: %s", n, exc)
                        continue
                    self.sealed[n] = package
                    self._wake.set()
                    log.info("sealed Change Dump package %d", n)
                    break
                else:
                    log.error("Change Dump package %d not sealed: its files kept changing", n)
                    return

    def _seal(self, history: Sequence[ChangeRecord], n: int) -> WrittenPackage | None:
        size = self.site.changelist_entries
        changes = history[n * size : (n + 1) * size]
        latest: dict[str, ChangeRecord] = {}
        for change in changes:
            latest.pop(change.key, None)
            latest[change.key] = change
        start = self.inventory.started if n == 0 else history[n * size - 1].at
        base = self.directory / "changedump"
        final, partial = base / f"{n:08d}", base / f"{n:08d}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        written: list[WrittenPackage] = []
        try:
            with PackageWriter(
                lambda _i: open(partial / "package.zip", "wb"),
                from_=start,
                up=self.site.capabilitylist_url,
                max_bytes=1 << 62,  # one package per period
            ) as writer:
                for change in latest.values():
                    self._add_change(writer, change)
            written = writer.packages
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        if not written:  # every resource the period changed is gone since: no package
            (partial / "package.json").write_text(json.dumps({"empty": True}))
            os.replace(partial, final)
            return None
        [package] = written
        package = WrittenPackage(
            index=n,
            manifest=package.manifest,
            length=package.length,
            hash=package.hash,
            from_=package.from_,
            until=package.until,
        )
        (partial / "manifest.xml").write_bytes(serialize(package.manifest))
        assert package.from_ is not None and package.until is not None
        facts = {
            "length": package.length,
            "hash": package.hash,
            "from": format_datetime(package.from_),
            "until": format_datetime(package.until),
        }
        (partial / "package.json").write_text(json.dumps(facts))
        os.replace(partial, final)
        return package

    def _add_change(self, writer: PackageWriter, change: ChangeRecord) -> None:
        loc = self.site.file_url(change.key)
        if change.change is Change.DELETED:
            writer.add(
                PackageEntry(loc=loc, change=Change.DELETED, lastmod=change.at, datetime=change.at)
            )
            return
        try:
            fd, st = open_resource(self.root, change.key)
        except NotAResource:
            return  # deleted since: a later period says so
        bitstream = _Bitstream(fd)
        try:
            writer.add(
                PackageEntry(
                    loc=loc,
                    path=_package_path(change.key),
                    length=st.st_size,
                    open=bitstream.open,
                    lastmod=change.at,
                    type=media_type(change.key),
                    change=change.change,
                    datetime=change.at,
                )
            )
        finally:
            bitstream.close_unopened()

    def change_dump_document(self) -> bytes:
        packages = [p for _n, p in sorted(self.sealed.items()) if p is not None]
        document = change_dump(
            packages,
            [self.changedump_package_url(p.index) for p in packages],
            from_=self.inventory.started,
            up=self.site.capabilitylist_url,
            manifest_locs=[self.changedump_package_url(p.index, True) for p in packages],
        )
        return serialize(document)

    # -- notifications ---------------------------------------------------------------------

    def notification(self, n: int) -> bytes:
        """The ``changedump-notification`` announcing sealed package ``n``."""
        package = self.sealed[n]
        assert package is not None
        [entry] = change_dump(
            [package],
            [self.changedump_package_url(n)],
            from_=package.from_ or self.inventory.started,
            manifest_locs=[self.changedump_package_url(n, True)],
        ).entries
        # The root links declare the Source's dumps: the hub lists them in the topic's
        # Capability List, from which rshub sync --hub --topic baselines by Resource Dump.
        links = (
            Link(rel="up", href=self.site.capabilitylist_url),
            Link(rel="resourcedump", href=self.resourcedump_url),
            Link(rel="changedump", href=self.changedump_url),
        )
        return serialize(ChangeDumpNotification(links=links, entries=(entry,)))

    async def notify(self) -> None:
        """Announce each sealed package the hub has not stored yet; until cancelled."""
        publisher = self.publisher
        if publisher is None:
            return
        while True:
            self._wake.clear()  # before the look: a package sealed during it wakes the next
            for n in sorted(n for n, p in self.sealed.items() if p is not None):
                mark = self.directory / "changedump" / f"{n:08d}" / "notified"
                if await asyncio.to_thread(mark.exists):
                    continue
                key = f"rshub-source-{self.inventory.identity}-changedump-{n}"
                try:
                    await publisher.send_body(self.notification(n), idempotency_key=key)
                except PublisherError as exc:
                    # The changes themselves were pushed; a hub that refuses this kind of
                    # notification loses nothing a Destination needs.
                    log.error("the hub refused the changedump-notification of %d: %s", n, exc)
                    return
                await asyncio.to_thread(mark.touch)
                log.info("announced Change Dump package %d to %s", n, publisher.url)
            await self._wake.wait()

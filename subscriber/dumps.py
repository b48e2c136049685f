"""A baseline from a Resource Dump (Z39.99 Section 11): a few packages, not a GET per file.

When the Source's Capability List offers a Resource Dump, :func:`baseline_from_dump`
downloads each of its ZIP packages (streamed to a file in the mirror's state directory,
its ``length`` and ``hash`` checked as it arrives, bounded in size), hands it to
:func:`resourcesync.package_reader.unpack_package`, which checks every entry against the
package's manifest and refuses a hostile package with a :class:`resourcesync.PackageError`,
and then moves each verified bitstream to where the mirror keeps its URI
(:meth:`subscriber.mirror.Mirror.place`: by rename, so no reader sees half a file). The
result is the mirror the GET-per-resource baseline makes: the same files, the same pruning
of what the Source no longer has.

A package that fails any check stops the dump: the caller falls back to the Resource List
(one GET per resource), and what the dump already placed was verified, so it stays (the
fallback finds it unchanged by hash).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path

import aiohttp

from resourcesync import Entry, ResourceDump, ResourceDumpIndex
from resourcesync.digests import Digests
from resourcesync.package_reader import (
    DEFAULT_PACKAGE_LIMITS,
    PackageLimits,
    UnpackedPackage,
    unpack_package,
)
from rsclient.host_names import url_host_problem

from .exceptions import IntegrityError, SourceError
from .mirror import Mirror
from .poller import Poller

__all__ = ["baseline_from_dump", "download_package", "resource_dump_packages", "unpack_file"]

log = logging.getLogger(__name__)

#: Bytes read from a package download at a time.
_CHUNK = 64 * 1024


async def resource_dump_packages(
    poller: Poller, url: str
) -> AsyncIterator[tuple[Entry, datetime | None]]:
    """Each package entry of the Resource Dump at ``url`` (every dump of an index), with
    the dump's ``at``."""
    doc = await poller.document(url)
    if isinstance(doc, ResourceDumpIndex):
        for part in doc.entries:
            dump = await poller.document(part.loc)
            if not isinstance(dump, ResourceDump):
                raise SourceError(f"{part.loc}: not a Resource Dump")
            for entry in dump.entries:
                yield entry, dump.md.at or doc.md.at
    elif isinstance(doc, ResourceDump):
        for entry in doc.entries:
            yield entry, doc.md.at
    else:
        raise SourceError(f"{url}: not a Resource Dump")


async def download_package(
    session: aiohttp.ClientSession,
    entry: Entry,
    target: Path,
    *,
    max_bytes: int,
    timeout: float = 600.0,
) -> None:
    """GET the package ``entry`` names into ``target``, a chunk at a time, checking its
    ``length`` and ``hash`` (when the dump gives them) and ``max_bytes``.

    Raises:
        SourceError: the GET failed (a network error, a status other than 200).
        IntegrityError: more bytes than ``max_bytes`` or ``length``, or other bytes.
    """
    loc = entry.loc
    problem = url_host_problem(loc)
    if problem is not None:
        raise SourceError(f"{loc}: {problem}")
    md = entry.md
    length = None if md is None else md.length
    expected = None if md is None else md.hash
    try:
        digests = Digests.expecting(expected) if expected else Digests(())
    except ValueError as exc:
        raise IntegrityError(loc, f"the dump's hash: {exc}") from None
    limit = max_bytes if length is None else min(length, max_bytes)
    try:
        async with session.get(loc, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                raise SourceError(f"{loc}: HTTP {resp.status}", status=resp.status)
            out = await asyncio.to_thread(target.open, "wb")
            try:  # a 64 KiB write to a local file is short: on the loop
                async for chunk in resp.content.iter_chunked(_CHUNK):
                    digests.update(chunk)
                    if digests.length > limit:
                        what = "its length" if length is not None else "the package limit"
                        raise IntegrityError(loc, f"more than {limit} bytes ({what})")
                    out.write(chunk)
            finally:
                out.close()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise SourceError(f"{loc}: {exc or type(exc).__name__}") from None
    if length is not None and digests.length != length:
        raise IntegrityError(loc, f"{digests.length} bytes, the dump says {length}")
    mismatch = None if expected is None else digests.mismatch(expected)
    if mismatch is not None:
        raise IntegrityError(loc, mismatch.replace("the manifest", "the dump"))


def unpack_file(package: Path, target: Path, limits: PackageLimits) -> UnpackedPackage:
    """In a thread: :func:`unpack_package` of the downloaded package file ``package``."""
    with open(package, "rb") as stream:
        return unpack_package(stream, target, limits=limits)


async def baseline_from_dump(
    mirror: Mirror,
    poller: Poller,
    url: str,
    *,
    remember: Callable[[Entry], None] | None = None,
    prefixes: tuple[str, ...] = (),
    prune: bool = True,
    limits: PackageLimits = DEFAULT_PACKAGE_LIMITS,
) -> datetime | None:
    """Make the mirror equal to the Resource Dump at ``url``; return the dump's ``at``.

    ``remember(entry)`` is called for each manifest entry placed or found in place (the
    caller's position keeps what the baseline holds). ``prefixes``: only URIs under them.

    Raises:
        resourcesync.PackageError: a package refused by the reader.
        IntegrityError: a package whose bytes are not those the dump announced.
        SourceError: a document or package that cannot be fetched or is no Resource Dump.
    """
    at: datetime | None = None
    expected: set[Path] = set()
    work = Path(tempfile.mkdtemp(prefix="dump-", dir=_work_dir(mirror)))
    try:
        n = 0
        async for package, dump_at in resource_dump_packages(poller, url):
            at = at or dump_at
            n += 1
            zipped = work / f"{n}.zip"
            await download_package(
                mirror.session, package, zipped, max_bytes=limits.max_package_bytes
            )
            unpacked = await asyncio.to_thread(unpack_file, zipped, work / f"{n}", limits)
            zipped.unlink()
            placed = await asyncio.to_thread(_place, mirror, unpacked, prefixes)
            for entry, path in placed:
                expected.add(path)
                if remember is not None:
                    remember(entry)
            await asyncio.to_thread(shutil.rmtree, work / f"{n}", True)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    if prune:
        mirror.prune(expected)
    return at


def _place(
    mirror: Mirror, unpacked: UnpackedPackage, prefixes: tuple[str, ...]
) -> list[tuple[Entry, Path]]:
    """In a thread: each bitstream of ``unpacked`` (under ``prefixes``) moved into the
    mirror (:meth:`Mirror.place`), with where it now is."""
    placed = []
    for bitstream in unpacked.bitstreams:
        entry = bitstream.entry
        if bitstream.file is None or (prefixes and not entry.loc.startswith(prefixes)):
            continue
        path = mirror.place(entry, bitstream.file)
        if path is not None:
            placed.append((entry, path))
    return placed


def _work_dir(mirror: Mirror) -> Path:
    """Packages are unpacked inside the mirror's own state directory: the same file
    system as the mirror, so a verified bitstream is moved into place by a rename."""
    mirror.state_dir.mkdir(parents=True, exist_ok=True)
    return mirror.state_dir

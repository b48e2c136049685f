"""Catching up from a Change Dump (Z39.99 Section 13) after a gap: packages, not a GET per
changed resource.

When the hub lost changes a mirror had not applied (it trimmed them, or its Change List no
longer lists them), ``rshub sync`` needs every change since its position. A Source that
offers a Change Dump has them in packages, one per period (``from``, ``until``): when the
packages it lists cover the whole missing period, :func:`catch_up_from_change_dump`
downloads each (streamed, its ``length`` and ``hash`` checked:
:func:`subscriber.dumps.download_package`), unpacks it with
:func:`resourcesync.package_reader.unpack_package` (which refuses a hostile package and
checks every bitstream against the package's manifest) and applies its changes in order:
a creation or update moves the verified bitstream into the mirror
(:meth:`subscriber.mirror.Mirror.place`, by rename), a deletion removes the file.

Coverage is judged on the Source's clock against the hub's: the packages must run without
a hole from before the position's watermark (``since``) to at least the instant the hub
received the last change it lost (``through``), each side widened by the clock skew the
caller tolerates; otherwise :class:`ChangeDumpShort` is raised before anything is fetched.
Any failure leaves the caller to re-baseline as without a Change Dump: what was applied
before it was verified, and the re-baseline finds it in place by hash.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from resourcesync import Change, ChangeDump, ChangeDumpIndex, Entry, PackageError, format_datetime
from resourcesync.package_reader import DEFAULT_PACKAGE_LIMITS, PackageLimits, UnpackedPackage

from .dumps import download_package, unpack_file
from .events import Gap, event_order
from .exceptions import IntegrityError, SourceError
from .mirror import Mirror
from .poller import Poller
from .position import EventCursor

__all__ = [
    "CaughtUp",
    "ChangeDumpShort",
    "catch_up_after_gap",
    "catch_up_from_change_dump",
    "covering_packages",
]


class ChangeDumpShort(SourceError):
    """The Change Dump's packages do not cover every change the mirror lacks."""


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """What a catch-up from a Change Dump did: packages applied and their bytes, and the
    ``until`` of the last (the mirror holds every change before it)."""

    packages: int
    bytes: int
    until: datetime


async def change_dump_packages(poller: Poller, url: str) -> list[Entry]:
    """Each package entry of the Change Dump at ``url`` (every dump of an index)."""
    doc = await poller.document(url)
    if isinstance(doc, ChangeDumpIndex):
        entries: list[Entry] = []
        for part in doc.entries:
            dump = await poller.document(part.loc)
            if not isinstance(dump, ChangeDump):
                raise SourceError(f"{part.loc}: not a Change Dump")
            entries.extend(dump.entries)
        return entries
    if isinstance(doc, ChangeDump):
        return list(doc.entries)
    raise SourceError(f"{url}: not a Change Dump")


def covering_packages(packages: list[Entry], since: datetime, through: datetime) -> list[Entry]:
    """The packages holding every change after ``since`` up to ``through``, in time order.

    Raises:
        ChangeDumpShort: a package without ``from``/``until``, or none starting by
            ``since``, a hole between two, or the last ending before ``through``.
    """
    spans: list[tuple[datetime, datetime, Entry]] = []
    for entry in packages:
        md = entry.md
        if md is None or md.from_ is None or md.until is None:
            raise ChangeDumpShort(f"{entry.loc}: a package without from and until")
        if md.until > since:
            spans.append((md.from_, md.until, entry))
    spans.sort(key=lambda span: (span[0], span[1]))
    if not spans or spans[0][0] > since:
        raise ChangeDumpShort(f"no package holds the changes after {since.isoformat()}")
    reached = spans[0][0]
    for start, until, entry in spans:
        if start > reached:
            raise ChangeDumpShort(f"no package holds the changes before {entry.loc}")
        reached = max(reached, until)
    if reached < through:
        raise ChangeDumpShort(
            f"its packages end at {reached.isoformat()}, before the changes lost through "
            f"{through.isoformat()}"
        )
    return [entry for _start, _until, entry in spans]


async def catch_up_from_change_dump(
    mirror: Mirror,
    poller: Poller,
    url: str,
    *,
    since: datetime,
    through: datetime,
    remember: Callable[[Entry], None] | None = None,
    prefixes: tuple[str, ...] = (),
    limits: PackageLimits = DEFAULT_PACKAGE_LIMITS,
) -> CaughtUp:
    """Apply to the mirror every change the Change Dump at ``url`` holds after ``since``,
    when its packages reach ``through`` (:func:`covering_packages`).

    ``remember(entry)``: each created or updated manifest entry applied (the caller's
    position then knows that change is held). ``prefixes``: only URIs under them.

    Raises:
        ChangeDumpShort: the packages do not cover the period.
        resourcesync.PackageError: a package refused by the reader.
        IntegrityError: a package whose bytes are not those the dump announced.
        SourceError: a document or package that cannot be fetched or is no Change Dump.
    """
    chosen = covering_packages(await change_dump_packages(poller, url), since, through)
    size = 0
    work = Path(tempfile.mkdtemp(prefix="changedump-", dir=_state_dir(mirror)))
    try:
        for n, package in enumerate(chosen):
            zipped = work / f"{n}.zip"
            await download_package(
                mirror.session, package, zipped, max_bytes=limits.max_package_bytes
            )
            size += zipped.stat().st_size
            unpacked = await asyncio.to_thread(unpack_file, zipped, work / f"{n}", limits)
            zipped.unlink()
            applied = await asyncio.to_thread(_apply, mirror, unpacked, prefixes)
            if remember is not None:
                for entry in applied:
                    remember(entry)
            await asyncio.to_thread(shutil.rmtree, work / f"{n}", True)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    last = chosen[-1].md
    assert last is not None and last.until is not None  # covering_packages checked
    return CaughtUp(packages=len(chosen), bytes=size, until=last.until)


def _apply(mirror: Mirror, unpacked: UnpackedPackage, prefixes: tuple[str, ...]) -> list[Entry]:
    """In a thread: each change of ``unpacked`` (under ``prefixes``), in manifest order;
    the created and updated entries placed."""
    placed = []
    for bitstream in unpacked.bitstreams:
        entry = bitstream.entry
        if prefixes and not entry.loc.startswith(prefixes):
            continue
        if entry.change is Change.DELETED:
            mirror.delete(entry.loc)
        elif bitstream.file is not None and mirror.place(entry, bitstream.file) is not None:
            mirror.dumped.add(entry.loc)
            placed.append(entry)
    return placed


def _state_dir(mirror: Mirror) -> Path:
    """Packages are unpacked in the mirror's state directory: the mirror's file system,
    so a verified bitstream is moved into place by a rename."""
    mirror.state_dir.mkdir(parents=True, exist_ok=True)
    return mirror.state_dir


async def catch_up_after_gap(
    mirror: Mirror,
    poller: Poller,
    position: EventCursor,
    gap: Gap,
    *,
    skew: timedelta,
    prefixes: tuple[str, ...] = (),
    report: Callable[[str], None],
) -> bool:
    """After ``gap``, the changes the mirror lacks from the Source's Change Dump, if its
    Capability List offers one whose packages cover them: whether it did (said either way
    when there is one; False leaves the caller to re-baseline).

    The period is from the position's watermark less ``skew`` to the instant the hub
    received the last change it lost (its event id) plus ``skew``: the Source's clock is
    not the hub's.
    """
    lost = event_order(gap.trimmed_through)
    if lost is None or position.watermark is None:
        return False
    try:
        found = await poller.discover()
    except SourceError:
        return False
    if not found.changedumps:
        return False
    through = datetime.fromtimestamp(lost[0] / 1000, UTC) + skew

    def remember(entry: Entry) -> None:  # a change applied need not be fetched again
        when = entry.lastmod or (entry.md.datetime if entry.md else None)
        if when is not None:
            position.remember(entry.loc, format_datetime(when))

    try:
        done = await catch_up_from_change_dump(
            mirror,
            poller,
            found.changedumps[0],
            since=position.watermark - skew,
            through=through,
            remember=remember,
            prefixes=prefixes,
        )
    except (PackageError, IntegrityError, SourceError) as exc:
        report(f"the Change Dump failed ({exc}); re-baselining instead")
        return False
    report(
        f"caught up from the Change Dump: {done.packages} packages, {done.bytes} bytes, "
        f"through {format_datetime(done.until)}"
    )
    return True

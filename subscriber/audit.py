"""Comparing a mirror with a Resource List (``rshub sync --audit``), and repairing it.

An audit never calls a file the same without knowing. Each file the list names is checked
by the strongest means its entry allows, and counted under it:

- by hash, when the entry gives one in a known algorithm (``md5``, ``sha-1``, ``sha-256``;
  :mod:`subscriber.integrity`);
- by length, when the entry gives a length and the file's differs. A length that agrees
  proves nothing (other bytes of the same length), so the file is then checked
- by content: a GET of the resource, compared byte for byte with the file. (A conditional
  GET's validators would say whether the Source changed since the mirror fetched it, not
  whether the mirror's copy is still what it fetched.)

A file whose GET fails (or that cannot be read) is *unchecked*: listed with the reason,
counted "not at all", and the audit fails, since it cannot vouch for it. A GET answered
404 or 410 makes the file different: the Source no longer has it.

:func:`repair` fetches what is missing or different (checked against the entry's hash and
length as any fetch is), removes what is extra, and says each thing it did.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from resourcesync import Entry

from .exceptions import UnsafePathError
from .integrity import digests, matches
from .mirror import Mirror

__all__ = ["AuditReport", "RepairReport", "audit", "repair"]


@dataclass
class AuditReport:
    """What differs between a mirror and a Resource List, and how each file was checked."""

    missing: list[str] = field(default_factory=list)
    #: Paths relative to the mirror directory.
    extra: list[str] = field(default_factory=list)
    #: ``URI: why``.
    different: list[str] = field(default_factory=list)
    #: ``URI: why`` for the files no check could reach.
    unchecked: list[str] = field(default_factory=list)
    by_hash: int = 0
    by_length: int = 0
    by_content: int = 0
    #: The entries of the missing (True) and different (False) resources, for a repair.
    wanted: dict[str, tuple[Entry, bool]] = field(default_factory=dict)

    @property
    def differences(self) -> int:
        return len(self.missing) + len(self.extra) + len(self.different)

    @property
    def ok(self) -> bool:
        """Nothing differs, and every file was checked."""
        return not (self.differences or self.unchecked)

    def lines(self) -> list[str]:
        return (
            [f"missing {u}" for u in self.missing]
            + [f"extra {p}" for p in self.extra]
            + [f"different {d}" for d in self.different]
            + [f"unchecked {u}" for u in self.unchecked]
        )

    def summary(self) -> str:
        return (
            f"{len(self.missing)} missing, {len(self.extra)} extra, "
            f"{len(self.different)} different; checked {self.by_hash} by hash, "
            f"{self.by_length} by length, {self.by_content} by content, "
            f"{len(self.unchecked)} not at all"
        )


@dataclass
class RepairReport:
    """What a repair did, each as a line: ``rewrote URI``, ``fetched URI``, ``removed PATH``."""

    rewrote: list[str] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return (
            [f"rewrote {u}" for u in sorted(self.rewrote)]
            + [f"fetched {u}" for u in sorted(self.fetched)]
            + [f"removed {p}" for p in sorted(self.removed)]
        )

    def summary(self) -> str:
        return (
            f"rewrote {len(self.rewrote)}, fetched {len(self.fetched)}, removed {len(self.removed)}"
        )


async def audit(
    mirror: Mirror, entries: AsyncIterator[tuple[Entry, datetime | None]]
) -> AuditReport:
    """Compare ``mirror`` with a Resource List's ``entries`` (GETs within its limit)."""
    report = AuditReport()
    expected: set[Path] = set()
    held: list[tuple[Entry, Path]] = []
    async for entry, _ in entries:
        try:
            path = mirror.path_of(entry.loc)
        except UnsafePathError as exc:
            report.missing.append(f"{entry.loc} ({exc})")
            continue
        expected.add(path)
        if path.is_file():
            held.append((entry, path))
        else:
            report.missing.append(entry.loc)
            report.wanted[entry.loc] = (entry, True)
    await asyncio.gather(*(mirror.limited(partial(_check, mirror, report, e, p)) for e, p in held))
    report.extra = sorted(str(p.relative_to(mirror.root)) for p in mirror.local_files() - expected)
    for names in (report.missing, report.different, report.unchecked):
        names.sort()
    return report


async def _check(mirror: Mirror, report: AuditReport, entry: Entry, path: Path) -> None:
    md = entry.md
    length, hash = (md.length, md.hash) if md is not None else (None, None)
    loc = entry.loc
    ours: bytes | str = ""
    if hash and any(True for _ in digests(hash)):
        ours = _read(path)
        if isinstance(ours, str):
            report.unchecked.append(f"{loc}: {ours}")
            return
        report.by_hash += 1
        problem = matches(ours, length=length, hash=hash)
        if problem is not None:
            _differs(report, entry, problem)
        return
    size = _size(path)
    if length is not None and size is not None and size != length:
        report.by_length += 1
        _differs(report, entry, f"length {size} != announced {length}")
        return
    got = await mirror.download(loc)
    if got.gone is not None:
        report.by_content += 1
        _differs(report, entry, f"gone at the Source (HTTP {got.gone})")
        return
    if got.data is None:
        report.unchecked.append(f"{loc}: {got.error}")
        return
    ours = _read(path)
    if isinstance(ours, str):
        report.unchecked.append(f"{loc}: {ours}")
        return
    report.by_content += 1
    if ours != got.data:
        held, theirs = len(ours), len(got.data)
        _differs(report, entry, f"the Source's bytes differ ({held} bytes held, {theirs} there)")


def _read(path: Path) -> bytes | str:
    """The file's bytes, or why it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None  # said when its content is read


def _differs(report: AuditReport, entry: Entry, why: str) -> None:
    report.different.append(f"{entry.loc}: {why}")
    report.wanted[entry.loc] = (entry, False)


async def repair(mirror: Mirror, report: AuditReport) -> RepairReport:
    """Fetch what ``report`` found missing or different; remove what it found extra.

    A fetch is checked like any other (bytes that do not match the entry's hash or length
    are rejected and reported by the mirror); a resource gone at the Source is removed.
    """
    done = RepairReport()

    async def one(entry: Entry, missing: bool) -> None:
        md = entry.md
        length, hash = (md.length, md.hash) if md is not None else (None, None)
        try:
            path = mirror.path_of(entry.loc)
        except UnsafePathError:
            return  # reported as missing, with the reason: nothing to write there
        outcome = await mirror.fetch(entry.loc, path, length=length, hash=hash)
        if outcome == "written":
            (done.fetched if missing else done.rewrote).append(entry.loc)
        elif outcome == "gone" and not missing:
            done.removed.append(f"{path.relative_to(mirror.root)} (gone at the Source)")

    await asyncio.gather(*(mirror.limited(partial(one, e, m)) for e, m in report.wanted.values()))
    for relative in report.extra:
        if mirror.remove(mirror.root / relative):
            done.removed.append(relative)
    return done

"""A local directory that mirrors a set of resources: baseline, incremental, audit.

Files live where :mod:`subscriber.paths` maps their URIs. Writes are atomic
(:func:`rsclient.statefile.write_atomically`): bytes go to a temporary file next to the
target (``.rshub-tmp-*``) and are renamed over it, so a reader never sees half a resource.
They are not fsynced, unlike the position: a sync per file would bound throughput; after
a power cut, an audit finds what was lost.

Bytes that do not match the ``length`` or ``hash`` announced for them are *rejected*:
reported, not written, and the previous copy is kept. (When they equal the copy already
held, the announcement is merely stale, e.g. a Change List entry re-read after a later
change was applied, and nothing is reported.)

Changes of one batch are collapsed per URI (the last one wins: a fetch always gets the
current bytes) and applied with at most ``concurrency`` requests in flight.

A ``token`` (:class:`~rsclient.hub_token.HubToken`) goes with the GET of a resource only
when the resource is on the hub itself; a Source's resources are fetched without it.
The audit and its repair are in :mod:`subscriber.audit`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

import aiohttp
from tqdm import tqdm

from resourcesync import Entry
from rsclient.backoff import Backoff, Retrier, parse_retry_after
from rsclient.host_names import url_host_problem
from rsclient.hub_token import HubToken
from rsclient.statefile import write_atomically

from .events import ChangeEvent
from .exceptions import UnsafePathError
from .integrity import digests, matches
from .paths import RESERVED_PREFIX, uri_to_path
from .retries import FailedFetches

__all__ = ["Download", "Mirror", "Outcome", "Stats"]

log = logging.getLogger(__name__)

_TMP = RESERVED_PREFIX + "-tmp-"
#: Between the quick retries of one fetch: 0.2 s, doubling, equal jitter; a Source's
#: ``Retry-After`` (429, 503) is honoured up to the cap.
_FETCH_BACKOFF = Backoff(base=0.2, cap=5.0)


@dataclass
class Stats:
    fetched: int = 0
    unchanged: int = 0
    deleted: int = 0
    #: Announced as created/updated but 404/410 at the Source: removed locally.
    gone: int = 0
    #: Bytes that did not match the announced length/hash, or unsafe URIs.
    rejected: int = 0
    #: Fetches that failed (network, HTTP errors) after retries.
    failed: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"fetched {self.fetched}, unchanged {self.unchanged}, deleted {self.deleted}, "
            f"gone {self.gone}, rejected {self.rejected}, failed {self.failed}"
        )


@dataclass(frozen=True, slots=True)
class Download:
    """One GET of a resource, after its quick retries: its bytes, or why there are none."""

    #: The body of a 200.
    data: bytes | None = None
    #: 404 or 410: the Source no longer has it.
    gone: int | None = None
    #: Why it failed otherwise (a network error, another status, a host no lookup takes).
    error: str = ""


#: What :meth:`Mirror.fetch` did: wrote the file; removed it (gone at the Source); kept it
#: (the bytes it holds came again); refused the bytes; could not fetch them.
Outcome = Literal["written", "gone", "held", "rejected", "failed"]


class Mirror:
    def __init__(
        self,
        root: str | os.PathLike[str],
        session: aiohttp.ClientSession,
        *,
        concurrency: int = 16,
        retries: int = 2,
        timeout: float = 60.0,
        report: Callable[[str], None] | None = None,
        token: HubToken | None = None,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.session = session
        self.retries = retries
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.stats = Stats()
        self._limit = asyncio.Semaphore(concurrency)
        self._report = report
        self.token = token
        #: Fetches that failed, to retry (:meth:`retry_failed`); kept with the position.
        self.failed = FailedFetches()
        self._said_failed: set[str] = set()
        #: URIs placed from a Change Dump's package (:mod:`subscriber.change_dumps`) and not
        #: announced since: their next announcement is not fetched when the file already
        #: has the bytes it names (any later change comes with an announcement of its own).
        self.dumped: set[str] = set()

    @property
    def state_dir(self) -> Path:
        """Where rshub keeps its own files (the position); never mirrored into."""
        return self.root / RESERVED_PREFIX

    def path_of(self, uri: str) -> Path:
        return uri_to_path(self.root, uri)

    def _problem(self, text: str) -> None:
        self.stats.problems.append(text)
        if self._report is not None:  # the caller says it (once), else the log does
            self._report(text)
        else:
            log.warning("%s", text)

    async def apply(self, batch: Iterable[ChangeEvent]) -> None:
        """Apply changes: fetch created/updated, remove deleted (a replayed deletion
        only when the Source no longer has the resource)."""
        latest: dict[str, ChangeEvent] = {}
        for event in batch:
            latest.pop(event.loc, None)
            latest[event.loc] = event
        await asyncio.gather(*(self.limited(partial(self._apply_one, e)) for e in latest.values()))

    async def limited(self, work: Callable[[], Awaitable[object]]) -> None:
        """Run ``work()`` within the mirror's limit of requests in flight."""
        # The coroutine is made once a slot is free: one made earlier and cancelled while
        # waiting (Ctrl-C) would be "never awaited".
        async with self._limit:
            await work()

    async def _apply_one(self, event: ChangeEvent) -> None:
        try:
            path = self.path_of(event.loc)
        except UnsafePathError as exc:
            self.stats.rejected += 1
            self._problem(f"rejected {exc}")
            return
        dumped = event.loc in self.dumped
        self.dumped.discard(event.loc)
        if event.change == "deleted" and not event.replayed:
            if self.remove(path):
                self.stats.deleted += 1
            return
        if event.change == "deleted":
            # A replayed deletion may be older than a creation the position no longer
            # remembers: the Source says whether the resource is gone (404/410 removes it).
            await self.fetch(event.loc, path, length=None, hash=None)
            return
        if dumped and _strong(event.hash) and _same(path, event.length, event.hash):
            self.stats.unchanged += 1
            return
        await self.fetch(event.loc, path, length=event.length, hash=event.hash)

    async def download(self, loc: str) -> Download:
        """GET ``loc``, retrying a network error, 429 or 5xx at once twice (jittered)."""
        problem = url_host_problem(loc)
        if problem is not None:  # no lookup can take its host: failed at once, not retried
            return Download(error=problem)
        error = ""
        headers = self.token.headers(loc) if self.token is not None else {}
        retry = Retrier(_FETCH_BACKOFF, attempts=self.retries + 1)
        async for _ in retry:
            asked = None
            try:
                async with self.session.get(loc, headers=headers, timeout=self.timeout) as resp:
                    if resp.status in (404, 410):
                        return Download(gone=resp.status)
                    if resp.status == 200:
                        return Download(data=await resp.read())
                    error = f"HTTP {resp.status}"
                    if resp.status < 500 and resp.status != 429:
                        break
                    asked = parse_retry_after(resp.headers.get("Retry-After"))
            # UnicodeError: a redirect to a host no lookup can take (the resolver's IDNA step).
            except (aiohttp.ClientError, OSError, TimeoutError, UnicodeError) as exc:
                error = str(exc) or type(exc).__name__
            retry.failed(asked)  # no wait after the last attempt
        return Download(error=error)

    async def fetch(self, loc: str, path: Path, *, length: int | None, hash: str | None) -> Outcome:
        """Fetch ``loc`` into ``path`` if its bytes match ``length`` and ``hash``."""
        got = await self.download(loc)
        if got.gone is not None:
            self.remove(path)
            self.stats.gone += 1
            self.failed.succeeded(loc)
            self._said_failed.discard(loc)
            return "gone"
        if got.data is None:
            self._fetch_failed(loc, length, hash, got.error)
            return "failed"
        data = got.data
        self.failed.succeeded(loc)
        self._said_failed.discard(loc)
        problem = matches(data, length=length, hash=hash)
        if problem is not None and _holds(path, data):
            # A stale announcement (the resource changed again since) for bytes we
            # already have: nothing to accept or reject.
            self.stats.unchanged += 1
            return "held"
        if problem is not None:
            self.stats.rejected += 1
            self._problem(f"rejected {loc}: {problem}")
            return "rejected"
        try:
            self._write(path, data)
        except OSError as exc:
            self.stats.failed += 1
            self._problem(f"failed {loc}: cannot write {path}: {exc}")
            return "failed"
        self.stats.fetched += 1
        return "written"

    def _fetch_failed(self, loc: str, length: int | None, hash: str | None, error: str) -> None:
        self.stats.failed += 1
        self.failed.failed(loc, length, hash)
        if loc in self._said_failed:  # said once this run: its retries are quiet
            self.stats.problems.append(f"failed {loc}: {error}")
            log.info("failed again %s: %s", loc, error)
        else:
            self._said_failed.add(loc)
            self._problem(f"failed {loc}: {error}")

    async def retry_failed(self, *, all: bool = False) -> int:
        """Fetch again the failed resources that are due (``all``: every one); return how
        many are still failing."""
        due = self.failed.items if all else self.failed.due()
        jobs = []
        for loc, failed in list(due.items()):
            try:
                path = self.path_of(loc)
            except UnsafePathError:
                self.failed.succeeded(loc)
                continue
            jobs.append(
                self.limited(partial(self.fetch, loc, path, length=failed.length, hash=failed.hash))
            )
        await asyncio.gather(*jobs)
        return len(self.failed)

    def _write(self, path: Path, data: bytes) -> None:
        write_atomically(path, data, temp_prefix=f"{_TMP}{path.name[:64]}-", durable=False)

    def remove(self, path: Path) -> bool:
        """Remove the file at ``path`` and the directories it leaves empty."""
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except IsADirectoryError:
            return False
        parent = path.parent
        while parent != self.root and self.root in parent.parents:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent
        return True

    def delete(self, loc: str) -> None:
        """Remove the file that mirrors ``loc`` (a deletion in a Change Dump's package)."""
        try:
            path = self.path_of(loc)
        except UnsafePathError as exc:
            self.stats.rejected += 1
            self._problem(f"rejected {exc}")
            return
        if self.remove(path):
            self.stats.deleted += 1

    def local_files(self) -> set[Path]:
        """Every mirrored file (rshub's own files and temporary files left out)."""
        found = set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not d.startswith(RESERVED_PREFIX)]
            for name in filenames:
                if not name.startswith(RESERVED_PREFIX):
                    found.add(Path(dirpath, name))
        return found

    async def baseline(
        self,
        entries: AsyncIterator[tuple[Entry, datetime | None]],
        *,
        progress: tqdm[Any] | None = None,
        prune: bool = True,
    ) -> datetime | None:
        """Make the mirror equal to a Resource List; return the list's ``at``.

        Local files that already match (by hash, else by length) are kept; files the list
        does not name are removed when ``prune``.
        """
        items: list[Entry] = []
        at: datetime | None = None
        async for entry, entry_at in entries:
            items.append(entry)
            at = at or entry_at
        if progress is not None:
            progress.reset(total=len(items))
        expected: set[Path] = set()

        async def one(entry: Entry) -> None:
            try:
                path = self.path_of(entry.loc)
            except UnsafePathError as exc:
                self.stats.rejected += 1
                self._problem(f"rejected {exc}")
                return
            expected.add(path)
            md = entry.md
            length, hash = (md.length, md.hash) if md is not None else (None, None)
            if _same(path, length, hash):
                self.stats.unchanged += 1
            else:
                await self.fetch(entry.loc, path, length=length, hash=hash)
            if progress is not None:
                progress.update(1)

        await asyncio.gather(*(self.limited(partial(one, e)) for e in items))
        if progress is not None:
            progress.close()
        if prune:
            self.prune(expected)
        return at

    def prune(self, expected: set[Path]) -> None:
        """Remove every mirrored file but ``expected`` (what a baseline found listed)."""
        for path in self.local_files() - expected:
            if self.remove(path):
                self.stats.deleted += 1

    def place(self, entry: Entry, staged: Path) -> Path | None:
        """Move ``staged``, bytes already checked against ``entry``'s ``length`` and
        ``hash`` (a Resource Dump's package, :mod:`subscriber.dumps`), to where the mirror
        keeps ``entry.loc``, by rename (it must be on the mirror's file system); a copy
        that already matches is kept. The path, or None when there is none (said)."""
        try:
            path = self.path_of(entry.loc)
        except UnsafePathError as exc:
            self.stats.rejected += 1
            self._problem(f"rejected {exc}")
            return None
        md = entry.md
        length, hash = (md.length, md.hash) if md is not None else (None, None)
        if _same(path, length, hash):
            self.stats.unchanged += 1
            return path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, path)
        except OSError as exc:
            self.stats.failed += 1
            self._problem(f"failed {entry.loc}: cannot write {path}: {exc}")
            return None
        self.stats.fetched += 1
        return path


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _strong(hash: str | None) -> bool:
    """Whether ``hash`` names a digest in an algorithm this subscriber computes."""
    return bool(hash) and any(True for _ in digests(hash or ""))


def _same(path: Path, length: int | None, hash: str | None) -> bool:
    """Whether the file at ``path`` matches ``length`` and ``hash`` (a hash in no known
    algorithm compares nothing: with no length either, the file is fetched again)."""
    if length is None and not _strong(hash):
        return False
    try:
        if length is not None and path.stat().st_size != length:
            return False
        return not hash or matches(path.read_bytes(), length=None, hash=hash) is None
    except OSError:
        return False

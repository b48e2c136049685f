"""``rshub sync`` catches up from the Source's Change Dump after a gap: the hub trimmed the
changes the mirror lacks, and the Source's sealed packages hold them.

Real parts: an in-process hub (retention: the last 12 events of a topic) on the session's
Redis, ``rshub source``'s parts with dumps in this process (publishing to the hub, sealing a
Change Dump package per closed Change List page of 10 changes), ``rshub sync --once`` as a
child process. Between two runs of it, two bursts of 10 changes (creations, updates,
deletions) close two pages; the hub keeps only the second burst, so the second run finds the
first one no longer listed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import random
import re
import uuid
import zipfile
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from resourcesync import Entry, Metadata
from source.dumps import Dumps
from subscriber.change_dumps import ChangeDumpShort, covering_packages
from tests.commands import Command
from tests.conftest import Hub
from tests.publisher.helpers import stored_events
from tests.source.support import InProcessSource, in_process_source, tree
from tests.support import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"retention_max_events": 12, "retention_hold_max_events": 0}


def _burst_a(root: Path) -> list[str]:
    for i in range(4):
        (root / f"f{i:02d}.txt").write_bytes(f"updated {i}\n".encode() * 50)
        (root / f"n{i:02d}.txt").write_bytes(f"new {i}\n".encode() * 50)
    (root / "f08.txt").unlink()
    (root / "f09.txt").unlink()
    return [*(f"f{i:02d}.txt" for i in (0, 1, 2, 3, 8, 9)), *(f"n{i:02d}.txt" for i in range(4))]


def _burst_b(root: Path) -> list[str]:
    for i in range(4, 8):
        (root / f"f{i:02d}.txt").write_bytes(f"changed {i}\n".encode() * 70)
    for i in range(4):
        (root / f"m{i:02d}.txt").write_bytes(f"more {i}\n".encode() * 70)
    (root / "n00.txt").unlink()
    (root / "f00.txt").unlink()
    return [
        *(f"f{i:02d}.txt" for i in (0, 4, 5, 6, 7)),
        "n00.txt",
        *(f"m{i:02d}.txt" for i in range(4)),
    ]


class _Setup:
    def __init__(self, hub: Hub, redis_url: str, tmp_path: Path) -> None:
        self.hub, self.redis_url = hub, redis_url
        self.topic = f"cdgap-{uuid.uuid4().hex[:8]}"
        self.root, self.dest = tmp_path / "dir", tmp_path / "mirror"
        self.state, self.dumps_dir = tmp_path / "state.json", tmp_path / "dumps"
        self.root.mkdir()
        for i in range(10):
            (self.root / f"f{i:02d}.txt").write_bytes(f"file {i}\n".encode() * 40)

    def source(self) -> Any:
        options = {"directory": self.dumps_dir, "max_bytes": 8000, "min_age": 0.0}
        return in_process_source(
            self.root,
            self.state,
            hub=self.hub.url,
            topic=self.topic,
            changelist_entries=10,
            dumps=options,
        )

    async def stored(self, source: InProcessSource, names: list[str], package: int) -> None:
        """Wait until the hub stored a change of each of ``names`` and the announcement of
        Change Dump package ``package``."""
        base = f"{source.url}/files/"
        wanted = {base + n for n in names} | {f"{source.url}/changedump/{package:08d}.zip"}

        async def there() -> bool:
            return wanted <= {e["loc"] for e in await stored_events(self.redis_url, self.topic)}

        await wait_for(there, timeout=30)

    async def sync(self) -> Command:
        # --overlap 0: the Source's clock is the hub's, and the bursts are a moment apart.
        args = ("--dest", str(self.dest), "--once", "--overlap", "0", "--no-progress")
        cmd = await Command("sync", "--hub", self.hub.url, "--topic", self.topic, *args).start()
        assert await cmd.wait(60) == 0, cmd.stderr
        return cmd

    def mirrored(self, source: InProcessSource) -> dict[str, bytes]:
        return tree(self.dest / "http" / f"127.0.0.1_{source.port}" / "files")


@pytest.fixture
async def setup(hub: Hub, redis_url: str, tmp_path: Path) -> AsyncIterator[_Setup]:
    yield _Setup(hub, redis_url, tmp_path)


async def _behind(setup: _Setup, source: InProcessSource) -> list[str]:
    """A baseline, then two bursts the hub keeps only the second of: the names changed."""
    await setup.stored(source, [f"f{i:02d}.txt" for i in range(10)], 0)
    first = await setup.sync()
    assert "baseline:" in first.stderr, first.stderr
    assert setup.mirrored(source) == tree(setup.root)
    changed = _burst_a(setup.root)
    await setup.stored(source, changed, 1)
    later = _burst_b(setup.root)
    await setup.stored(source, later, 2)
    return sorted({*changed, *later})


async def test_sync_catches_up_from_the_change_dump_after_a_gap(setup: _Setup) -> None:
    async with setup.source() as source:
        changed = await _behind(setup, source)
        files, packages = source.runtime.files_served, source.runtime.packages_served
        cmd = await setup.sync()
        gets = source.runtime.files_served - files
        print(f"\n{len(changed)} resources changed; catch-up: {gets} file GETs, "
              f"{source.runtime.packages_served - packages} packages; {cmd.stderr}")  # fmt: skip
        assert "caught up from the Change Dump: 2 packages" in cmd.stderr, cmd.stderr
        assert "re-baseline" not in cmd.stderr, cmd.stderr
        assert setup.mirrored(source) == tree(setup.root)
        # The changes the hub still lists were placed from the packages: not fetched again.
        assert gets == 0 < len(changed)
        assert source.runtime.packages_served - packages == 2


def _lie_in_bytes(dumps: Dumps, n: int) -> None:
    """Package ``n`` keeps its length, not the bytes the Change Dump's hash names."""
    package = dumps.changedump_file(n, manifest=False)
    assert package is not None
    data = bytearray(package.read_bytes())
    data[len(data) // 2] ^= 0xFF
    package.write_bytes(bytes(data))


def _lie_in_manifest(dumps: Dumps, n: int) -> None:
    """Package ``n`` holds a bitstream other than its manifest says (same length), and the
    Change Dump gives the new package's own length and hash: only the manifest lies."""
    package = dumps.changedump_file(n, manifest=False)
    assert package is not None
    with zipfile.ZipFile(package) as old:
        members = [(info.filename, old.read(info)) for info in old.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as new:
        lied = False
        for name, data in members:
            if not lied and name != "manifest.xml" and data:
                data, lied = bytes([data[0] ^ 0x01]) + data[1:], True
            new.writestr(name, data)
    assert lied
    body = out.getvalue()
    package.write_bytes(body)
    digest = f"md5:{hashlib.md5(body).hexdigest()} sha-256:{hashlib.sha256(body).hexdigest()}"
    written = dumps.sealed[n]
    assert written is not None
    dumps.sealed[n] = dataclasses.replace(written, length=len(body), hash=digest)


@pytest.mark.parametrize(
    ("lie", "said"),
    [(_lie_in_bytes, "the dump says"), (_lie_in_manifest, "manifest.hash")],
    ids=["bytes", "manifest"],
)
async def test_a_lying_change_dump_package_falls_back_to_the_rebaseline(
    setup: _Setup, lie: Callable[[Dumps, int], None], said: str
) -> None:
    async with setup.source() as source:
        await _behind(setup, source)
        dumps = source.runtime.dumps
        assert isinstance(dumps, Dumps)
        lie(dumps, 2)
        files, packages = source.runtime.files_served, source.runtime.packages_served
        cmd = await setup.sync()
        assert "the Change Dump failed" in cmd.stderr and said in cmd.stderr, cmd.stderr
        assert "re-baseline:" in cmd.stderr, cmd.stderr
        assert setup.mirrored(source) == tree(setup.root)
        print(f"\nfallback: {source.runtime.files_served - files} file GETs, "
              f"{source.runtime.packages_served - packages} packages; {cmd.stderr}")  # fmt: skip


# -- which packages cover a gap: the Source's Change Dump document decides -------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _package(n: int, start: int | None, until: int | None) -> Entry:
    md: dict[str, Any] = {"change": None}
    if start is not None:
        md["from"] = T0 + timedelta(seconds=start)
    if until is not None:
        md["until"] = T0 + timedelta(seconds=until)
    del md["change"]
    return Entry(loc=f"http://source.invalid/p{n}.zip", md=Metadata.model_validate(md))


def _at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_covering_packages_in_time_order_from_before_since_to_through() -> None:
    packages = [_package(2, 20, 30), _package(0, 0, 10), _package(1, 10, 20)]
    chosen = covering_packages(packages, since=_at(12), through=_at(25))
    assert [p.loc for p in chosen] == [packages[2].loc, packages[0].loc]  # p0 ends before


@pytest.mark.parametrize(
    ("spans", "since", "through", "said"),
    [
        ([(0, 10), (12, 20)], 5, 15, "before http://source.invalid/p1.zip"),  # a hole
        ([(6, 10), (10, 20)], 5, 15, "changes after"),  # starts after since
        ([(0, 10), (10, 20)], 5, 25, "before the changes lost"),  # ends before through
        ([(0, 10), (None, 20)], 5, 15, "without from and until"),
        ([(0, None)], 5, 15, "without from and until"),
        ([], 5, 15, "changes after"),
        ([(0, 4)], 5, 15, "changes after"),  # every package is older than the position
    ],
    ids=["hole", "late-start", "short", "no-from", "no-until", "none", "all-old"],
)
def test_covering_packages_refuses_a_change_dump_that_leaves_changes_out(
    spans: list[tuple[int | None, int | None]], since: int, through: int, said: str
) -> None:
    packages = [_package(n, a, b) for n, (a, b) in enumerate(spans)]
    with pytest.raises(ChangeDumpShort, match=re.escape(said)):
        covering_packages(packages, since=_at(since), through=_at(through))


def test_seeded_fuzz_of_covering_packages() -> None:
    """Random spans (overlapping, out of order, with holes, reversed): either refused, or
    the packages chosen leave no second of [since, through] out."""
    rng = random.Random(20261202)
    for _ in range(3000):
        spans = []
        for _n in range(rng.randrange(0, 6)):
            a = rng.randrange(0, 60)
            spans.append((a, a + rng.randrange(-5, 25)))
        packages = [_package(n, a, b) for n, (a, b) in enumerate(spans)]
        since, through = rng.randrange(0, 50), rng.randrange(0, 80)
        try:
            chosen = covering_packages(packages, since=_at(since), through=_at(through))
        except ChangeDumpShort:
            continue
        covered = set()
        for entry in chosen:
            assert entry.md is not None and entry.md.from_ and entry.md.until
            start = int((entry.md.from_ - T0).total_seconds())
            end = int((entry.md.until - T0).total_seconds())
            assert end > since  # only packages after the position
            covered |= set(range(start, end))
        assert set(range(since, through)) <= covered, (spans, since, through)

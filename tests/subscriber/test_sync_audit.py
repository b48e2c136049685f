"""``rshub sync --audit`` never calls a file the same without knowing, and ``--repair``
says what it rewrote.

A Resource List need not give a resource's hash or length. The audit compared only those,
so a corrupted file listed without them was "0 different", and ``--repair`` (a baseline)
then rewrote it without a word. Now a file is checked by its hash, else by its length
when that differs, else by its content (a GET of the resource, compared byte for byte);
one whose GET fails is counted as not checked, and the audit fails. Each case below has a
corrupted file; the summary counts each kind of check.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rshub.cli import main
from tests.commands import Command

from .helpers import expected_files, mirror_files
from .source import TestSource

pytestmark = pytest.mark.timeout(60)

#: name -> (its bytes at the Source, the rs:md its Resource List entry gives, what the
#: mirror holds instead: None for a copy left intact).
CASES: dict[str, tuple[bytes, dict[str, str] | None, bytes | None]] = {
    "hashed": (b"hotel", None, b"HOTEL"),  # hash and length: same length, other bytes
    "sized": (b"sierra", {"length": "6"}, b"sierra!!"),  # length alone, and it differs
    "sized-same": (b"samba", {"length": "5"}, b"SAMBA"),  # length alone, and it agrees
    "bare": (b"bravo", {}, b"BRAVO"),  # neither
    "bare-intact": (b"india", {}, None),  # neither, and nothing wrong
    "odd-hash": (b"oscar", {"hash": "sha-512:" + "0" * 128}, b"OSCAR"),  # no known algorithm
}


@pytest.fixture
async def source() -> AsyncIterator[TestSource]:
    src = TestSource()
    await src.start()
    for name, (data, md, _) in CASES.items():
        src.put(name, data)
        if md is not None:
            src.listed_md[name] = md
    yield src
    await src.stop()


def sync(source: TestSource, dest: Path, *flags: str) -> list[str]:
    where = f"{source.url}/.well-known/resourcesync"
    return ["sync", "--source", where, "--dest", str(dest), "--no-progress", *flags]


async def run(*argv: str) -> tuple[int, list[str], str]:
    cmd = await Command(*argv).start()
    try:
        code = await cmd.wait()
    finally:
        await cmd.stop()
    return code, cmd.lines, cmd.stderr


async def corrupted_mirror(source: TestSource, dest: Path) -> None:
    assert await asyncio.to_thread(main, sync(source, dest, "--once")) == 0
    assert mirror_files(dest) == expected_files(source.url, source.files)
    for name, (_, _, held) in CASES.items():
        if held is not None:
            path = dest / next(p for p in expected_files(source.url, {name: b""}))
            path.write_bytes(held)


async def test_audit_checks_each_file_by_hash_length_or_content_and_counts_them(
    source: TestSource, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    await corrupted_mirror(source, dest)
    code, lines, stderr = await run(*sync(source, dest, "--audit"))
    assert code == 1, stderr
    different = {line.split(" ", 2)[1].rstrip(":"): line for line in lines}
    assert set(different) == {source.loc(n) for n, c in CASES.items() if c[2] is not None}, lines
    assert all(line.startswith("different ") for line in lines), lines
    md5 = hashlib.md5(b"HOTEL").hexdigest()
    assert f"md5 {md5} != announced" in different[source.loc("hashed")]
    assert "length 8 != announced 6" in different[source.loc("sized")]
    for name in ("sized-same", "bare", "odd-hash"):
        assert "the Source's bytes differ" in different[source.loc(name)]
    summary = stderr.strip().splitlines()[-1]
    assert summary == (
        "rshub sync: audit: 0 missing, 0 extra, 5 different; "
        "checked 1 by hash, 1 by length, 4 by content, 0 not at all"
    ), stderr


async def test_repair_rewrites_what_differs_and_says_so(source: TestSource, tmp_path: Path) -> None:
    dest = tmp_path / "m"
    await corrupted_mirror(source, dest)
    (dest / "stray.txt").write_bytes(b"extra")
    intact = dest / next(iter(expected_files(source.url, {"bare-intact": b""})))
    before = intact.stat().st_mtime_ns
    code, lines, stderr = await run(*sync(source, dest, "--audit", "--repair"))
    assert code == 0, stderr
    rewrote = sorted(line.removeprefix("rewrote ") for line in lines if line.startswith("rewrote"))
    assert rewrote == sorted(source.loc(n) for n, c in CASES.items() if c[2] is not None), lines
    assert "removed stray.txt" in lines, lines
    assert "repair: rewrote 5, fetched 0, removed 1; 0 differences left" in stderr, stderr
    assert mirror_files(dest) == expected_files(source.url, source.files)
    assert intact.stat().st_mtime_ns == before  # the same bytes are not written again
    code, lines, stderr = await run(*sync(source, dest, "--audit"))
    assert code == 0 and not lines, stderr


async def test_a_file_the_audit_cannot_fetch_is_counted_unchecked_and_fails_it(
    source: TestSource, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    assert await asyncio.to_thread(main, sync(source, dest, "--once")) == 0
    source.failing["bare-intact"] = 3  # the audit's try and its two quick retries
    code, lines, stderr = await run(*sync(source, dest, "--audit"))
    assert code == 1, stderr
    assert lines == [f"unchecked {source.loc('bare-intact')}: HTTP 500"], lines
    assert "0 different; checked 1 by hash, 0 by length, 4 by content, 1 not at all" in stderr

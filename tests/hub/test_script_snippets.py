"""hub.store.scripts' snippets: ``--#include NAME`` lines replaced by ``snippets/NAME.lua``
when the scripts are loaded, so that each source sent to Redis is whole and what several
scripts do alike is written once; a source that does not compose fails the import."""

from __future__ import annotations

import hashlib
import importlib
import itertools
import shutil
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from redis.asyncio import Redis

from hub.store import scripts
from hub.store.scripts import INCLUDE_MARKER, ScriptSourceError, compose

PACKAGE = Path(scripts.__file__).parent
SNIPPETS = PACKAGE / "snippets"


@pytest.fixture
def snippets(tmp_path: Path) -> Path:
    (tmp_path / "lease.lua").write_text("local function lease(n, t) return n .. ' ' .. t end\n")
    (tmp_path / "clock.lua").write_text("local function now() return redis.call('TIME') end")
    return tmp_path


def test_each_include_line_becomes_its_snippet(snippets: Path) -> None:
    text = "-- A script.\n--#include lease\n--#include clock\nreturn lease(ARGV[1], now()[1])\n"
    assert compose("s", text, snippets) == (
        "-- A script.\n"
        "local function lease(n, t) return n .. ' ' .. t end\n"
        "local function now() return redis.call('TIME') end\n"  # a final newline added
        "return lease(ARGV[1], now()[1])\n"
    )
    # Nothing to include: the text as it is, to the byte.
    plain = "-- #include lease is a comment: the marker has no space\r\nreturn 1"
    assert compose("s", plain, snippets) == plain


def test_an_unknown_snippet_is_refused_naming_the_script_and_line(snippets: Path) -> None:
    with pytest.raises(ScriptSourceError, match=r"^s\.lua line 2: no snippet 'nowhere'"):
        compose("s", "-- A script.\n--#include nowhere\nreturn 1\n", snippets)


def test_a_snippet_included_twice_is_refused(snippets: Path) -> None:
    """Its locals would be defined twice: a second include is a mistake, not a no-op."""
    text = "--#include lease\nreturn 1\n--#include lease\n"
    with pytest.raises(ScriptSourceError, match=r"^s\.lua line 3: snippet 'lease' .* twice"):
        compose("s", text, snippets)


@pytest.mark.parametrize(
    "line",
    [
        "  --#include lease",  # inside a block: snippets go at the top level
        "--#include lease clock",
        "--#include",
        "--#includelease",
        "--#include Lease",
        "--#include ../lease",
        "--#include lease -- why",
    ],
)
def test_a_malformed_include_line_is_refused(snippets: Path, line: str) -> None:
    with pytest.raises(ScriptSourceError, match=r"^s\.lua line 1: an include is --#include NAME"):
        compose("s", f"{line}\nreturn 1\n", snippets)


def test_a_snippet_that_includes_another_is_refused(snippets: Path) -> None:
    (snippets / "nested.lua").write_text("--#include lease\n")
    with pytest.raises(ScriptSourceError, match="snippet 'nested' includes another"):
        compose("s", "--#include nested\n", snippets)


@pytest.fixture
def package_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of hub.store.scripts importable as ``scripts_copy``."""
    copy = tmp_path / "scripts_copy"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield copy
    for name in [n for n in sys.modules if n.split(".")[0] == "scripts_copy"]:
        del sys.modules[name]


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("--#include nowhere\nreturn 1\n", "broken.lua line 1: no snippet 'nowhere'"),
        ("--#include lease_entry\n--#include lease_entry\n", "'lease_entry' is included twice"),
    ],
)
def test_a_script_that_does_not_compose_fails_the_import(
    package_copy: Path, source: str, says: str
) -> None:
    """Not its first call: every script is loaded when the module is imported."""
    (package_copy / "broken.lua").write_text(source)
    init = package_copy / "__init__.py"
    init.write_text(init.read_text() + '\nBROKEN = load("broken")\n')
    with pytest.raises(Exception, match=says) as failed:
        importlib.import_module("scripts_copy")
    assert type(failed.value).__name__ == "ScriptSourceError"


def test_the_copy_imports_unchanged(package_copy: Path) -> None:
    copied = importlib.import_module("scripts_copy")
    assert copied.DEAD_LETTER.sha == scripts.DEAD_LETTER.sha


def _hub_scripts() -> list[scripts.Script]:
    names = sorted(p.stem for p in PACKAGE.glob("*.lua"))
    assert "dead_letter" in names and "fenced_cursors" in names
    return [scripts.load(name) for name in names]


def test_every_script_is_whole_and_its_sha_is_the_composed_texts() -> None:
    for script in _hub_scripts():
        assert INCLUDE_MARKER not in script.source, script.name
        digest = hashlib.sha1(script.source.encode(), usedforsecurity=False).hexdigest()
        assert script.sha == digest
    text = resources.files(scripts.__package__).joinpath("snippets", "cursor_advance.lua")
    advance = text.read_text(encoding="utf-8")
    lease = (SNIPPETS / "lease_entry.lua").read_text(encoding="utf-8")
    for script in (scripts.DEAD_LETTER, scripts.FENCED_CURSORS):
        assert script.source.count(advance) == 1 and script.source.count(lease) == 1
    for script in (scripts.CLAIM, scripts.RENEW, scripts.FENCED_SAVE):
        assert script.source.count(lease) == 1


def _code(text: str) -> list[str]:
    return [s for s in (ln.strip() for ln in text.splitlines()) if s and not s.startswith("--")]


def test_what_a_snippet_does_is_written_nowhere_else() -> None:
    """No two code lines in a row of a snippet stand in a script's own file (as they did
    before: the cursor's advance in two scripts, the later request's check in two), nor the
    one-line forms the snippets name (the lease entry, a cursor's hold, the clock's ms, a
    later request's check): the copies they replaced are gone."""
    sources = {p.name: _code(p.read_text(encoding="utf-8")) for p in PACKAGE.glob("*.lua")}
    for snippet in SNIPPETS.glob("*.lua"):
        code = _code(snippet.read_text(encoding="utf-8"))
        # Pairs of short lines alone ("end", "end") say nothing.
        pairs = {p for p in itertools.pairwise(code) if max(map(len, p)) > 12}
        assert pairs, snippet.name
        for name, lines in sources.items():
            assert not pairs & set(itertools.pairwise(lines)), (snippet.name, name)
    forms = [
        "node .. ' '",  # the lease entry
        ".. ' ' .. ARGV[",
        "'^(%S+) (%d+)$'",
        "'^(%d+)-?(%d*)$'",  # a cursor's order
        "'^%d+') or '0'",  # its hold
        "math.floor(tonumber(t[2]) / 1000)",  # the clock's ms
        "tonumber(stored) >",  # a later request's check
    ]
    for name, lines in sources.items():
        assert not [(f, ln) for f in forms for ln in lines if f in ln], name


async def test_redis_names_each_composed_script_by_its_sha(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    try:
        for script in _hub_scripts():
            assert await redis.script_load(script.source) == script.sha, script.name
    finally:
        await redis.aclose()

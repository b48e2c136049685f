"""Docstrings, comments and docs give the reason, never an issue number: a reader of the code
or of the docs never sees our issue tracker, so a number in parentheses tells them nothing
where "(~3 ms of every start)" tells them why.

Every ``.py``, ``.lua``, ``.md`` and ``.toml`` file of the packages, tests, benches and docs is
scanned, line breaks included (a citation wrapped onto the next comment line counts too).
``bench/results/`` is not: its records quote old runs' logs verbatim, as history.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import render

ROOT = Path(__file__).resolve().parents[1]
TREES = (
    "hub",
    "publisher",
    "subscriber",
    "rsclient",
    "resourcesync",
    "rshub",
    "source",
    "tests",
    "bench",
)
TREES_OF_DOCS = ("docs",)
FILES = ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")
SUFFIXES = frozenset({".py", ".lua", ".md", ".toml"})
#: Never scanned: benchmark records (history, quoted verbatim) and what tools write.
SKIPPED = ("bench/results/",)
SKIPPED_PARTS = frozenset({".venv", "__pycache__", ".mypy_cache", ".ruff_cache"})

#: "issue N", "Issue N's", "issues #N", "issue-N" (N a number), and one wrapped onto the next
#: line of a comment ("issue", then "-- N" in Lua, "# N" or "#: N" in Python).
CITATION = re.compile(r"\b[Ii]ssues?(?:[ \t]*-|\s+(?:(?:#:|#|--)[ \t]+)?)#?[0-9]+")


def _scanned() -> list[str]:
    """The files scanned, as paths relative to the checkout."""
    paths = [ROOT / name for name in FILES]
    for tree in TREES + TREES_OF_DOCS:
        paths += (p for p in (ROOT / tree).rglob("*") if p.suffix in SUFFIXES and p.is_file())
    found = []
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        if SKIPPED_PARTS.isdisjoint(path.parts) and not rel.startswith(SKIPPED):
            found.append(rel)
    return sorted(found)


def _rendered(text: str) -> set[int]:
    """The line numbers of a benchmark table that ``bench/render.py`` writes from the records
    in bench/results/: it quotes their labels verbatim, and ``render.py --check`` (in
    tests/bench/test_results.py) holds the table to them, so it changes with a new record,
    never by hand."""
    lines: set[int] = set()
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == render.BEGIN:
            inside = True
        elif line.strip() == render.END:
            inside = False
        elif inside:
            lines.add(number)
    return lines


def _records() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(render.RESULTS.glob("*.jsonl")))


def citations(text: str) -> list[tuple[int, str]]:
    """Each issue number cited in ``text``: the line it starts on, and the words matched."""
    return [(text.count("\n", 0, m.start()) + 1, m.group()) for m in CITATION.finditer(text)]


#: Written with "<n>" for the number, so that this file cites none itself.
@pytest.mark.parametrize(
    ("text", "cited"),
    [
        ("a remark (issue <n>).", ["issue <n>"]),
        ('"""Issue <n>\'s settings', ["Issue <n>"]),
        ("see issues #<n> and 5", ["issues #<n>"]),
        ("its issue-<n> terms", ["issue-<n>"]),
        ("    # the hub's CPU (issue\n    # <n>: the XREAD echo)", ["issue\n    # <n>"]),
        ("  -- (no echo, issue\n  -- <n>)", ["issue\n  -- <n>"]),
        ("    #: the head's work, issue\n    #: <n>).", ["issue\n    #: <n>"]),
        ("IDNA2008 with UTS #46 mapping", []),
        ("a tissue <n> mm thick; it issued <n> tokens; an issue of <n> kinds", []),
    ],
)
def test_the_pattern_catches_each_spelling_of_a_citation(text: str, cited: list[str]) -> None:
    found = [words for _, words in citations(text.replace("<n>", "22"))]
    assert found == [words.replace("<n>", "22") for words in cited]


def test_no_docstring_comment_or_doc_cites_an_issue_number() -> None:
    scanned = _scanned()
    assert "hub/core/websub.py" in scanned and "docs/benchmarks.md" in scanned  # the trees
    assert not any(p.startswith("bench/results/") or ".venv" in p for p in scanned)
    records = None
    found = []
    for path in scanned:
        text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
        hits = citations(text)
        if hits and path.endswith(".md"):
            records = _records() if records is None else records
            rendered = _rendered(text)
            hits = [(n, w) for n, w in hits if not (n in rendered and w in records)]
        found += [f"{path}:{number}: {words!r}" for number, words in hits]
    assert not found, "say the reason instead of the issue number:\n" + "\n".join(found)

"""The library is a library: it leaves process state alone and uses pydantic's public API.

The hub parses in a thread pool next to its event loop, so a parser that switched the
cyclic GC off (or on) would change how the whole process collects; and models built by
writing pydantic's private attributes would break with the next pydantic layout.
"""

from __future__ import annotations

import ast
import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import resourcesync
from resourcesync import (
    Capability,
    Change,
    ChangeListNotification,
    Entry,
    Link,
    Metadata,
    parse,
    serialize,
)

PACKAGE = Path(resourcesync.__file__).parent
SITEMAP = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS = "http://www.openarchives.org/rs/terms/"


def notification(n: int) -> bytes:
    start = datetime(2013, 1, 2, tzinfo=UTC)
    entries = tuple(
        Entry(
            loc=f"http://example.com/r/{i}",
            lastmod=start + timedelta(seconds=i),
            md=Metadata(change=Change.UPDATED, hash=f"md5:{i:032x}", length=i, type="text/html"),
            links=(Link(rel="alternate", href=f"http://example.com/r/{i}.pdf"),) if i % 4 else (),
        )
        for i in range(n)
    )
    return serialize(ChangeListNotification(entries=entries))


BIG = notification(1_000)


@contextmanager
def gc_state(enabled: bool, threshold: tuple[int, int, int]) -> Iterator[None]:
    """Run with the collector in a given state, and restore the test process's own."""
    was_enabled, was_threshold = gc.isenabled(), gc.get_threshold()
    (gc.enable if enabled else gc.disable)()
    gc.set_threshold(*threshold)
    try:
        yield
    finally:
        gc.set_threshold(*was_threshold)
        (gc.enable if was_enabled else gc.disable)()


def parse_while_watching(threads: int, rounds: int) -> list[tuple[bool, tuple[int, ...]]]:
    """Parse BIG in ``threads`` threads at once while a watcher samples the GC state.

    Returns every state the watcher saw. A short switch interval makes the watcher run
    many times inside each parse, so a parser that switched the GC off for its entry loop
    (most of a 1,000-entry parse) is seen doing so.
    """
    seen: list[tuple[bool, tuple[int, ...]]] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def watch() -> None:
        while not done.is_set():
            seen.append((gc.isenabled(), gc.get_threshold()))

    def work() -> None:
        try:
            for _ in range(rounds):
                assert len(parse(BIG).entries) == 1_000
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        watcher = threading.Thread(target=watch)
        workers = [threading.Thread(target=work) for _ in range(threads)]
        watcher.start()
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=120)
        done.set()
        watcher.join(timeout=10)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    assert not watcher.is_alive() and not any(t.is_alive() for t in workers)
    assert len(seen) > 100, "the watcher must have sampled during the parses"
    return seen


@pytest.mark.parametrize("threads", [1, 4])
def test_parsing_never_changes_the_gc_state(threads: int) -> None:
    threshold = (701, 11, 12)  # anything but the defaults: a reset would show
    with gc_state(True, threshold):
        seen = parse_while_watching(threads, rounds=3)
        assert set(seen) == {(True, threshold)}
        assert gc.isenabled() and gc.get_threshold() == threshold


def test_parsing_leaves_a_disabled_gc_disabled() -> None:
    threshold = (50_000, 10, 10)  # what the hub's serve sets
    with gc_state(False, threshold):
        seen = parse_while_watching(2, rounds=2)
        assert set(seen) == {(False, threshold)}
        assert not gc.isenabled() and gc.get_threshold() == threshold


def _sources() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 9  # the package, not an empty glob
    return files


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.name)
def test_sources_use_neither_gc_nor_pydantic_internals(path: Path) -> None:
    """No ``gc`` at all, no ``__pydantic_*`` name, no writing attributes behind pydantic."""
    source = path.read_text()
    assert "__pydantic_" not in source
    tree = ast.parse(source, str(path))
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] != "gc" for a in node.names), where
        elif isinstance(node, ast.ImportFrom):
            assert node.module != "gc", where
        elif isinstance(node, ast.Name):
            assert node.id != "gc", where
        elif isinstance(node, ast.Attribute):
            assert node.attr not in {"__setattr__", "__new__"}, where
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert node.value not in {"__dict__", "__setattr__"}, where


def test_parsed_models_are_what_pydantic_builds() -> None:
    """Parsed models equal validated ones, field for field, including which fields were set."""
    data = (
        f'<urlset xmlns="{SITEMAP}" xmlns:rs="{RS}" xmlns:x="urn:x">'
        '<rs:md capability="changelist-notification"/>'
        '<rs:ln rel="up" href="http://e.org/caps.xml"/>'
        "<url><loc>http://e.org/a</loc><lastmod>2013-01-02T00:00:00Z</lastmod>"
        '<rs:md change="created" length="5" x:note="kept"/>'
        '<rs:ln rel="alternate" href="http://e.org/a.pdf" pri="2"/></url>'
        "<url><loc>http://e.org/b</loc>"
        '<rs:md change="deleted" datetime="2013-01-03T00:00:00Z"/></url>'
        "</urlset>"
    ).encode()
    doc = parse(data)
    rebuilt = ChangeListNotification.model_validate(doc.model_dump())
    assert doc == rebuilt
    assert doc.model_dump() == rebuilt.model_dump()
    assert serialize(doc) == serialize(rebuilt)
    assert doc.model_fields_set == {"md", "links", "entries"}
    assert doc.md.model_fields_set == {"capability"}
    first, second = doc.entries
    assert first.model_fields_set == {"loc", "lastmod", "changefreq", "md", "links"}
    assert first.md is not None and first.md.model_fields_set == {"change", "length", "extra"}
    assert first.md.extra == {"{urn:x}note": "kept"}
    assert first.links[0].model_fields_set == {"rel", "href", "pri"}
    assert second.md is not None and second.md.model_fields_set == {"change", "datetime"}
    assert second.md.extra == {} and second.links == ()
    assert doc.md.capability is Capability.CHANGELIST_NOTIFICATION
    # Frozen, and copies work through the public API.
    with pytest.raises(ValueError, match="frozen"):
        first.loc = "http://e.org/other"  # type: ignore[misc]
    moved = first.model_copy(update={"loc": "http://e.org/moved"})
    assert moved.loc == "http://e.org/moved" and first.loc == "http://e.org/a"
    assert moved.md == first.md


def test_a_link_without_rel_keeps_its_fields_set_without_validation() -> None:
    data = (
        f'<urlset xmlns="{SITEMAP}" xmlns:rs="{RS}">'
        '<rs:md capability="resourcelist" at="2013-01-01T00:00:00Z"/>'
        '<url><loc>http://e.org/a</loc><rs:ln href="http://e.org/b"/></url></urlset>'
    ).encode()
    (link,) = parse(data, validate=False).entries[0].links
    assert (link.rel, link.href) == ("", "http://e.org/b")
    assert link.model_fields_set == {"href"}
    with pytest.raises(resourcesync.ValidationError) as info:
        parse(data)
    assert info.value.rule == "link.rel-required"

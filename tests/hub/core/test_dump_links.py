"""The dumps a changedump-notification declares: read from its head only, bounded, and
only absolute http(s) URLs; named cases and a seeded fuzz."""

from __future__ import annotations

import random

import pytest

from hub.core.dump_links import MAX_HEAD, declared_dumps, holds_packages
from hub.core.events import LOC, changes_from_document
from hub.core.packed import pack
from hub.core.quick_ingest import packed_from_document
from tests.support import changes, notification

HEAD = (
    b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    b' xmlns:rs="http://www.openarchives.org/rs/terms/">%s'
    b'<rs:md capability="changedump-notification"/>%s</urlset>'
)
PACKAGE = b'<url><loc>http://s.invalid/p.zip</loc><rs:md until="2026-01-01T00:00:00Z"/>%s</url>'


def body(links: bytes, entry_links: bytes = b"", entries: int = 1) -> bytes:
    return HEAD % (links, (PACKAGE % entry_links) * entries)


def test_root_links_of_both_relations_are_read() -> None:
    links = (
        b'<rs:ln rel="up" href="http://s.invalid/cap.xml"/>'
        b'<rs:ln rel="resourcedump" href=" http://s.invalid/rd.xml "/>'
        b'<rs:ln rel="changedump" href="https://s.invalid/cd.xml"/>'
        b'<rs:ln rel="resourcedump" href="http://s.invalid/second.xml"/>'
    )
    assert declared_dumps(body(links)) == {
        "resourcedump": "http://s.invalid/rd.xml",
        "changedump": "https://s.invalid/cd.xml",
    }


@pytest.mark.parametrize(
    "href", [b"rd.xml", b"ftp://s.invalid/rd.xml", b"javascript:x", b"http://", b""]
)
def test_what_is_no_http_url_is_left_out(href: bytes) -> None:
    assert declared_dumps(body(b'<rs:ln rel="resourcedump" href="%s"/>' % href)) == {}


def test_an_entrys_links_are_no_declaration() -> None:
    inner = b'<rs:ln rel="resourcedump" href="http://s.invalid/rd.xml"/>'
    assert declared_dumps(body(b"", inner)) == {}


def test_only_the_head_is_read() -> None:
    padding = b"<!--" + b"x" * MAX_HEAD + b"-->"
    late = padding + b'<rs:ln rel="resourcedump" href="http://s.invalid/rd.xml"/>'
    assert declared_dumps(body(late)) == {}


def test_packages_are_told_from_changes() -> None:
    dump = body(b"")
    assert holds_packages(packed_from_document(dump, 1 << 20))
    assert not holds_packages(packed_from_document(notification(changes(3)), 1 << 20))
    # a loc spelled like the change type is no package
    row = ("http://s.invalid/changedump", "updated", b'{"loc":"changedump"}')
    assert not holds_packages(pack([row]))
    assert [c.change for c in changes_from_document(dump, 1 << 20)] == ["changedump"]


def test_seeded_fuzz_never_raises() -> None:
    rng = random.Random(7)
    base = body(
        b'<rs:ln rel="resourcedump" href="http://s.invalid/rd.xml"/>'
        b'<rs:ln rel="changedump" href="http://s.invalid/cd.xml"/>',
        entries=3,
    )
    for _ in range(2000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        found = declared_dumps(bytes(data[: rng.randrange(len(data) + 1)]))
        assert set(found) <= {"resourcedump", "changedump"}
        assert all(LOC.fullmatch(href) for href in found.values())

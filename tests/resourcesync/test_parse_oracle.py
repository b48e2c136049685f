"""resourcesync.parse against main's frozen implementation (tests/resourcesync/oracle_parse.py).

The parse walk checks the ResourceSync rules itself (issue 22: one pass, no second walk over
the models), and :func:`resourcesync.validate` checks models through the same rule functions.
Every document here is parsed by both: the outcome must be identical, that is the same model
classes, ``model_dump()`` with the same values of the same types and the same
``model_fields_set`` in every model, or the same exception type and message. The generators
come from the plain-shapes experiment (branch ``parse-models``), seeded.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

from resourcesync import DocumentError, Limits, parse, validate
from resourcesync.models import DOCUMENT_TYPES, Document, Entry, Link, Metadata

from . import oracle_parse

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)
MD5 = "md5:" + "0a" * 16
SHA1 = "sha-1:" + "f" * 40


def _shape(model: Any, path: str = "") -> Iterator[tuple[str, str, object]]:
    """Each model's class and fields set, and each value's type and repr, by path."""
    if isinstance(model, BaseModel):
        yield path, type(model).__name__, sorted(model.model_fields_set)
        for name in type(model).model_fields:
            yield from _shape(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, tuple | list):
        yield path, type(model).__name__, len(model)
        for n, item in enumerate(model):
            yield from _shape(item, f"{path}[{n}]")
    elif isinstance(model, dict):
        yield path, "dict", sorted(model.items())
    else:
        yield path, type(model).__name__, repr(model)


def _verdict(func: Callable[[], Any]) -> object:
    try:
        document = func()
    except Exception as exc:  # the verdict is what is compared
        return type(exc).__name__, str(exc), getattr(exc, "rule", None), getattr(exc, "index", None)
    return type(document).__name__, repr(document.model_dump()), list(_shape(document))


def same(body: bytes, limits: Limits = Limits()) -> bool:
    """Assert that parse and main's parse agree on ``body``, with and without validation,
    and that validate() and main's agree on the unvalidated models; whether it was valid."""
    new = _verdict(lambda: parse(body, limits=limits))
    old = _verdict(lambda: oracle_parse.parse(body, limits=limits))
    assert new == old, body
    loose = _verdict(lambda: parse(body, limits=limits, validate=False))
    assert loose == _verdict(lambda: oracle_parse.parse(body, limits=limits, validate=False)), body
    try:
        document = parse(body, limits=limits, validate=False)
    except DocumentError:
        return False
    assert _verdict(lambda: validate(document) or document) == _verdict(
        lambda: oracle_parse.validate(document) or document
    ), body
    return isinstance(new[1], str) and new[0] in {cls.__name__ for cls in DOCUMENT_TYPES.values()}


def doc(
    entries: list[str], md: str, root: str = "urlset", links: str = "", attrs: str = ""
) -> bytes:
    tag = "sitemap" if root == "sitemapindex" else "url"
    body = "".join(f"<{tag}>{e}</{tag}>" for e in entries)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><{root} {NS}{attrs}>{md}{links}{body}</{root}>'
    ).encode()


NOTE = '<rs:md capability="changelist-notification"/>'


# Values valid and not, near every rule's edge.
_LOCS = ["http://e.com/a", "http://e.com/b?q=1", " http://e.com/c ", "", "  ", "x" * 30]
_TIMES = [
    "2013-01-02T00:00:00Z",
    "2013-01-02T00:00:01Z",
    "2013-01-01T23:59:59Z",
    "2013-01-02T01:00:00+01:00",
    "2013-01-02T00:00:00.5Z",
    "2013-01-02",
    "2013",
    "2013-01-02T00:00Z",
    " 2013-01-02T00:00:02Z ",
    "2013-02-29T00:00:00Z",
    "2012-02-29T00:00:00Z",
    "2013-01-02T24:00:00Z",
    "2013-01-02T00:00:00",
    "2013-01-02T00:00:00+24:00",
    "2013-01-02T00:00:00-23:59",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "2013-W01-2T00:00:00Z",
    "2013-01-02T00:00:00.1234567Z",
    "yesterday",
]
_HASHES = [MD5, SHA1, f"{MD5} {SHA1}", f" {MD5} ", "md5:0", "sha-512:00", "md5:" + "g" * 32, ""]
_NUMBERS = ["0", "1", "7", "007", "999999", "1000000", "-1", "+1", "x", "", "١"]
_PATHS = ["/a", "/a/b.txt", "a", "/a/../b", "/./a", "/a\\b", ""]
_CAPS = [
    "changelist-notification",
    "changelist",
    "resourcelist",
    "capabilitylist",
    "description",
    "resourcedump-manifest",
    "changedump-manifest",
    "changedump",
    "nonsense",
]
_CHANGES = ["created", "updated", "deleted", "deleted", "moved", ""]
_FREQS = ["daily", "never", " hourly ", "sometimes", ""]


def _attrs(rng: random.Random, pool: list[tuple[str, list[str]]], most: int) -> str:
    chosen = rng.sample(pool, rng.randint(0, min(most, len(pool))))
    return " ".join(f'{key}="{rng.choice(values)}"' for key, values in chosen)


_ENTRY_MD = [
    ("datetime", _TIMES),
    ("hash", _HASHES),
    ("length", _NUMBERS),
    ("type", ["text/html", ""]),
    ("capability", _CAPS),
    ("path", _PATHS),
    ("at", _TIMES),
    ("encoding", ["gzip"]),
    ("xmlns:o='urn:o' o:x", ["1"]),
]
_LINK = [
    ("modified", _TIMES),
    ("hash", _HASHES),
    ("length", _NUMBERS),
    ("type", ["text/html"]),
    ("pri", _NUMBERS),
    ("path", _PATHS),
    ("extra", ["1"]),
]
_ROOT_MD = [("at", _TIMES), ("from", _TIMES), ("until", _TIMES), ("completed", _TIMES)]


def _link(rng: random.Random) -> str:
    rel = "" if rng.random() < 0.05 else f'rel="{rng.choice(["up", "alternate", ""])}" '
    href = "" if rng.random() < 0.05 else f'href="{rng.choice(["http://e.com/l", ""])}" '
    return f"<rs:ln {rel}{href}{_attrs(rng, _LINK, 2) if rng.random() < 0.4 else ''}/>"


def _entry(rng: random.Random, n: int) -> str:
    parts = []
    if rng.random() < 0.97:
        parts.append(
            f"<loc>{rng.choice(_LOCS) if rng.random() < 0.2 else f'http://e.com/{n}'}</loc>"
        )
    if rng.random() < 0.8:
        stamp = rng.choice(_TIMES[:3]) if rng.random() < 0.7 else rng.choice(_TIMES)
        parts.append(f"<lastmod>{stamp}</lastmod>")
    if rng.random() < 0.9:
        change = f'change="{rng.choice(_CHANGES)}" ' if rng.random() < 0.85 else ""
        extra = _attrs(rng, _ENTRY_MD, 3) if rng.random() < 0.5 else ""
        parts.append(f"<rs:md {change}{extra}/>")
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        parts.append(_link(rng))
    if rng.random() < 0.1:
        parts.append(f"<changefreq>{rng.choice(_FREQS)}</changefreq>")
    if rng.random() < 0.05:
        parts.append(
            rng.choice(["<foo/>", "<loc>http://e.com/z</loc>", '<rs:md change="created"/>'])
        )
    rng.shuffle(parts) if rng.random() < 0.1 else None
    return "".join(parts)


def _document(rng: random.Random) -> bytes:
    capability = rng.choice(_CAPS[:2] * 3 + _CAPS)
    root_attrs = _attrs(rng, _ROOT_MD, 2) if rng.random() < 0.6 else ""
    if rng.random() < 0.05:
        root_attrs += ' hash="' + MD5 + '"'
    md = f'<rs:md capability="{capability}" {root_attrs}/>' if rng.random() < 0.97 else ""
    if rng.random() < 0.03:
        md += md
    links = "".join(_link(rng) for _ in range(rng.choice([0, 0, 1, 2])))
    root = "sitemapindex" if rng.random() < 0.15 else "urlset"
    entries = [_entry(rng, n) for n in range(rng.choice([0, 1, 1, 1, 2, 3, 5]))]
    return doc(entries, md, root, links)


_LIMITS = [Limits()] * 8 + [
    Limits(max_value_chars=20),
    Limits(max_value_chars=19),
    Limits(max_links=0),
    Limits(max_links=1),
    Limits(max_attributes=1),
    Limits(max_attributes=2),
    Limits(max_entries=0),
    Limits(max_entries=1),
]


def _valid(rng: random.Random) -> bytes:
    """A valid document of one of the plain shapes, every type."""
    capability, root, root_md, entry_md = rng.choice(
        [
            ("changelist-notification", "urlset", "", "change"),
            ("changelist", "urlset", 'from="2013-01-01T00:00:00Z"', "change"),
            ("changelist", "sitemapindex", 'from="2013-01-01T00:00:00Z"', ""),
            ("resourcelist", "urlset", 'at="2013-01-01T00:00:00Z"', ""),
            ("resourcelist", "sitemapindex", 'at="2013-01-01T00:00:00Z"', ""),
            ("resourcedump", "urlset", 'at="2013-01-01T00:00:00Z"', ""),
            ("resourcedump-manifest", "urlset", 'at="2013-01-01T00:00:00Z"', "path"),
            ("changedump", "urlset", 'from="2013-01-01T00:00:00Z"', ""),
            ("changedump-manifest", "urlset", 'from="2013-01-01T00:00:00Z"', "change path"),
            ("changedump-notification", "urlset", "", ""),
            ("description", "urlset", "", "capability"),
            ("description", "sitemapindex", "", ""),
            ("capabilitylist", "urlset", "", "anycap"),
        ]
    )
    tag = "sitemap" if root == "sitemapindex" else "url"
    caps = ["resourcelist", "changelist", "resourcedump", "changedump"]
    entries = []
    for n in range(rng.randint(1, 6)):
        attrs = [f'hash="{MD5}"', 'length="12"', 'type="text/plain"']
        md = rng.sample(attrs, rng.randint(0, 3))
        if "change" in entry_md:
            md.append(f'change="{rng.choice(_CHANGES[:3])}"')
        if "path" in entry_md:
            md.append(f'path="/p/{n}"')
        if entry_md == "capability":
            md.append('capability="capabilitylist"')
        if entry_md == "anycap" and n < len(caps):
            md.append(f'capability="{caps[n]}"')
        elif entry_md == "anycap":
            break
        stamp = f"2013-01-02T00:00:{n:02}Z"
        if rng.random() < 0.3:
            md.append(f'datetime="2013-01-02T01:00:{n:02}+01:00"')
        link = '<rs:ln rel="alternate" href="http://e.com/x" pri="1" modified="2013-01-02"/>'
        entries.append(
            f"<loc>http://e.com/{n}</loc><lastmod>{stamp}</lastmod>"
            f"<rs:md {' '.join(md)}/>{link if rng.random() < 0.3 else ''}"
        )
    body = "".join(f"<{tag}>{e}</{tag}>" for e in entries)
    md_el = f'<rs:md capability="{capability}" {root_md}/>'
    return f"<{root} {NS}>{md_el}{body}</{root}>".encode()


_BREAKS = [
    (b'change="created"', b'change="moved"'),
    (b'change="updated"', b""),
    (b'change="deleted"', b'change="deleted" path="/x"'),
    (b'from="2013-01-01T00:00:00Z"', b""),
    (b'from="2013-01-01T00:00:00Z"', b'from="2013-01-01T00:00:00Z" until="2012-12-31T23:59:59Z"'),
    (b'from="2013-01-01T00:00:00Z"', b'from="2013-01-01T00:00:00Z" until="2013-01-01T00:00:00Z"'),
    (b'at="2013-01-01T00:00:00Z"', b""),
    (b'at="2013-01-01T00:00:00Z"', b'at="2013-01-01T00:00:00Z" completed="2012-01-01"'),
    (
        b'at="2013-01-01T00:00:00Z"',
        b'at="2013-01-01T00:00:00Z" completed="2013-01-01T01:00:00+01:00"',
    ),
    (b"<lastmod>2013-01-02T00:00:01Z", b"<lastmod>2013-01-01T23:59:59Z"),
    (b"<lastmod>2013-01-02T00:00:01Z", b"<lastmod>2013-01-02T00:00:00Z"),
    (b"<lastmod>2013-01-02T00:00:00Z</lastmod>", b""),
    (b"<lastmod>2013-01-02T00:00:00Z</lastmod>", b"<lastmod>2013-01-02T00:00:00.000001Z</lastmod>"),
    (b"<lastmod>2013-01-02T00:00:00Z", b"<lastmod>9999-12-31T23:59:59Z"),
    (b"<lastmod>2013-01-02T00:00:00Z", b"<lastmod>2013-01-02T00:00:00-00:00"),
    (b"<lastmod>2013-01-02T00:00:00Z", b"<lastmod>\n 2013-01-02T00:00:00Z\t"),
    (b'datetime="2013-01-02T01:00:01+01:00"', b'datetime="2013-01-02T01:00:01"'),
    (b'datetime="2013-01-02T01:00:01+01:00"', b'datetime="2012-01-02"'),
    (b'length="12"', b'length="-12"'),
    (b'length="12"', b'length="0012"'),
    (b'length="12"', b'length=" 12"'),
    (b'hash="md5:', b'hash="MD5:'),
    (b'hash="md5:', b'hash="sha-1:'),
    (b'pri="1"', b'pri="0"'),
    (b'pri="1"', b'pri="999999"'),
    (b'pri="1"', b'pri="1000000"'),
    (b'modified="2013-01-02"', b'modified="2013-01-32"'),
    (b'rel="alternate"', b'rel=""'),
    (b'href="http://e.com/x"', b""),
    (b'path="/p/1"', b'path="p/1"'),
    (b'path="/p/1"', b'path="/p/../1"'),
    (b'path="/p/1"', b""),
    (b'capability="capabilitylist"/>', b'capability="resourcelist"/>'),
    (b'capability="changelist"/>', b'capability="resourcelist"/>'),
    (b'capability="resourcedump"/>', b"/>"),
    (b"<loc>http://e.com/1</loc>", b"<loc> </loc>"),
    (b"<loc>http://e.com/1</loc>", b"<loc>http://e.com/1</loc><loc>x</loc>"),
    (b"<loc>http://e.com/0</loc>", b"<loc>http://e.com/0</loc><changefreq>weekly</changefreq>"),
    (b"<loc>http://e.com/0</loc>", b"<loc>http://e.com/0</loc><changefreq>often</changefreq>"),
    (b"<loc>http://e.com/0</loc>", b"<loc>http://e.com/0<b>x</b></loc>"),
    (b"<loc>http://e.com/0</loc>", b"<loc>&amp;http://e.com/0</loc>"),
    (b"<loc>http://e.com/0</loc>", b"<loc>http://e.com/0</loc><x/>"),
    (b"<rs:md ", b'<rs:md xmlns:o="urn:o" o:x="1" '),
    (b"<rs:md ", b'<rs:md encoding="gzip" '),
    (b"<rs:md capability", b'<rs:md change="created" capability'),
    (b"</urlset>", b'<rs:ln rel="up" href="http://e.com/c"/></urlset>'),
    (b"</urlset>", b"<!-- trailing --></urlset>"),
    (b"</urlset>", b'<rs:md capability="changelist-notification"/></urlset>'),
    (b"</urlset>", b"<url><loc>http://e.com/last</loc></url></urlset>"),
]


_LIMITS = [Limits()] * 8 + [
    Limits(max_value_chars=20),
    Limits(max_value_chars=19),
    Limits(max_links=0),
    Limits(max_links=1),
    Limits(max_attributes=1),
    Limits(max_attributes=2),
    Limits(max_entries=0),
    Limits(max_entries=1),
]


def test_seeded_fuzz_gives_main_s_outcomes() -> None:
    rng = random.Random(2214)
    valid = invalid = 0
    for _ in range(4000):
        if rng.random() < 0.4:
            body = _valid(rng)
            if rng.random() < 0.7:  # one rule broken, or one value at an edge
                old, new = rng.choice(_BREAKS)
                body = body.replace(old, new, 1)
        else:
            body = _document(rng)
        if same(body, rng.choice(_LIMITS)):
            valid += 1
        else:
            invalid += 1
    assert valid > 600 and invalid > 1500, (valid, invalid)


def test_valid_documents_of_every_type() -> None:
    rng = random.Random(7)
    kinds: set[str] = set()
    for _ in range(600):
        body = _valid(rng)
        assert same(body), body
        kinds.add(type(parse(body)).__name__)
    assert len(kinds) == 13, kinds


def test_seeded_fuzz_of_mutated_and_hostile_bytes() -> None:
    """Flipped, inserted and cut bytes, DOCTYPEs and deep nesting: the same verdict."""
    rng = random.Random(2215)
    hostile = [
        b'<!DOCTYPE urlset [<!ENTITY a "aaaa">]>',
        b'<!DOCTYPE urlset SYSTEM "http://example.invalid/x.dtd">',
        b"<!-- c --><?pi x?>",
    ]
    for _ in range(1500):
        body = bytearray(_valid(rng) if rng.random() < 0.5 else _document(rng))
        kind = rng.randrange(4)
        if kind == 0:
            for _ in range(rng.randint(1, 3)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        elif kind == 1:
            at = rng.randrange(len(body))
            body[at:at] = rng.choice([b"<", b"&amp;", b"<o:x xmlns:o='urn:o'/>", b"\x00", b"\xff"])
        elif kind == 2:
            body = body[: rng.randrange(len(body))]
        else:
            depth = rng.choice([3, 16, 40])
            nest = b"<x>" * depth + b"</x>" * depth
            at = body.find(b"<loc>")
            body = rng.choice(hostile) + body if at < 0 else body[:at] + nest + body[at:]
        same(bytes(body), rng.choice(_LIMITS))


def test_large_documents_near_the_limits() -> None:
    entry = (
        "<loc>http://e.com/{n}</loc><lastmod>2013-01-02T00:00:00Z</lastmod>"
        '<rs:md change="created"/>'
    )
    entries = [entry.format(n=n) for n in range(1000)]
    body = doc(entries, NOTE)
    assert same(body)
    assert not same(body, Limits(max_entries=999))
    assert same(body, Limits(max_entries=1000))
    links = '<rs:ln rel="a" href="http://e/"/>' * 3
    assert same(doc([entries[0] + links], NOTE), Limits(max_links=3))
    assert not same(doc([entries[0] + links], NOTE), Limits(max_links=2))
    value = "x" * 8192
    assert same(doc([entries[0].replace('"created"', f'"created" type="{value}"')], NOTE))
    assert not same(doc([entries[0].replace('"created"', f'"created" type="{value}x"')], NOTE))
    # a broken rule early and a broken limit late: main's walk finished first (the limit)
    late = entries[5] + links
    early = entries[1].replace(' change="created"', "")
    assert not same(doc([entries[0], early, *entries[2:5], late], NOTE), Limits(max_links=2))
    # and out of order, then a limit
    body = doc([entries[0], entries[1].replace("00:00:00Z", "00:00:00Z")] * 2, NOTE)
    assert same(body)


def _models(rng: random.Random) -> Document:
    """A model document built in Python, with what parse cannot produce (naive and
    negative values, enum strings, wrong capabilities), for validate()."""
    naive = rng.random() < 0.1
    from datetime import UTC, datetime, timedelta

    def when(n: int) -> datetime:
        stamp = datetime(2013, 1, 2, tzinfo=UTC) + timedelta(seconds=n * rng.choice([1, 1, -1]))
        return stamp.replace(tzinfo=None) if naive and rng.random() < 0.3 else stamp

    cls = rng.choice(list(DOCUMENT_TYPES.values()))
    md: dict[str, Any] = {}
    for key in ("at", "from_", "until", "completed"):
        if rng.random() < 0.4:
            md[key] = when(rng.randint(-2, 2))
    if rng.random() < 0.1:
        md["capability"] = rng.choice(list(DOCUMENT_TYPES))[0]
    if rng.random() < 0.1:
        md["hash"] = rng.choice(_HASHES)
    entries = []
    for n in range(rng.choice([0, 1, 2, 4])):
        emd: dict[str, Any] = {}
        if rng.random() < 0.8:
            emd["change"] = rng.choice(["created", "updated", "deleted"])
        for key, values in (("hash", _HASHES), ("path", _PATHS), ("capability", _CAPS[:7])):
            if rng.random() < 0.2:
                emd[key] = rng.choice(values)
        if rng.random() < 0.2:
            emd["length"] = rng.choice([0, 5, -1])
        if rng.random() < 0.2:
            emd["datetime"] = when(n)
        links = tuple(
            Link(
                rel=rng.choice(["", "up"]),
                href=rng.choice(["", "http://e/"]),
                pri=rng.choice([None, 0, 1, 10**6]),
                modified=rng.choice([None, when(0)]),
                length=rng.choice([None, -1, 1]),
            )
            for _ in range(rng.choice([0, 0, 1]))
        )
        entries.append(
            Entry(
                loc=rng.choice(["", "http://e.com/x"]) if rng.random() < 0.1 else f"http://e/{n}",
                lastmod=when(n) if rng.random() < 0.8 else None,
                changefreq=rng.choice([None, None, "daily", "often"]),
                md=Metadata(**emd) if rng.random() < 0.9 else None,
                links=links,
            )
        )
    return cls(md=Metadata(**md), entries=tuple(entries))


def test_seeded_fuzz_of_validate_on_built_models() -> None:
    rng = random.Random(2216)
    passed = 0
    for _ in range(3000):
        document = _models(rng)
        new = _verdict(lambda d=document: validate(d) or d)
        assert new == _verdict(lambda d=document: oracle_parse.validate(d) or d), document
        passed += new[0] == type(document).__name__
    assert 100 < passed < 2900, passed

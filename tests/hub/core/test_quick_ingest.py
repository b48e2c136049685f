"""hub.core.quick_ingest: the fast path stores what the full path stores, or declines.

Every document here goes through both the full path (:func:`full_path`: models
and the ResourceSync rules) and :func:`hub.core.quick_ingest.packed_from_document`; the
outcome (the packed bytes, or the exception's type and message) must be the same.
"""

from __future__ import annotations

import random
import time

import pytest

from hub.core import events, quick_ingest
from hub.core.packed import Packed, pack
from resourcesync import Limits, parse_root
from tests.support import TIME_SCALE

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)
HASH = "md5:" + "0" * 32


def outcome(func: object, body: bytes, limits: Limits) -> object:
    try:
        return func(body, 1 << 20, limits)  # type: ignore[operator]
    except Exception as exc:  # the verdict is what is compared
        return (type(exc).__name__, str(exc))


def doc(
    entries: list[str],
    root_md: str = '<rs:md capability="changelist-notification"/>',
    root_extra: str = "",
    root_attrs: str = "",
) -> bytes:
    body = "".join(entries)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}{root_attrs}>'
        f"{root_extra}{root_md}{body}</urlset>"
    ).encode()


def entry(
    loc: str = "http://example.com/a",
    lastmod: str | None = "2013-01-02T00:00:00Z",
    md: str = 'change="created"',
    links: str = "",
    extra: str = "",
) -> str:
    stamp = "" if lastmod is None else f"<lastmod>{lastmod}</lastmod>"
    return f"<url><loc>{loc}</loc>{stamp}<rs:md {md}/>{links}{extra}</url>"


def full_path(body: bytes, max_bytes: int, limits: Limits) -> Packed:
    """The full path alone: models and every rule, a ``Change`` per entry, packed."""
    return pack(events.changes_from_document(body, max_bytes, limits))


def same(body: bytes, limits: Limits = Limits()) -> bool:
    """Assert both paths agree on ``body``; whether the fast path took it."""
    full = outcome(full_path, body, limits)
    quick = outcome(quick_ingest.packed_from_document, body, limits)
    assert quick == full, body
    try:
        root = parse_root(body, max_bytes=1 << 20)
    except Exception:  # unparseable: the full path's error, compared above
        return False
    return quick_ingest.quick_rows(root, limits) is not None


def test_the_plain_shape_takes_the_fast_path() -> None:
    links = '<rs:ln rel="alternate" href="http://example.com/a.pdf"/>'
    md = f'change="updated" hash="{HASH}" length="12" type="text/html"'
    body = doc(
        [entry(md=md, links=links), entry("http://example.com/b", "2013-01-02T00:00:01Z")],
        root_extra='<rs:ln rel="up" href="http://example.com/caps.xml"/>',
    )
    assert same(body)
    assert type(quick_ingest.packed_from_document(body, 1 << 20)) is Packed


def test_what_the_full_path_ignores_the_fast_path_ignores_too() -> None:
    """Attributes of url/loc/lastmod/urlset and elements inside loc or rs:md."""
    odd = (
        '<url xmlns:o="urn:o" o:a="1"><loc o:b="2">http://example.com/a<o:i/>/x</loc>'
        '<lastmod o:c="3">2013-01-02T00:00:00Z</lastmod>'
        '<rs:md change="deleted"><o:x><o:y/></o:x></rs:md></url>'
    )
    assert same(doc([odd], root_attrs=' xmlns:o="urn:o" o:r="1"'))


@pytest.mark.parametrize(
    ("body", "limits"),
    [
        (doc([entry("relative/path")]), Limits()),
        (doc([entry(" http://example.com/a ")]), Limits()),
        (doc([entry(lastmod="2013-01-02T01:00:00+01:00")]), Limits()),
        (doc([entry(lastmod="2013-02-30T00:00:00Z")]), Limits()),
        (doc([entry(lastmod=None)]), Limits()),
        (
            doc([entry(lastmod=None, md='change="created" datetime="2013-01-02T00:00:00Z"')]),
            Limits(),
        ),
        (doc([entry(md='change="moved"')]), Limits()),
        (doc([entry(md='hash="md5:00"')]), Limits()),
        (doc([entry(md='change="created" hash="md5:zz"')]), Limits()),
        (doc([entry(md='change="created" length="-1"')]), Limits()),
        (doc([entry(md='change="created" x="1"')]), Limits()),
        (doc([entry(links='<rs:ln rel="alternate"/>')]), Limits()),
        (doc([entry(extra="<changefreq>daily</changefreq>")]), Limits()),
        (doc([entry(lastmod="2013-01-03T00:00:00Z"), entry()]), Limits()),
        (doc([]), Limits()),
        (doc([entry()], root_md='<rs:md capability="changelist"/>'), Limits()),
        (doc([entry()], root_md=""), Limits()),
        (doc([entry()], root_extra='<rs:ln rel="up"/>'), Limits()),
        (doc([entry(), entry()]), Limits(max_entries=1)),
        (doc([entry()]), Limits(max_value_chars=10)),
        (doc([entry(md=f'change="created" hash="{HASH}"')]), Limits(max_attributes=1)),
        (doc([entry(links='<rs:ln rel="a" href="http://x/"/>' * 2)]), Limits(max_links=1)),
        (b"", Limits()),
        (b"<urlset", Limits()),
    ],
)
def test_other_shapes_get_the_full_paths_verdict(body: bytes, limits: Limits) -> None:
    same(body, limits)


_LOCS = [
    "http://example.com/a",
    "https://e.org/x?q=1#f",
    "relative",
    "",
    " http://e.com/ ",
    "http://",
    "ftp://e.com/",
    "http://e.com/a b",
    "http://e.com/&amp;x",
]
_TIMES = [
    "2013-01-02T00:00:00Z",
    "2013-01-02T00:00:05Z",
    "2012-12-31T23:59:59Z",
    "2013-01-02",
    "2013-01-02T00:00:00+00:00",
    "2013-13-02T00:00:00Z",
    " 2013-01-02T00:00:07Z ",
    "2013-01-02T00:00:00.5Z",
    "yesterday",
    None,
]
_MD = [
    'change="created"',
    'change="updated"',
    'change="deleted"',
    'change="gone"',
    "",
    f'hash="{HASH}"',
    'hash="md5:1"',
    f'hash=" {HASH} "',
    'length="7"',
    'length="x"',
    'length="007"',
    'type="text/plain"',
    'datetime="2013-01-02T00:00:09Z"',
    'xmlns:o="urn:o" o:x="1"',
    'capability="resourcelist"',
]
_LINKS = [
    '<rs:ln rel="alternate" href="http://e.com/b"/>',
    '<rs:ln rel="" href="http://e/"/>',
    '<rs:ln href="http://e/"/>',
    '<rs:ln rel="a" href="h" pri="1"/>',
    "",
]
_EXTRA = [
    "",
    "",
    "",
    "<changefreq>daily</changefreq>",
    "<foo/>",
    "<loc>http://e.com/2</loc>",
    "<lastmod>2013-01-02T00:00:00Z</lastmod>",
    '<rs:md change="created"/>',
]
_ROOT_MD = ['<rs:md capability="changelist-notification"/>'] * 6 + [
    '<rs:md capability="changelist" from="2013-01-01T00:00:00Z"/>',
    '<rs:md capability="changelist-notification" at="2013-01-01T00:00:00Z"/>',
    '<rs:md capability="resourcelist"/>',
    "",
]


def _random_entry(rng: random.Random) -> str:
    md_attrs: list[str] = []
    if rng.random() < 0.9:
        md_attrs.append(rng.choice(_MD[:3]))
    for choice in rng.sample(_MD, rng.randint(0, 3)):
        if choice.split("=")[0] not in " ".join(md_attrs):
            md_attrs.append(choice)
    links = "".join(rng.choice(_LINKS) for _ in range(rng.randint(0, 2)))
    return entry(
        rng.choice(_LOCS), rng.choice(_TIMES), " ".join(md_attrs), links, rng.choice(_EXTRA)
    )


def test_seeded_fuzz_gives_equal_verdicts() -> None:
    rng = random.Random(22)
    taken = declined = 0
    for _ in range(3000):
        entries = [_random_entry(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        if rng.random() < 0.5:  # the common, plain shape, some of it made wrong below
            entries = [entry(rng.choice(_LOCS[:2]), rng.choice(_TIMES[:2]), rng.choice(_MD[:3]))]
        root_extra = rng.choice(["", "", '<rs:ln rel="up" href="http://e.com/c"/>', "<x/>"])
        limits = rng.choice(
            [Limits()] * 6
            + [
                Limits(max_value_chars=20),
                Limits(max_links=0),
                Limits(max_attributes=1),
                Limits(max_entries=1),
            ]
        )
        body = doc(entries, rng.choice(_ROOT_MD), root_extra)
        if same(body, limits):
            taken += 1
        else:
            declined += 1
    # Both branches are exercised, the fast one on most plain documents.
    assert taken > 400 and declined > 400, (taken, declined)


@pytest.mark.parametrize("where", ["root", "entry", "link"])
def test_thousands_of_attributes_are_counted_not_listed(where: str) -> None:
    """lxml lists attributes in quadratic time: 20,000 on one element took the fast path
    a second before it counted them first."""
    attrs = " ".join(f'a{i}="1"' for i in range(20_000))
    root_md = f'<rs:md capability="changelist-notification" {attrs if where == "root" else ""}/>'
    md = f'change="created" {attrs}' if where == "entry" else 'change="created"'
    links = f'<rs:ln rel="a" href="http://e/" {attrs}/>' if where == "link" else ""
    body = doc([entry(md=md, links=links)], root_md=root_md)
    root = parse_root(body, max_bytes=1 << 22)
    limits = Limits(max_attributes=100_000)
    started = time.process_time()
    assert quick_ingest.quick_rows(root, limits) is None
    assert quick_ingest.quick_rows(root) is None
    assert time.process_time() - started < 0.1 * TIME_SCALE


def _stamp(rng: random.Random) -> str:
    """A ``YYYY-MM-DDThh:mm:ssZ`` spelling, valid or not: years before 1000, month 13,
    day 31 of a short month, 24:00:00, leap seconds, February 29 in and out of leap years."""
    year = rng.choice([0, 1, 999, 1000, 1999, 2000, 2012, 2013, 2100, 9999])
    if rng.random() < 0.7:  # a valid one
        month, day = rng.randint(1, 12), rng.randint(1, 28)
        hour, minute, second = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
        return f"{max(year, 1):04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"
    month = rng.choice([1, 2, 2, 4, 12, 13, 0])
    day = rng.choice([1, 28, 29, 30, 31, 0])
    hour, minute, second = rng.choice([0, 23, 24]), rng.choice([0, 59, 60]), rng.choice([0, 59, 60])
    return f"{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"


def test_seeded_fuzz_of_stamps_and_their_order() -> None:
    """The fast path stores and orders ``<lastmod>`` by its text: the full path's verdict,
    stored spelling and order, on stamps near every calendar edge."""
    rng = random.Random(2022)
    taken = 0
    for _ in range(1500):
        stamps = sorted(_stamp(rng) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.3:
            rng.shuffle(stamps)
        body = doc([entry(f"http://example.com/{n}", stamp) for n, stamp in enumerate(stamps)])
        taken += same(body)
    assert taken > 300, taken


_HOSTILE = [
    # billion laughs and an external entity: refused before either path reads an entry
    '<!DOCTYPE urlset [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>',
    '<!DOCTYPE urlset [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    '<!DOCTYPE urlset SYSTEM "http://example.invalid/x.dtd">',
]


def _hostile(rng: random.Random) -> tuple[bytes, Limits]:
    """A plain notification made hostile one way: DOCTYPEs, deep nesting, a huge or
    repeated attribute, thousands of attributes or links, a huge text, bytes flipped."""
    plain = doc([entry(md=f'change="updated" hash="{HASH}" length="3" type="t"')])
    kind = rng.randrange(7)
    if kind == 0:
        body = plain.replace(b"<urlset", rng.choice(_HOSTILE).encode() + b"<urlset", 1)
    elif kind == 1:
        depth = rng.choice([5, 17, 300, 3000])
        nest = "<o:x>" * depth + "</o:x>" * depth
        inner = entry(loc="http://e.com/" + nest) if rng.random() < 0.5 else entry(extra=nest)
        body = doc([inner], root_attrs=' xmlns:o="urn:o"')
    elif kind == 2:
        value = "x" * rng.choice([8192, 8193, 100_000])
        body = doc([entry(md=f'change="created" type="{value}"')])
    elif kind == 3:
        attrs = " ".join(f'a{i}="1"' for i in range(rng.choice([3, 63, 64, 65, 2000])))
        body = doc([entry(md=f'change="created" {attrs}')])
    elif kind == 4:
        link = '<rs:ln rel="a" href="http://e/"/>'
        body = doc([entry(links=link * rng.choice([1, 1023, 1024, 1025]))])
    elif kind == 5:
        body = doc([entry(loc="http://e.com/" + "y" * rng.choice([100, 8180, 9000]))])
    else:
        flipped = bytearray(plain)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        body = bytes(flipped)
    return body, rng.choice([Limits(), Limits(), Limits(max_attributes=8, max_links=4)])


def test_seeded_fuzz_of_hostile_documents() -> None:
    """Hostile XML gets the full path's verdict and message from the fast path's entry
    point too, quickly."""
    rng = random.Random(1122)
    errors = 0
    for _ in range(600):
        body, limits = _hostile(rng)
        same(body, limits)
        errors += isinstance(outcome(full_path, body, limits), tuple)
    assert errors > 150, errors


#: Characters around each rule's edges: other scripts' digits and letters that case-fold to
#: ASCII ones (the long s, the Kelvin sign), controls that LOC or a hash list allows or not.
_ODD = [
    *'09aAZT:-.+/?#"\\',
    *"\t\n \x7f\x85\xa0\u2028",
    *"\u017f\u212a\u0663\u00b2\u00e9",
]


def _mutate(value: str, rng: random.Random) -> str:
    """``value`` with one character replaced, inserted or removed."""
    at = rng.randrange(len(value) + 1)
    odd = rng.choice(_ODD)
    kind = rng.randrange(3)
    if kind == 0:
        return value[:at] + odd + value[at + 1 :]
    if kind == 1:
        return value[:at] + odd + value[at:]
    return value[:at] + value[at + 1 :]


def test_seeded_fuzz_of_values_one_entry_among_many() -> None:
    """One loc, lastmod or hash made odd at a random place among up to 60 plain entries:
    the fast path checks each kind of value for the whole document at once (branch
    ingest-cut), so the odd one must still decide the verdict, wherever it is."""
    rng = random.Random(4022)
    taken = declined = 0
    for _ in range(1500):
        count = rng.choice([1, 2, 3, 17, 60])
        values = [
            [
                f"http://example.com/r/{n}?v={n * 7}",
                f"2013-01-02T00:{n // 60:02}:{n % 60:02}Z",
                f"md5:{n:032x}",
            ]
            for n in range(count)
        ]
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            row = rng.choice(values)
            field = rng.randrange(3)
            row[field] = _mutate(row[field], rng)
        entries = [
            entry(loc, stamp, f'change="updated" hash="{digest}"') for loc, stamp, digest in values
        ]
        if same(doc(entries)):
            taken += 1
        else:
            declined += 1
    assert taken > 300 and declined > 300, (taken, declined)


def test_the_joined_checks_are_the_per_value_checks() -> None:
    """Locs and hashes are checked joined by NUL in one regex call: that is the per-value
    check only while neither pattern can match a NUL (a NUL-free value can't straddle the
    separator). Seeded pairs of values, each valid or not, give the same verdict both ways."""
    from resourcesync.validate import HASH_LIST

    for pattern in (events.LOC, HASH_LIST):
        assert pattern.search("\0") is None
        assert pattern.fullmatch("x\0x") is None
    rng = random.Random(22)
    locs = ["http://a.example/x", "https://b.example/?q#f", "ftp://c.example/", "http://", "x"]
    hashes = ["md5:" + "a" * 32, " sha-1:" + "0" * 40 + " ", "md5:" + "a" * 31, "sha-256:", ""]
    for _ in range(2_000):
        for check, joined, values in (
            (events.LOC.fullmatch, quick_ingest._LOCS, locs),
            (HASH_LIST.fullmatch, quick_ingest._HASHES, hashes),
        ):
            picked = [rng.choice(values) + rng.choice(["", " ", "é", "\x7f"]) for _ in range(3)]
            each = all(check(value) is not None for value in picked)
            assert (joined("\0".join(picked)) is not None) == each, picked

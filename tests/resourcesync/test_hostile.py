"""Hostile input: each attack fails fast, with the package's own error, in bounded memory."""

from __future__ import annotations

import mmap
import random
import resource
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from lxml import etree

from resourcesync import (
    DocumentTooLargeError,
    LimitExceededError,
    ParseError,
    UnsafeDocumentError,
    parse,
    parse_root,
)

MB = 1024 * 1024
SITEMAP = "http://www.sitemaps.org/schemas/sitemap/0.9"

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [
  <!ENTITY lol "lol">
  <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
  <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
  <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
  <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
  <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
  <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
  <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
  <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
  <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="resourcelist" at="2013-01-01T00:00:00Z"/>
  <url><loc>&lol9;</loc></url>
</urlset>
"""

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="resourcelist" at="2013-01-01T00:00:00Z"/>
  <url><loc>&xxe;</loc></url>
</urlset>
"""

EXTERNAL_DTD = b"""<?xml version="1.0"?>
<!DOCTYPE urlset SYSTEM "http://127.0.0.1:9/evil.dtd">
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>
"""

PARAMETER_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>
"""


@contextmanager
def bounded_memory(limit: int = 50 * MB) -> Iterator[None]:
    """Python allocations (tracemalloc) and the process high-water mark (libxml2 too)."""
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    try:
        yield
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    assert peak < limit, f"Python peak {peak / MB:.1f} MB"
    assert rss_growth < limit, f"max RSS grew {rss_growth / MB:.1f} MB"


def raises_bounded(exc: type[Exception], func: Callable[[], object]) -> Exception:
    with bounded_memory(), pytest.raises(exc) as info:
        func()
    return info.value


@pytest.mark.timeout(5)
def test_billion_laughs() -> None:
    err = raises_bounded(UnsafeDocumentError, lambda: parse(BILLION_LAUGHS))
    assert "DOCTYPE" in str(err)


@pytest.mark.timeout(5)
@pytest.mark.parametrize("data", [XXE, EXTERNAL_DTD, PARAMETER_ENTITY], ids=["xxe", "dtd", "pe"])
def test_external_entities(data: bytes) -> None:
    err = raises_bounded(UnsafeDocumentError, lambda: parse(data, validate=False))
    assert "root:" not in str(err)


@pytest.mark.timeout(5)
def test_one_gigabyte_is_refused_before_reading() -> None:
    # Anonymous mmap pages are never touched unless read: the length check comes first.
    with mmap.mmap(-1, 1024 * MB) as region:
        view = memoryview(region)
        try:
            err = raises_bounded(DocumentTooLargeError, lambda: parse(view))
        finally:
            view.release()
    assert isinstance(err, DocumentTooLargeError)
    assert err.http_status == 413 and err.size == 1024 * MB


@pytest.mark.timeout(5)
def test_max_bytes_is_configurable() -> None:
    data = b"<urlset/>" * 20
    with pytest.raises(DocumentTooLargeError) as info:
        parse(data, max_bytes=100)
    assert info.value.limit == 100 and info.value.rule == "document.max-bytes"


@pytest.mark.timeout(5)
def test_deep_nesting() -> None:
    depth = 100_000
    data = (f'<urlset xmlns="{SITEMAP}">' + "<a>" * depth + "</a>" * depth + "</urlset>").encode()
    raises_bounded(UnsafeDocumentError, lambda: parse(data))


@pytest.mark.timeout(5)
def test_nesting_beyond_our_limit_but_within_libxml2s() -> None:
    inner = "<x:a xmlns:x='urn:x'>" + "<x:a>" * 30 + "</x:a>" * 31
    data = (
        f'<urlset xmlns="{SITEMAP}" xmlns:rs="http://www.openarchives.org/rs/terms/">'
        '<rs:md capability="resourcelist" at="2013"/>'
        f"<url><loc>a</loc>{inner}</url></urlset>"
    ).encode()
    with pytest.raises(UnsafeDocumentError, match="deeper"):
        parse(data)


@pytest.mark.timeout(5)
def test_many_attributes_and_long_values_stay_bounded() -> None:
    attributes = " ".join(f'x:a{i}="{i}"' for i in range(10_000))
    data = (
        f'<urlset xmlns="{SITEMAP}" xmlns:rs="http://www.openarchives.org/rs/terms/"'
        f' xmlns:x="urn:x"><rs:md capability="resourcelist" at="2013" {attributes}/>'
        f"<url><loc>{'a' * MB}</loc></url></urlset>"
    ).encode()
    err = raises_bounded(LimitExceededError, lambda: parse(data))
    assert isinstance(err, LimitExceededError) and err.limit == "max_attributes"
    data = data.replace(attributes.encode(), b"")
    err = raises_bounded(LimitExceededError, lambda: parse(data))
    assert isinstance(err, LimitExceededError) and err.limit == "max_value_chars"


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not xml",
        b"<urlset",
        b"\xff\xfe<\x00",
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">&undefined;</urlset>',
        b"<urlset/>",  # no namespace
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.84"/>',
        b'<feed xmlns="http://www.w3.org/2005/Atom"/>',
        b'<?xml version="1.0" encoding="UTF-8"?><a/><b/>',
    ],
)
def test_not_a_sitemap(data: bytes) -> None:
    with pytest.raises(ParseError) as info:
        parse(data)
    assert info.value.http_status == 400


def test_accepts_bytes_like() -> None:
    data = (
        f'<urlset xmlns="{SITEMAP}" xmlns:rs="http://www.openarchives.org/rs/terms/">'
        '<rs:md capability="resourcelist" at="2013"/><url><loc>a</loc></url></urlset>'
    ).encode()
    expected = parse(data)
    assert parse(bytearray(data)) == expected
    assert parse(memoryview(data)) == expected


@pytest.mark.timeout(5)
def test_doctype_after_a_long_prolog() -> None:
    comment = b"<!--" + b"x" * 10_000 + b"-->\n"
    data = BILLION_LAUGHS.replace(b"<!DOCTYPE", comment + b"<!DOCTYPE", 1)
    raises_bounded(UnsafeDocumentError, lambda: parse(data))
    data = XXE.replace(b"<!DOCTYPE", comment + b"<!DOCTYPE", 1)
    raises_bounded(UnsafeDocumentError, lambda: parse(data))


@pytest.mark.timeout(5)
def test_doctype_in_utf16() -> None:
    data = XXE.replace(b'<?xml version="1.0"?>', b"").decode().encode("utf-16")
    raises_bounded(UnsafeDocumentError, lambda: parse(data))


def _reference_parse_root(data: bytes) -> object:
    """parse_root's DOCTYPE scan as it was: all three spellings searched in the head."""
    for codec in ("ascii", "utf-16-le", "utf-16-be"):
        if data.find("<!DOCTYPE".encode(codec), 0, 4096) >= 0:
            raise UnsafeDocumentError("DOCTYPE declarations (DTDs, entities) are not allowed")
    return parse_root(data)


def _verdict(func: Callable[[bytes], object], data: bytes) -> object:
    try:
        root = func(data)
    except Exception as exc:  # the verdict is what is compared
        return type(exc).__name__, str(exc)
    return etree.tostring(root)  # type: ignore[call-overload]


def test_seeded_fuzz_of_doctype_scans() -> None:
    """The head is searched for NUL before the UTF-16 spellings of ``<!DOCTYPE``: the same
    verdict and message as searching for all three, on documents in UTF-8, UTF-16 with and
    without BOM and UTF-32, with DOCTYPEs, stray NULs and long prologs."""
    rng = random.Random(1022)
    doc = (
        f'<urlset xmlns="{SITEMAP}" xmlns:rs="http://www.openarchives.org/rs/terms/">'
        '<rs:md capability="resourcelist" at="2013-01-01T00:00:00Z"/>'
        "<url><loc>http://e.com/</loc></url></urlset>"
    )
    pieces = [
        "",
        "<!DOCTYPE urlset>",
        '<!DOCTYPE urlset [<!ENTITY x "y">]>',
        "<!-- c -->",
        "<!--" + "x" * 5000 + "-->",
        "\0",
        "<!DOC\0TYPE>",
        " ",
    ]
    codecs = ["utf-8", "utf-8", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1"]
    unsafe = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 3))) + doc
        if rng.random() < 0.5:
            text = '<?xml version="1.0"?>' + text
        data = text.encode(rng.choice(codecs))
        if rng.random() < 0.2:  # a byte flipped or a NUL dropped in
            at = rng.randrange(len(data))
            data = data[:at] + bytes([rng.choice([0, 60, 33, rng.randrange(256)])]) + data[at + 1 :]
        expected = _verdict(_reference_parse_root, data)
        assert _verdict(parse_root, data) == expected, data[:200]
        unsafe += isinstance(expected, tuple) and expected[0] == "UnsafeDocumentError"
    assert unsafe > 500, unsafe

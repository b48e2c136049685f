"""hub.core.events: ids, stored changes, documents to changes, and stream filters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from hub.core.events import (
    Event,
    EventFilter,
    change_from_entry,
    changes_from_document,
    decode,
    format_id,
    id_ms,
    parse_id,
    with_id,
)
from hub.core.exceptions import BadRequest, DamagedData
from hub.core.packed import Packed, pack, unpack
from hub.core.quick_ingest import packed_from_document
from resourcesync import DocumentError, parse

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def notification(*urls: str, capability: str = "changelist-notification") -> bytes:
    times = ' from="2026-11-22T09:00:00Z"' if capability == "changelist" else ""
    body = f'<urlset {NS}><rs:md capability="{capability}"{times}/>' + "".join(urls) + "</urlset>"
    return body.encode()


def url(loc: str, change: str = "updated", extra: str = "") -> str:
    return (
        f"<url><loc>{loc}</loc><lastmod>2026-11-22T10:00:00.5Z</lastmod>"
        f'<rs:md change="{change}"{extra}/></url>'
    )


def test_ids_parse_compare_and_format() -> None:
    assert parse_id("1700000000000-3") == (1700000000000, 3)
    assert parse_id("5") == (5, 0)
    assert parse_id("18446744073709551615-18446744073709551615") == (2**64 - 1, 2**64 - 1)
    assert parse_id("1-2") < parse_id("1-10") < parse_id("2-0")
    assert format_id((12, 34)) == "12-34"
    assert id_ms("1700000000123-9") == 1700000000123


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "abc",
        "1-",
        "-1",
        "1-2-3",
        "1" * 21,
        " 1-2",
        "+5",
        "5 ",
        "1-2\n",
        "٣",
        "１",
        "18446744073709551616",
        "1-18446744073709551616",
        "99999999999999999999-0",
    ],
)
def test_bad_ids_are_400(bad: str) -> None:
    with pytest.raises(BadRequest, match="invalid event id"):
        parse_id(bad)


def test_client_json_splices_id_and_topic_without_reencoding() -> None:
    stored = orjson.dumps({"loc": "http://x/a", "lastmod": "2026-01-01T00:00:00Z", "change": "c"})
    out = orjson.loads(with_id("1-0", "news", stored))
    assert out == {"id": "1-0", "topic": "news", **orjson.loads(stored)}
    event = Event("1-0", stored)
    assert event.json("news") is event.json("news")  # computed once
    assert event.fields == decode(stored)
    calls: list[str] = []

    def render(e: Event) -> bytes:
        calls.append(e.id)
        return b"<x/>"

    assert event.xml(render) == event.xml(render) == b"<x/>"
    assert calls == ["1-0"]


def test_change_from_entry_keeps_every_published_field() -> None:
    body = notification(
        url(
            "http://x/a?b=1&amp;c=2",
            "created",
            ' hash="md5:1e0d5cb8ef6ba40c99b14c0237be735e" length="12" type="text/plain"',
        )
    )
    doc = parse(body)
    change = change_from_entry(doc.entries[0], 0)
    assert change.loc == "http://x/a?b=1&c=2"
    assert change.change == "created"
    assert decode(change.event) == {
        "loc": "http://x/a?b=1&c=2",
        "lastmod": "2026-11-22T10:00:00.5Z",
        "change": "created",
        "hash": "md5:1e0d5cb8ef6ba40c99b14c0237be735e",
        "length": 12,
        "type": "text/plain",
    }


def test_changes_from_document_accepts_notifications_and_change_lists() -> None:
    two = [url("http://x/1"), url("http://x/2", "deleted")]
    assert [c.loc for c in changes_from_document(notification(*two), 10_000)] == [
        "http://x/1",
        "http://x/2",
    ]
    as_changelist = notification(*two, capability="changelist")
    assert [c.change for c in changes_from_document(as_changelist, 10_000)] == [
        "updated",
        "deleted",
    ]


def test_changes_from_document_refuses_what_is_not_a_notification() -> None:
    with pytest.raises(BadRequest, match="empty body"):
        changes_from_document(b"", 10_000)
    with pytest.raises(BadRequest, match="got resourcelist"):
        changes_from_document(
            f'<urlset {NS}><rs:md capability="resourcelist" at="2026-01-01T00:00:00Z"/>'
            "</urlset>".encode(),
            10_000,
        )
    with pytest.raises(BadRequest, match="carries no changes"):
        changes_from_document(notification(), 10_000)
    with pytest.raises(DocumentError):
        changes_from_document(b"<not xml", 10_000)


def test_filter_from_query() -> None:
    assert EventFilter.from_query({}, []) is None
    f = EventFilter.from_query({"change": "created, deleted"}, ["http://x/a"])
    assert f == EventFilter(frozenset({"created", "deleted"}), ("http://x/a",))
    assert f.accepts({"change": "created", "loc": "http://x/a/1"})
    assert not f.accepts({"change": "updated", "loc": "http://x/a/1"})
    assert not f.accepts({"change": "created", "loc": "http://y/"})
    only_prefix = EventFilter.from_query({}, ["http://x/", "http://y/"])
    assert only_prefix is not None and only_prefix.accepts(
        {"change": "updated", "loc": "http://y/1"}
    )


@pytest.mark.parametrize("value", ["", "moved", "created,nope", ","])
def test_bad_change_filters_are_400(value: str) -> None:
    with pytest.raises(BadRequest, match="change filter"):
        EventFilter.from_query({"change": value}, [])


def test_too_many_prefixes_is_400() -> None:
    with pytest.raises(BadRequest, match="at most 32"):
        EventFilter.from_query({}, [f"http://x/{i}" for i in range(33)])


# -- the packed ingest path agrees with parse + change_from_entry + pack ------------------

EXAMPLES = Path(__file__).parents[2] / "resourcesync" / "examples"
_GOOD_URL = url("http://example.org/a")
_CORPUS: dict[str, bytes] = {
    "one change": notification(_GOOD_URL),
    "several, links and 1.1 datetime": notification(
        url("http://example.org/a", "created", ' hash="md5:' + "0" * 32 + '" length="7"'),
        "<url><loc>http://example.org/b?x=1</loc><lastmod>2026-11-22T12:00:00+02:00</lastmod>"
        '<rs:md change="deleted" type="text/html" datetime="2026-11-22T10:00:01Z"/>'
        '<rs:ln rel="alternate" href="http://example.org/b.pdf" modified="2026-11-22" pri="3"/>'
        "</url>",
    ),
    "a change list": notification(_GOOD_URL, capability="changelist"),
    "no changes": notification(),
    "a resource list": notification(_GOOD_URL, capability="resourcelist"),
    "empty body": b"",
    "not XML": b"<urlset",
    "a DOCTYPE": b'<!DOCTYPE urlset [<!ENTITY x "y">]>' + notification(_GOOD_URL),
    "no change": notification(url("http://example.org/a").replace(' change="updated"', "")),
    "bad change": notification(url("http://example.org/a", "moved")),
    "bad datetime": notification(_GOOD_URL.replace("2026-11-22T10", "2026-02-30T10")),
    "bad hash": notification(url("http://example.org/a", extra=' hash="md5:xyz"')),
    "bad length": notification(url("http://example.org/a", extra=' length="-1"')),
    "relative loc": notification(url("/a")),
    "out of order": notification(
        _GOOD_URL, url("http://example.org/b").replace("T10:00:00.5Z", "T09:00:00Z")
    ),
    "link without href": notification(
        _GOOD_URL.replace("</url>", '<rs:ln rel="alternate"/></url>')
    ),
    "two locs": notification(_GOOD_URL.replace("</loc>", "</loc><loc>http://x/</loc>")),
    "an index": notification(capability="changelist").replace(b"urlset", b"sitemapindex"),
}
_CORPUS.update({path.name: path.read_bytes() for path in sorted(EXAMPLES.glob("*.xml"))})


def _reference(body: bytes) -> Packed:
    """The full path: models from ``parse``, a ``Change`` per entry, then ``pack``."""
    changes = changes_from_document(body, 1 << 20)  # the document-level 4xx, if any
    entries = parse(body, max_bytes=1 << 20).entries
    assert changes == [change_from_entry(entry, i) for i, entry in enumerate(entries)]
    return pack(changes)


def _outcome(make: Callable[[], Packed]) -> object:
    try:
        return make()
    except (DocumentError, BadRequest) as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("name", sorted(_CORPUS))
def test_the_publish_path_agrees_with_the_full_parse(name: str) -> None:
    body = _CORPUS[name]
    fast = _outcome(lambda: packed_from_document(body, 1 << 20))
    assert fast == _outcome(lambda: _reference(body))


def test_the_corpus_has_both_valid_and_invalid_documents() -> None:
    outcomes = [_outcome(lambda b=b: packed_from_document(b, 1 << 20)) for b in _CORPUS.values()]
    valid = [o for o in outcomes if isinstance(o, Packed)]
    assert len(valid) >= 4 and len(outcomes) - len(valid) >= 15
    several = packed_from_document(_CORPUS["several, links and 1.1 datetime"], 1 << 20)
    rows = unpack(several)
    assert several.changes == 2 and len(rows) == 2
    second = orjson.loads(rows[1][2])
    assert second["lastmod"] == "2026-11-22T10:00:01Z"  # rs:md datetime wins over lastmod
    assert second["links"][0]["modified"] == "2026-11-22T00:00:00Z"


@pytest.mark.parametrize(
    "stored",
    [
        b"",
        b"\xff{",
        b"[1, 2]",
        b'{"loc": 5, "lastmod": "x", "change": "created"}',
        b'{"lastmod": "2026-01-01T00:00:00Z", "change": "created"}',
        b'{"loc": "http://x/a", "change": "created"}',
    ],
)
def test_a_stored_change_the_hub_did_not_write_is_damaged_data(stored: bytes) -> None:
    with pytest.raises(DamagedData, match="stored change"):
        decode(stored)

"""Serialization layout, the façade API and the model conveniences."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from lxml import etree

import resourcesync
from resourcesync import (
    Capability,
    Change,
    ChangeList,
    ChangeListNotification,
    DocumentError,
    DocumentTooLargeError,
    Entry,
    Link,
    Metadata,
    ParseError,
    ResourceList,
    ResourceSyncError,
    UnsafeDocumentError,
    ValidationError,
    parse,
    serialize,
)

T0 = datetime(2013, 1, 2, 13, tzinfo=UTC)
T1 = datetime(2013, 1, 2, 14, tzinfo=UTC)


def notification() -> ChangeListNotification:
    return ChangeListNotification(
        links=[Link(rel="up", href="http://example.com/capabilitylist.xml")],
        entries=[
            Entry(
                loc="http://example.com/res1?a=1&b=<2>",
                lastmod=T0,
                md=Metadata(change=Change.CREATED, hash="md5:" + "a" * 32, length=8876),
                links=[Link(rel="alternate", href="http://example.com/res1.pdf", pri=1)],
            ),
            Entry(loc="http://example.com/res2", lastmod=T1, md=Metadata(change="deleted")),
        ],
    )


def test_layout_follows_the_examples() -> None:
    text = serialize(notification()).decode()
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<urlset ')
    assert 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"' in text
    assert 'xmlns:rs="http://www.openarchives.org/rs/terms/"' in text
    # Root links first, then the root rs:md (Examples 6, 7, 12-33).
    assert text.index('<rs:ln rel="up"') < text.index('<rs:md capability="changelist-notif')
    assert text.index("<rs:md capability") < text.index("<url>")
    first = text[text.index("<url>") : text.index("</url>")]
    order = [first.index(tag) for tag in ("<loc>", "<lastmod>", "<rs:md ", "<rs:ln ")]
    assert order == sorted(order)
    assert "<loc>http://example.com/res1?a=1&amp;b=&lt;2&gt;</loc>" in text
    assert "<lastmod>2013-01-02T13:00:00Z</lastmod>" in text
    assert '<rs:md change="created" hash="md5:' in text


def test_without_declaration() -> None:
    data = serialize(notification(), xml_declaration=False)
    assert data.startswith(b"<urlset ")
    assert parse(data) == notification()


def test_output_is_what_lxml_reads() -> None:
    root = etree.fromstring(serialize(notification()))
    assert root.nsmap == {
        None: "http://www.sitemaps.org/schemas/sitemap/0.9",
        "rs": "http://www.openarchives.org/rs/terms/",
    }


def test_index_root_is_sitemapindex() -> None:
    data = serialize(resourcesync.ChangeListIndex(md=Metadata(from_=T0), entries=[]))
    assert b"<sitemapindex " in data and b"<urlset" not in data


def test_extra_attributes_round_trip() -> None:
    ns = "{http://example.org/ext}"
    md = Metadata(
        change="updated", extra={f"{ns}a": 'x"y', f"{ns}b": "tab\tnew\nline", "plain": "p"}
    )
    ln = Link(rel="via", href="h", extra={"{http://www.w3.org/XML/1998/namespace}lang": "en"})
    doc = ChangeListNotification(entries=[Entry(loc="l", lastmod=T0, md=md, links=[ln])])
    data = serialize(doc)
    assert b'xml:lang="en"' in data
    assert parse(data) == doc


def test_capability_filled_in_by_the_class() -> None:
    assert ChangeList(md=Metadata(from_=T0)).md.capability is Capability.CHANGELIST
    assert ResourceList().md.capability == "resourcelist"
    assert ChangeList(md={"from": T0}).md.from_ == T0


def test_entry_change_time_prefers_datetime() -> None:
    entry = Entry(loc="l", lastmod=T0, md=Metadata(change="updated", datetime=T1))
    assert entry.change is Change.UPDATED
    assert entry.change_time == T1
    assert Entry(loc="l", lastmod=T0).change_time == T0
    assert Entry(loc="l").change is None


def test_datetime_1_1_form_round_trips() -> None:
    doc = ChangeListNotification(
        entries=[Entry(loc="l", md=Metadata(change="created", datetime=T0))]
    )
    data = serialize(doc)
    assert b'datetime="2013-01-02T13:00:00Z"' in data
    assert parse(data) == doc


def test_models_are_frozen() -> None:
    with pytest.raises(Exception, match="frozen"):
        notification().entries[0].loc = "x"  # type: ignore[misc]


def test_model_copy_of_parsed_model() -> None:
    entry = parse(serialize(notification())).entries[0]
    copy = entry.model_copy(update={"loc": "http://other"})
    assert copy.loc == "http://other" and entry.loc != copy.loc
    assert entry.model_dump()["md"]["change"] == "created"


def test_exception_tree() -> None:
    for exc in (ParseError, UnsafeDocumentError, DocumentTooLargeError, ValidationError):
        assert issubclass(exc, DocumentError)
    assert issubclass(DocumentError, ResourceSyncError)
    assert ParseError.http_status == 400
    assert DocumentTooLargeError.http_status == 413


def test_facade_exports() -> None:
    for name in resourcesync.__all__:
        assert hasattr(resourcesync, name)

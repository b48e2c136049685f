"""hub.core.rendering: every kind of XML the hub writes parses back with resourcesync.parse."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from hub.core import rendering
from hub.core.events import Event
from hub.core.topics import HubUrls
from resourcesync import (
    CapabilityList,
    ChangeList,
    ChangeListIndex,
    ChangeListNotification,
    ResourceList,
    SourceDescription,
    format_datetime,
    parse,
)

U = HubUrls("http://hub.example")
RSHUB_ID = f"{{{rendering.RSHUB_NS}}}id"
RSHUB_LASTMOD = f"{{{rendering.RSHUB_NS}}}lastmod"


def stored(loc: str, change: str = "updated", **extra: object) -> bytes:
    return orjson.dumps({"loc": loc, "lastmod": "2026-11-22T10:00:00Z", "change": change, **extra})


EVENTS = [
    Event("1795341600120-0", stored("http://x/a?b=1&c=<2>", "created", length=3)),
    Event(
        "1795341600500-1",
        stored(
            "http://x/quote\"'",
            "updated",
            hash="md5:1e0d5cb8ef6ba40c99b14c0237be735e",
            type="text/plain",
            links=[{"rel": "alternate", "href": "http://x/alt?a&b", "type": "text/html"}],
        ),
    ),
    Event("1795341601000-0", stored("http://x/gone", "deleted")),
]


@pytest.mark.parametrize("ms", [0, 1, 120, 500, 999, 1795341600120, 1795341600100])
def test_times_are_spelled_as_resourcesync_spells_them(ms: int) -> None:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    assert rendering.w3c_ms(ms) == format_datetime(moment)


def test_webSub_notification_round_trips() -> None:
    body = rendering.notification(EVENTS, up=U.capabilitylist("t"))
    doc = parse(body)
    assert isinstance(doc, ChangeListNotification)
    assert [e.loc for e in doc.entries] == [
        "http://x/a?b=1&c=<2>",
        "http://x/quote\"'",
        "http://x/gone",
    ]
    assert [str(e.md.change) for e in doc.entries if e.md] == ["created", "updated", "deleted"]
    assert [e.md.extra[RSHUB_ID] for e in doc.entries if e.md] == [e.id for e in EVENTS]
    first = doc.entries[0].md
    assert first is not None and first.length == 3
    assert first.datetime == datetime(2026, 11, 22, 10, 0, 0, 120_000, tzinfo=UTC)
    second = doc.entries[1]
    assert second.links[0].href == "http://x/alt?a&b" and second.links[0].type == "text/html"
    assert [ln.href for ln in doc.links] == [U.capabilitylist("t")]


def test_a_change_in_a_webSub_body_and_on_a_change_list_page() -> None:
    """Push carries the publisher's lastmod; the documents a Destination polls carry the
    hub's receipt time in both lastmod and datetime, the publisher's as rshub:lastmod."""
    event = EVENTS[1]
    [pushed] = parse(rendering.notification([event])).entries
    page = rendering.RSHUB_URLSET_OPEN + rendering.root("changelist", [], from_=0)
    page += rendering.listed_change(event.id, event.fields) + rendering.URLSET_CLOSE
    [listed] = parse(page.encode()).entries
    received = datetime(2026, 11, 22, 10, 0, 0, 500_000, tzinfo=UTC)
    assert pushed.lastmod == datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
    assert listed.lastmod == received
    assert pushed.md is not None and listed.md is not None
    assert pushed.md.datetime == listed.md.datetime == received
    assert listed.md.extra[RSHUB_LASTMOD] == "2026-11-22T10:00:00Z"
    assert RSHUB_LASTMOD not in pushed.md.extra
    same = ("loc", "links")
    assert [getattr(listed, n) for n in same] == [getattr(pushed, n) for n in same]
    assert listed.md.model_dump(exclude={"extra"}) == pushed.md.model_dump(exclude={"extra"})
    assert listed.md.extra[RSHUB_ID] == pushed.md.extra[RSHUB_ID] == event.id
    assert ".5Z" in rendering.listed_change(event.id, event.fields) and ".500Z" not in page


def test_change_list_page_round_trips_and_respects_its_floor() -> None:
    floor = 1795341600300
    page = (
        rendering.RSHUB_URLSET_OPEN
        + rendering.root(
            "changelist",
            [("up", U.capabilitylist("t")), ("index", U.changelist_index("t"))],
            from_=floor,
            until=1795341602000,
        )
        + "".join(rendering.listed_change(e.id, e.fields, floor) for e in EVENTS)
        + rendering.URLSET_CLOSE
    )
    doc = parse(page.encode())
    assert isinstance(doc, ChangeList)
    times = [e.md.datetime for e in doc.entries if e.md and e.md.datetime]
    assert times[0] == datetime.fromtimestamp(floor / 1000, tz=UTC)  # not before from
    assert times == sorted(times)
    assert [e.lastmod for e in doc.entries] == times  # the same instant


def test_resource_list_round_trips() -> None:
    body = (
        rendering.RSHUB_URLSET_OPEN
        + rendering.root("resourcelist", [("up", U.capabilitylist("t"))], at=1, completed=2)
        + "".join(rendering.resource_entry(e.id, e.fields) for e in EVENTS[:2])
        + rendering.URLSET_CLOSE
    )
    doc = parse(body.encode())
    assert isinstance(doc, ResourceList)
    assert [e.loc for e in doc.entries] == ["http://x/a?b=1&c=<2>", "http://x/quote\"'"]
    assert doc.entries[1].md is not None and doc.entries[1].md.type == "text/plain"
    # lastmod as in the Change Lists: the receipt time; the publisher's as rshub:lastmod
    assert doc.entries[0].lastmod == datetime(2026, 11, 22, 10, 0, 0, 120_000, tzinfo=UTC)
    assert doc.entries[0].md is not None
    assert doc.entries[0].md.extra[RSHUB_LASTMOD] == "2026-11-22T10:00:00Z"


def test_the_lost_marker_round_trips_first_in_a_change_list() -> None:
    lost = "1795341600120-3"
    body = (
        rendering.RSHUB_URLSET_OPEN
        + rendering.root("changelist", [("up", U.capabilitylist("t"))], from_=1795341600119)
        + rendering.lost_marker(U.changes_lost("t"), lost, 1795341600119)
        + "".join(rendering.listed_change(e.id, e.fields) for e in EVENTS)
        + rendering.URLSET_CLOSE
    )
    doc = parse(body.encode())
    assert isinstance(doc, ChangeList)
    marker = doc.entries[0]
    assert marker.loc == "http://hub.example/topics/t/changes-lost"
    assert marker.md is not None and str(marker.md.change) == "updated"
    assert marker.md.datetime == marker.lastmod
    assert marker.md.datetime == datetime(2026, 11, 22, 10, 0, 0, 119_000, tzinfo=UTC)
    assert marker.md.extra[f"{{{rendering.RSHUB_NS}}}lost-through"] == lost


def test_indexes_capability_list_and_source_description_round_trip() -> None:
    index = (
        rendering.INDEX_OPEN
        + rendering.root("changelist", [("up", U.capabilitylist("t"))], from_=1000)
        + rendering.index_entry(U.changelist_page("t", 1), from_=1000, until=2000)
        + rendering.index_entry(U.changelist_page("t", 2), from_=2000)
        + rendering.INDEX_CLOSE
    )
    doc = parse(index.encode())
    assert isinstance(doc, ChangeListIndex)
    assert [e.loc for e in doc.entries] == [U.changelist_page("t", n) for n in (1, 2)]

    caps = (
        rendering.URLSET_OPEN
        + rendering.root("capabilitylist", [("up", U.source_description)])
        + rendering.capability_entry(U.resourcelist("t"), "resourcelist")
        + rendering.capability_entry(U.changelist_index("t"), "changelist")
        + rendering.capability_entry(U.topic("t"), "changelist-notification", [("hub", U.hub)])
        + rendering.URLSET_CLOSE
    )
    cap = parse(caps.encode())
    assert isinstance(cap, CapabilityList)
    assert cap.entries[2].links[0].href == U.hub

    sd = rendering.URLSET_OPEN + rendering.root("description", [])
    sd += rendering.capability_entry(U.capabilitylist("t"), "capabilitylist")
    assert isinstance(parse((sd + rendering.URLSET_CLOSE).encode()), SourceDescription)


def test_chunked_joins_parts_into_bounded_utf8_chunks() -> None:
    parts = ["é" * 10] * 25
    chunks = list(rendering.chunked(parts, size=100))
    assert b"".join(chunks).decode() == "".join(parts)
    assert len(chunks) == 3
    assert list(rendering.chunked([])) == []


def test_escaping_is_xml_sax_s_in_a_seeded_fuzz() -> None:
    # rendering escapes by itself (xml.sax is not imported on a restart's way to serving):
    # character data and attribute values exactly as xml.sax.saxutils does, markup included.
    import random
    from xml.sax.saxutils import escape, quoteattr

    rng = random.Random(22)
    alphabet = "&<>\"'\n\r\t ;#xa\u00e9\U0001f600"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))
        assert rendering.escape(text) == escape(text), text
        assert rendering.attr(text) == '"' + escape(text, rendering._ATTR_ENTITIES) + '"', text
        assert parse_attr(rendering.attr(text)) == parse_attr(quoteattr(text)), text


def parse_attr(quoted: str) -> str:
    """The value an XML parser reads from ``quoted`` (an attribute value with its quotes)."""
    from lxml import etree

    return str(etree.fromstring(f"<a v={quoted}/>".encode()).get("v"))

"""Property tests: any valid document of any type survives serialize -> parse unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resourcesync import (
    DOCUMENT_TYPES,
    Change,
    Document,
    Entry,
    Link,
    Metadata,
    parse,
    serialize,
    validate,
)
from resourcesync.namespaces import CHANGEFREQ_VALUES
from resourcesync.validate import PROFILES

# XML 1.0 characters, minus surrogates; tabs, newlines and carriage returns included.
XML_CHARS = st.characters(
    blacklist_categories=("Cs",),
    blacklist_characters=[chr(c) for c in range(0x20) if c not in (9, 10, 13)]
    + ["\ufffe", "\uffff"],
)
text = st.text(XML_CHARS, max_size=20)
# <loc> text is stripped when parsed, so generate it stripped and non-empty.
locs = st.text(XML_CHARS, min_size=1, max_size=30).map(str.strip).filter(bool)
zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
)
times = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1), timezones=zones
)
hex_digest = {
    algo: st.text("0123456789abcdefABCDEF", min_size=n, max_size=n)
    for algo, n in (("md5", 32), ("sha-1", 40), ("sha-256", 64))
}
hashes = st.lists(
    st.sampled_from(sorted(hex_digest)).flatmap(lambda a: hex_digest[a].map(f"{a}:".__add__)),
    min_size=1,
    max_size=3,
).map(" ".join)
segment = st.text("abcXYZ019-_é ", min_size=1, max_size=8).filter(lambda s: s not in {".", ".."})
paths = st.lists(segment, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))
extras = st.dictionaries(
    st.sampled_from(["{http://example.org/ns}a", "{urn:x}b-c", "{urn:y}d"]), text, max_size=2
)
lengths = st.integers(min_value=0, max_value=10**12)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


links = st.builds(
    Link,
    rel=st.sampled_from(["duplicate", "alternate", "describedby", "via"]) | locs,
    href=locs,
    modified=maybe(times),
    hash=maybe(hashes),
    length=maybe(lengths),
    type=maybe(text),
    pri=maybe(st.integers(min_value=1, max_value=999_999)),
    encoding=maybe(text),
    path=maybe(paths),
    extra=extras,
)


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, Any]:
    """Entry rs:md fields that every document type allows."""
    return {
        "hash": draw(maybe(hashes)),
        "length": draw(maybe(lengths)),
        "type": draw(maybe(text)),
        "encoding": draw(maybe(text)),
        "extra": draw(extras),
    }


@st.composite
def documents(draw: st.DrawFn, cls: type[Document]) -> Document:
    profile = PROFILES[(cls.capability, cls.is_index)]
    root: dict[str, Any] = {"extra": draw(extras)}
    if profile.root_time == "at" or (profile.root_time is None and draw(st.booleans())):
        root["at"] = draw(times)
        if draw(st.booleans()):
            root["completed"] = root["at"] + draw(st.timedeltas(timedelta(0), timedelta(days=9)))
    if profile.root_time == "from":
        root["from_"] = draw(times)
        if draw(st.booleans()):
            root["until"] = root["from_"] + draw(st.timedeltas(timedelta(0), timedelta(days=9)))
    capabilities = iter(draw(st.permutations([c.value for c in DOCUMENT_TYPES_CAPS])))
    entries = []
    clock = draw(times)
    for _ in range(draw(st.integers(0, 5))):
        md: dict[str, Any] | None = draw(metadata()) if draw(st.booleans()) else None
        lastmod = draw(maybe(times))
        if profile.entry_md or profile.entry_capability == "capabilitylist":
            md = md or draw(metadata())
        if md is not None and profile.entry_capability == "any":
            md["capability"] = next(capabilities)
        elif md is not None and profile.entry_capability:
            md["capability"] = profile.entry_capability
        if profile.changes:
            assert md is not None
            md["change"] = draw(st.sampled_from(list(Change)))
            clock += draw(st.timedeltas(timedelta(0), timedelta(hours=5)))
            if draw(st.booleans()):  # 1.1: the change time in rs:md/@datetime
                md["datetime"] = clock
            else:
                lastmod = clock
        if profile.path is not None:
            assert md is not None
            if profile.path == "all" or md.get("change") is not Change.DELETED:
                md["path"] = draw(paths)
        entries.append(
            Entry(
                loc=draw(locs),
                lastmod=lastmod,
                changefreq=draw(maybe(st.sampled_from(sorted(CHANGEFREQ_VALUES)))),
                md=None if md is None else Metadata(**md),
                links=draw(st.lists(links, max_size=2)),
            )
        )
    return cls(md=Metadata(**root), links=draw(st.lists(links, max_size=2)), entries=entries)


DOCUMENT_TYPES_CAPS = sorted({cls.capability for cls in DOCUMENT_TYPES.values()})
any_document = st.sampled_from(list(DOCUMENT_TYPES.values())).flatmap(documents)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_document)
def test_round_trip(doc: Document) -> None:
    validate(doc)
    data = serialize(doc)
    again = parse(data)
    assert type(again) is type(doc)
    assert again == doc
    assert serialize(again) == data


@settings(max_examples=50, deadline=None)
@given(any_document)
def test_round_trip_without_declaration(doc: Document) -> None:
    assert parse(serialize(doc, xml_declaration=False)) == doc

"""One failing document per validation rule: rule id, document, entry index, message.

Each case is checked through :func:`parse` (the inline checks) and, where the document
can be loaded without validation, through :func:`validate` on the loaded models too, so
both paths enforce the same rules.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

import pytest

from resourcesync import (
    ChangeList,
    ChangeListNotification,
    Document,
    Entry,
    Link,
    Metadata,
    ResourceList,
    ValidationError,
    parse,
    serialize,
    validate,
)

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<{root} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    ' xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
)
MD5 = "md5:" + "0" * 32


def xml(root_md: str, *entries: str, root: str = "urlset", links: str = "") -> bytes:
    """A document with the given root ``rs:md`` attributes and raw entry bodies."""
    tag = "sitemap" if root == "sitemapindex" else "url"
    body = "".join(f"<{tag}>{e}</{tag}>\n" for e in entries)
    md = f"<rs:md {root_md}/>" if root_md is not None else ""
    return (HEAD.format(root=root) + links + md + "\n" + body + f"</{root}>\n").encode()


def change(loc: str = "http://e/1", when: str = "2013-01-02T10:00:00Z", md: str = "") -> str:
    return f"<loc>{loc}</loc><lastmod>{when}</lastmod><rs:md change='updated' {md}/>"


CL = 'capability="changelist" from="2013-01-01T00:00:00Z"'
RL = 'capability="resourcelist" at="2013-01-01T00:00:00Z"'
NOTE = 'capability="changelist-notification"'

# (rule, document, index, xml)
CASES: list[tuple[str, str, int | None, bytes]] = [
    ("document.md-required", "urlset", None, xml(None, "<loc>x</loc>")),  # type: ignore[arg-type]
    ("document.md-repeated", "urlset", None, xml(RL + "/><rs:md " + RL)),
    ("document.capability-required", "urlset", None, xml('at="2013-01-01T00:00:00Z"')),
    ("document.capability-value", "bogus", None, xml('capability="bogus"')),
    (
        "document.index-not-allowed",
        "capabilitylist",
        None,
        xml('capability="capabilitylist"', root="sitemapindex"),
    ),
    ("resourcelist.at-required", "resourcelist", None, xml('capability="resourcelist"')),
    (
        "resourcelist.at-required",
        "resourcelist",
        None,
        xml('capability="resourcelist"', root="sitemapindex"),
    ),
    ("resourcedump.at-required", "resourcedump", None, xml('capability="resourcedump"')),
    (
        "resourcedump-manifest.at-required",
        "resourcedump-manifest",
        None,
        xml('capability="resourcedump-manifest"'),
    ),
    ("changelist.from-required", "changelist", None, xml('capability="changelist"')),
    (
        "changelist.from-required",
        "changelist",
        None,
        xml('capability="changelist"', root="sitemapindex"),
    ),
    ("changedump.from-required", "changedump", None, xml('capability="changedump"')),
    (
        "changedump-manifest.from-required",
        "changedump-manifest",
        None,
        xml('capability="changedump-manifest"'),
    ),
    (
        "md.completed-before-at",
        "resourcelist",
        None,
        xml(RL + ' completed="2012-12-31T00:00:00Z"'),
    ),
    (
        "md.completed-before-at",
        "resourcelist",
        1,
        xml(
            RL,
            "<loc>a</loc><rs:md at='2013-01-01T00:00:00Z'/>",
            "<loc>b</loc><rs:md at='2013-01-02T00:00:00Z' completed='2013-01-01T00:00:00Z'/>",
            root="sitemapindex",
        ),
    ),
    ("md.until-before-from", "changelist", None, xml(CL + ' until="2012-01-01T00:00:00Z"')),
    ("entry.loc-required", "resourcelist", 1, xml(RL, "<loc>a</loc>", "<lastmod>2013</lastmod>")),
    ("entry.loc-required", "resourcelist", 0, xml(RL, "<loc>  </loc>")),
    ("entry.element-repeated", "resourcelist", 0, xml(RL, "<loc>a</loc><loc>b</loc>")),
    ("entry.element-repeated", "changelist", 0, xml(CL, change() + "<rs:md change='created'/>")),
    (
        "entry.lastmod-required",
        "changelist",
        1,
        xml(CL, change(), "<loc>b</loc><rs:md change='created'/>"),
    ),
    ("entry.md-required", "changelist", 0, xml(CL, "<loc>a</loc><lastmod>2013</lastmod>")),
    (
        "entry.change-required",
        "changelist-notification",
        0,
        xml(NOTE, "<loc>a</loc><lastmod>2013</lastmod><rs:md length='1'/>"),
    ),
    ("entry.change-value", "changelist", 0, xml(CL, change().replace("updated", "modified"))),
    (
        "entry.capability-required",
        "capabilitylist",
        0,
        xml('capability="capabilitylist"', "<loc>a</loc><rs:md/>"),
    ),
    (
        "entry.capability-value",
        "description",
        1,
        xml(
            'capability="description"',
            "<loc>a</loc><rs:md capability='capabilitylist'/>",
            "<loc>b</loc><rs:md capability='resourcelist'/>",
        ),
    ),
    (
        "entry.capability-value",
        "capabilitylist",
        0,
        xml('capability="capabilitylist"', "<loc>a</loc><rs:md capability='bogus'/>"),
    ),
    (
        "entry.changefreq-value",
        "resourcelist",
        0,
        xml(RL, "<loc>a</loc><changefreq>sometimes</changefreq>"),
    ),
    (
        "entry.chronological-order",
        "changelist",
        3,
        xml(
            CL,
            change(when="2013-01-02T10:00:00Z"),
            change(when="2013-01-02T10:00:00Z"),  # equal times are in order
            change(when="2013-01-02T13:00:00Z"),
            change(when="2013-01-02T12:59:59.5+00:00"),
        ),
    ),
    (
        "entry.chronological-order",
        "changelist-notification",
        1,
        xml(
            NOTE,
            change(when="2013-01-02T10:00:00Z"),
            # The 1.1 datetime, not lastmod, is the change time.
            change(when="2013-01-03T00:00:00Z", md="datetime='2013-01-01T00:00:00Z'"),
        ),
    ),
    (
        "capabilitylist.duplicate-capability",
        "capabilitylist",
        2,
        xml(
            'capability="capabilitylist"',
            "<loc>a</loc><rs:md capability='changelist'/>",
            "<loc>b</loc><rs:md capability='resourcelist'/>",
            "<loc>c</loc><rs:md capability='changelist'/>",
        ),
    ),
    (
        "manifest.path-required",
        "resourcedump-manifest",
        0,
        xml('capability="resourcedump-manifest" at="2013"', "<loc>a</loc><rs:md length='1'/>"),
    ),
    (
        "manifest.path-required",
        "changedump-manifest",
        1,
        xml(
            'capability="changedump-manifest" from="2013"',
            change(md="path='/a'").replace("updated", "deleted").replace(" path='/a'", ""),
            change(),
        ),
    ),
    ("link.rel-required", "resourcelist", None, xml(RL, links="<rs:ln href='h'/>")),
    ("link.href-required", "resourcelist", None, xml(RL, links="<rs:ln rel='up'/>")),
    (
        "link.href-required",
        "resourcelist",
        0,
        xml(RL, "<loc>a</loc><rs:ln rel='duplicate' href='h'/><rs:ln rel='duplicate'/>"),
    ),
    ("datetime.w3c", "resourcelist", None, xml('capability="resourcelist" at="yesterday"')),
    ("datetime.w3c", "changelist", 0, xml(CL, change(when="2013-01-02T10:00:00"))),
    (
        "datetime.w3c",
        "resourcelist",
        0,
        xml(RL, "<loc>a</loc><rs:ln rel='memento' href='h' modified='2013-01-02T10:00'/>"),
    ),
    ("hash.syntax", "changelist", 0, xml(CL, change(md="hash='md5:" + "0" * 31 + "'"))),
    ("hash.syntax", "changelist", 0, xml(CL, change(md=f"hash='{MD5} sha-1:xyz'"))),
    ("hash.syntax", "resourcelist", 0, xml(RL, "<loc>a</loc><rs:md hash='md5'/>")),
    ("hash.syntax", "resourcelist", None, xml(RL + ' hash=" "')),
    ("hash.algorithm", "changelist", 0, xml(CL, change(md="hash='sha-512:" + "0" * 128 + "'"))),
    ("length.value", "changelist", 0, xml(CL, change(md="length='-1'"))),
    (
        "length.value",
        "resourcelist",
        0,
        xml(RL, "<loc>a</loc><rs:ln rel='r' href='h' length='x'/>"),
    ),
    ("pri.value", "resourcelist", 0, xml(RL, "<loc>a</loc><rs:ln rel='r' href='h' pri='0'/>")),
    (
        "pri.value",
        "resourcelist",
        0,
        xml(RL, "<loc>a</loc><rs:ln rel='r' href='h' pri='1000000'/>"),
    ),
    ("pri.value", "resourcelist", 0, xml(RL, "<loc>a</loc><rs:ln rel='r' href='h' pri='1.5'/>")),
    (
        "path.syntax",
        "resourcedump-manifest",
        0,
        xml('capability="resourcedump-manifest" at="2013"', "<loc>a</loc><rs:md path='res1'/>"),
    ),
    (
        "path.syntax",
        "resourcedump-manifest",
        0,
        xml(
            'capability="resourcedump-manifest" at="2013"',
            "<loc>a</loc><rs:md path='/resources/../../etc/passwd'/>",
        ),
    ),
    (
        "path.syntax",
        "changedump-manifest",
        0,
        xml(
            'capability="changedump-manifest" from="2013"',
            change(md="path='/a'") + "<rs:ln rel='http://www.openarchives.org/rs/terms/patch'"
            " href='h' type='t' path='/x\\..\\y'/>",
        ),
    ),
]


def _id(case: tuple[str, str, int | None, bytes]) -> str:
    return f"{case[0]}-{case[1]}-{case[2]}"


def check(err: ValidationError, rule: str, document: str, index: int | None) -> None:
    assert (err.rule, err.document, err.index) == (rule, document, index)
    message = str(err)
    assert rule in message
    assert message.startswith(document)
    if index is not None:
        assert f"{document} entry {index}: {rule}: " in message


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_parse_reports_rule(case: tuple[str, str, int | None, bytes]) -> None:
    rule, document, index, data = case
    with pytest.raises(ValidationError) as info:
        parse(data)
    check(info.value, rule, document, index)


# Rules on values the models cannot hold, or that decide the document class, are
# enforced even without validation; everything else is deferred to validate().
ALWAYS = {
    "document.md-required",
    "document.md-repeated",
    "document.capability-required",
    "document.capability-value",
    "document.index-not-allowed",
    "entry.element-repeated",
    "entry.change-value",
    "entry.capability-value",
    "datetime.w3c",
    "length.value",
}


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_validate_reports_rule_on_models(case: tuple[str, str, int | None, bytes]) -> None:
    rule, document, index, data = case
    if rule in ALWAYS and not (rule == "entry.capability-value" and document == "description"):
        with pytest.raises(ValidationError) as info:
            parse(data, validate=False)
        check(info.value, rule, document, index)
        return
    if rule == "pri.value" and b"1.5" in data:
        # A non-integer pri cannot even be loaded: parse refuses it without validation too.
        with pytest.raises(ValidationError) as info:
            parse(data, validate=False)
        check(info.value, rule, document, index)
        return
    doc = parse(data, validate=False)
    with pytest.raises(ValidationError) as info:
        validate(doc)
    check(info.value, rule, document, index)


def test_one_case_per_rule() -> None:
    """Every rule id of the exceptions module table has a failing case somewhere here."""
    import resourcesync.exceptions as exceptions

    table = exceptions.__doc__ or ""
    documented = {
        line.split()[0]
        for line in table.splitlines()
        if line and "." in line.split()[0] and not line.startswith(("=", " "))
    }
    covered = {case[0] for case in CASES} | MODEL_ONLY
    generic = {r for r in documented if r.startswith("<capability>")}
    assert documented - generic - covered == set()


MODEL_ONLY = {"document.max-entries", "document.max-bytes", "document.xml-char"}

T0 = datetime.fromisoformat("2013-01-02T10:00:00+00:00")


def test_max_entries_parse() -> None:
    data = xml(RL, *["<loc>a</loc>"] * 50_001)
    with pytest.raises(ValidationError) as info:
        parse(data)
    check(info.value, "document.max-entries", "resourcelist", None)
    assert len(parse(xml(RL, *["<loc>a</loc>"] * 50_000)).entries) == 50_000


def test_max_entries_validate() -> None:
    entry = Entry(loc="a")
    doc = ResourceList.model_construct(
        md=Metadata(capability="resourcelist", at=T0), links=(), entries=(entry,) * 50_001
    )
    with pytest.raises(ValidationError) as info:
        validate(doc)
    check(info.value, "document.max-entries", "resourcelist", None)


def test_max_bytes_serialize(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules["resourcesync.serialize"], "MAX_BYTES", 1_000)
    doc = ResourceList(md=Metadata(at=T0), entries=[Entry(loc="x" * 1_000)])
    with pytest.raises(ValidationError) as info:
        serialize(doc)
    check(info.value, "document.max-bytes", "resourcelist", None)


def test_xml_char_serialize() -> None:
    doc = ResourceList(md=Metadata(at=T0), entries=[Entry(loc="a"), Entry(loc="b\x00")])
    with pytest.raises(ValidationError) as info:
        serialize(doc)
    check(info.value, "document.xml-char", "resourcelist", 1)


def test_xml_name_serialize() -> None:
    doc = ResourceList(md=Metadata(at=T0, extra={"{urn:x}bad name": "v"}))
    with pytest.raises(ValidationError, match=r"document\.xml-char"):
        serialize(doc)


@pytest.mark.parametrize(
    ("doc", "rule", "index"),
    [
        (ChangeList(md=Metadata(from_=datetime(2013, 1, 1))), "datetime.w3c", None),
        (
            ChangeList(
                md=Metadata(from_=T0),
                entries=[
                    Entry(loc="a", lastmod=datetime(2013, 1, 2), md=Metadata(change="created"))
                ],
            ),
            "datetime.w3c",
            0,
        ),
        (
            ChangeList(
                md=Metadata(from_=T0),
                entries=[Entry(loc="a", lastmod=T0, md=Metadata(change="created", length=-5))],
            ),
            "length.value",
            0,
        ),
        (
            ChangeList(md=Metadata(from_=T0), links=[Link(rel="x", href="y", pri=0)]),
            "pri.value",
            None,
        ),
        (
            ChangeList(
                md=Metadata(from_=T0),
                links=[Link(rel="x", href="y", modified=datetime(2013, 1, 1))],
            ),
            "datetime.w3c",
            None,
        ),
        (
            ChangeList(md=Metadata(capability="resourcelist", from_=T0)),
            "document.capability-value",
            None,
        ),
        (
            ChangeListNotification(
                entries=[
                    Entry(loc="a", lastmod=T0, md=Metadata(change="created")),
                    Entry(
                        loc="b", lastmod=T0 - timedelta(seconds=1), md=Metadata(change="created")
                    ),
                ]
            ),
            "entry.chronological-order",
            1,
        ),
    ],
)
def test_validate_models(doc: Document, rule: str, index: int | None) -> None:
    with pytest.raises(ValidationError) as info:
        validate(doc)
    check(info.value, rule, type(doc).capability.value, index)


def test_base_document_is_not_a_type() -> None:
    with pytest.raises(ValidationError) as info:
        validate(Document())
    assert info.value.rule == "document.capability-value"


def test_message_format() -> None:
    with pytest.raises(ValidationError) as info:
        parse(xml(CL, change(when="2013-01-02T13:00:00Z"), change(when="2013-01-02T10:00:00Z")))
    assert str(info.value) == (
        "changelist entry 1: entry.chronological-order: lastmod 2013-01-02T10:00:00Z"
        " is before the previous entry's 2013-01-02T13:00:00Z"
    )
    assert info.value.http_status == 400


def test_valid_variants_accepted() -> None:
    # 1.1 form: datetime instead of lastmod.
    parse(xml(NOTE, "<loc>a</loc><rs:md change='created' datetime='2013-01-01T00:00:00Z'/>"))
    # A notification needs no from (it is a fragment).
    parse(xml(NOTE, change()))
    # Deleted changedump-manifest entries need no path (Section 13.2, Example 23).
    deleted = change().replace("updated", "deleted")
    parse(xml('capability="changedump-manifest" from="2013"', deleted))
    # Source Description entries may omit rs:md (Section 8).
    parse(xml('capability="description"', "<loc>a</loc>"))
    # Unknown foreign elements are ignored.
    parse(xml(RL, "<loc>a</loc><x:y xmlns:x='urn:x'><x:z/></x:y>"))
    # pri bounds are inclusive.
    parse(
        xml(
            RL,
            "<loc>a</loc><rs:ln rel='r' href='h' pri='1'/><rs:ln rel='r' href='h' pri='999999'/>",
        )
    )

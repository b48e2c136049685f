"""main's resourcesync parse path at 7d51b1e, frozen: the oracle of test_parse_oracle.py.

A verbatim copy of ``resourcesync/parse.py`` and ``resourcesync/validate.py`` as they were
before the parse walk checked the rules itself (issue 22), imports made absolute. The
differential fuzz holds today's :func:`resourcesync.parse` to exactly this behaviour.
Not to be edited, except to follow a deliberate change of behaviour.
"""
# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from lxml import etree

from resourcesync.datetimes import UTC_SECONDS, parse_datetime
from resourcesync.exceptions import (
    DocumentTooLargeError,
    LimitExceededError,
    ParseError,
    UnsafeDocumentError,
    ValidationError,
)
from resourcesync.limits import DEFAULT_LIMITS, Limits
from resourcesync.models import (
    DOCUMENT_TYPES,
    Capability,
    Change,
    Document,
    Link,
)
from resourcesync.namespaces import (
    CHANGEFREQ,
    LASTMOD,
    LOC,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_ENTRIES,
    RS_LN,
    RS_MD,
    SITEMAP,
    SITEMAPINDEX,
    URL,
    URLSET,
)


_local = threading.local()


def _parser() -> etree.XMLParser:
    """One parser per thread: lxml parsers are not thread-safe, but are reusable."""
    parser: etree.XMLParser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = etree.XMLParser(
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            dtd_validation=False,
            huge_tree=False,
            remove_comments=True,
            remove_pis=True,
        )
        _local.parser = parser
    return parser


class _Invalid(Exception):
    """A bad attribute value, before the parser knows which entry it belongs to."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(rule, detail)
        self.rule = rule
        self.detail = detail
        #: Entry index, filled in by the entry loop; ``None`` for the root.
        self.index: int | None = None


def _datetime(value: str) -> Any:
    try:
        return parse_datetime(value)
    except ValueError as exc:
        raise _Invalid("datetime.w3c", str(exc)) from None


def _length(value: str) -> int:
    if value.isascii() and value.isdigit():
        return int(value)
    raise _Invalid("length.value", f"length {value!r} is not a non-negative integer")


def _pri(value: str) -> int:
    if value.isascii() and value.isdigit():
        return int(value)
    raise _Invalid("pri.value", f"pri {value!r} is not an integer in 1..999999")


_CAPABILITIES = {c.value: c for c in Capability}
_CHANGES = {c.value: c for c in Change}


def _change(value: str) -> Change:
    change = _CHANGES.get(value)
    if change is None:
        raise _Invalid("entry.change-value", f"change {value!r} is not created/updated/deleted")
    return change


def _capability(value: str) -> Capability:
    capability = _CAPABILITIES.get(value)
    if capability is None:
        raise _Invalid("entry.capability-value", f"unknown capability {value!r}")
    return capability


# Attribute name -> (field name, converter or None for plain text). Attributes not
# listed go to ``extra``, so a round trip keeps them.
_Converter = Callable[[str], Any] | None
_MD_ATTRIBUTES: dict[str, tuple[str, _Converter]] = {
    "capability": ("capability", _capability),
    "at": ("at", _datetime),
    "completed": ("completed", _datetime),
    "from": ("from_", _datetime),
    "until": ("until", _datetime),
    "change": ("change", _change),
    "datetime": ("datetime", _datetime),
    "hash": ("hash", None),
    "length": ("length", _length),
    "type": ("type", None),
    "encoding": ("encoding", None),
    "path": ("path", None),
}
_LN_ATTRIBUTES: dict[str, tuple[str, _Converter]] = {
    "rel": ("rel", None),
    "href": ("href", None),
    "modified": ("modified", _datetime),
    "hash": ("hash", None),
    "length": ("length", _length),
    "type": ("type", None),
    "pri": ("pri", _pri),
    "encoding": ("encoding", None),
    "path": ("path", None),
}


def _attributes(
    element: Any, table: dict[str, tuple[str, _Converter]], limits: Limits, where: str
) -> dict[str, Any]:
    """The converted attributes of an ``rs:md`` or ``rs:ln``, keyed by field name.

    Only attributes present become keys, so pydantic fills the defaults and records
    ``model_fields_set`` as exactly what the element carried; ``extra`` only when needed.
    """
    # Counted first: lxml's items() is quadratic in the number of attributes.
    count = len(element.attrib)
    if count > limits.max_attributes:
        raise LimitExceededError("max_attributes", count, limits.max_attributes, where)
    fields: dict[str, Any] = {}
    extra: dict[str, str] | None = None
    max_chars = limits.max_value_chars
    for key, value in element.items():
        if len(value) > max_chars:
            raise LimitExceededError(
                "max_value_chars", len(value), max_chars, f"attribute {key[:100]!r}"
            )
        slot = table.get(key)
        if slot is None:
            if extra is None:
                extra = fields["extra"] = {}
            extra[key] = value
        else:
            name, convert = slot
            fields[name] = value if convert is None else convert(value)
    return fields


def _link(fields: dict[str, Any]) -> dict[str, Any] | Link:
    """A link's fields, or, lacking ``rel`` or ``href``, a :class:`Link` with them empty.

    The model's constructor requires both; validation reports them missing later
    (``link.rel-required``), and ``model_fields_set`` still says they were absent.
    """
    if "rel" in fields and "href" in fields:
        return fields
    return Link.model_construct(set(fields), **{"rel": "", "href": "", **fields})


# A DOCTYPE sits in the prolog: looking at the first bytes rejects it before libxml2
# reads any declaration. A DOCTYPE further in is still caught after parsing (docinfo).
_HEAD = 4096
# Found with bytes.find (a memchr-based search), ten times faster than one regex alternation.
# The UTF-16 spellings hold NUL bytes: a head without NUL (every UTF-8 document) cannot hold
# them, so one memchr for NUL stands in for their two searches.
_DOCTYPE = "<!DOCTYPE".encode("ascii")
_DOCTYPE_LE, _DOCTYPE_BE = ("<!DOCTYPE".encode(codec) for codec in ("utf-16-le", "utf-16-be"))


def _check_depth(element: Any, depth: int) -> None:
    """Reject subtrees nested beyond MAX_DEPTH; ResourceSync needs three levels."""
    if depth > MAX_DEPTH:
        raise UnsafeDocumentError(f"elements nested deeper than {MAX_DEPTH} levels")
    for child in element:
        _check_depth(child, depth + 1)


def parse(
    data: bytes | bytearray | memoryview,
    *,
    max_bytes: int = MAX_BYTES,
    validate: bool = True,
    limits: Limits = DEFAULT_LIMITS,
) -> Document:
    """Parse a ResourceSync document and return the matching :class:`Document` subclass.

    The type comes from the root element (``urlset`` or ``sitemapindex``) and the root
    ``rs:md/@capability``. With ``validate=False`` the ResourceSync rules are skipped, but
    values that the models cannot hold (bad datetimes, non-integer lengths, unknown
    ``change`` or ``capability`` values) are still errors.

    Raises:
        DocumentTooLargeError: ``data`` is longer than ``max_bytes`` (checked first).
        LimitExceededError: a bound of ``limits`` is exceeded (named in ``limit``).
        UnsafeDocumentError: a DOCTYPE (hence DTDs, entities) or excessive nesting.
        ParseError: not well-formed XML, or not a Sitemap ``urlset``/``sitemapindex``.
        ValidationError: a ResourceSync rule is broken.
    """
    return parse_tree(parse_root(data, max_bytes=max_bytes), validate=validate, limits=limits)


def parse_root(data: bytes | bytearray | memoryview, *, max_bytes: int = MAX_BYTES) -> Any:
    """The root element of ``data``, parsed safely: :func:`parse`'s first step, whose
    errors it raises (size, DOCTYPE, well-formedness). For callers with a fast path of
    their own (the hub's one-change publishes) that fall back to :func:`parse_tree`."""
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > max_bytes:
        raise DocumentTooLargeError(size, max_bytes)
    if not isinstance(data, bytes):
        data = bytes(data)  # lxml takes bytes; within max_bytes, so the copy is bounded
    if data.find(_DOCTYPE, 0, _HEAD) >= 0 or (
        data.find(b"\0", 0, _HEAD) >= 0
        and (data.find(_DOCTYPE_LE, 0, _HEAD) >= 0 or data.find(_DOCTYPE_BE, 0, _HEAD) >= 0)
    ):
        raise UnsafeDocumentError("DOCTYPE declarations (DTDs, entities) are not allowed")
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        message = str(exc)
        if "depth" in message:
            raise UnsafeDocumentError(f"too deeply nested: {message}") from None
        if "amplification" in message or "loop" in message:
            raise UnsafeDocumentError(f"entity expansion refused: {message}") from None
        raise ParseError(f"not well-formed XML: {message}") from None
    except (ValueError, TypeError) as exc:
        raise ParseError(f"cannot parse input: {exc}") from None
    docinfo = root.getroottree().docinfo
    if docinfo.internalDTD is not None or docinfo.doctype:
        raise UnsafeDocumentError("DOCTYPE declarations (DTDs, entities) are not allowed")
    return root


def parse_tree(root: Any, *, validate: bool = True, limits: Limits = DEFAULT_LIMITS) -> Document:
    """:func:`parse` of the root element :func:`parse_root` returned."""
    tag = root.tag
    if tag == URLSET:
        is_index, entry_tag, root_name = False, URL, "urlset"
    elif tag == SITEMAPINDEX:
        is_index, entry_tag, root_name = True, SITEMAP, "sitemapindex"
    else:
        raise ParseError(f"root element is {tag!r}, not a Sitemap urlset or sitemapindex")

    md_element = None
    link_elements = []
    entry_elements = []
    for child in root:
        child_tag = child.tag
        if child_tag == entry_tag:
            entry_elements.append(child)
        elif child_tag == RS_LN:
            link_elements.append(child)
        elif child_tag == RS_MD:
            if md_element is not None:
                raise ValidationError("document.md-repeated", root_name, None, "two root rs:md")
            md_element = child
        elif isinstance(child_tag, str):
            _check_depth(child, 2)

    if md_element is None:
        raise ValidationError("document.md-required", root_name, None, "no root rs:md")
    raw_capability = md_element.get("capability")
    if raw_capability is None:
        raise ValidationError(
            "document.capability-required", root_name, None, "root rs:md has no capability"
        )
    capability = _CAPABILITIES.get(raw_capability)
    if capability is None:
        raise ValidationError(
            "document.capability-value",
            raw_capability,
            None,
            f"unknown capability {raw_capability!r}",
        )
    cls = DOCUMENT_TYPES.get((capability, is_index))
    if cls is None:
        raise ValidationError(
            "document.index-not-allowed",
            raw_capability,
            None,
            f"{raw_capability} has no <sitemapindex> form",
        )
    name = raw_capability
    entry_count = len(entry_elements)
    if validate and entry_count > MAX_ENTRIES:
        raise ValidationError(
            "document.max-entries",
            name,
            None,
            f"{entry_count} entries, more than the limit of {MAX_ENTRIES}",
        )
    if entry_count > limits.max_entries:
        raise LimitExceededError("max_entries", entry_count, limits.max_entries, f"{name} entries")
    if len(link_elements) > limits.max_links:
        raise LimitExceededError(
            "max_links", len(link_elements), limits.max_links, f"{name} root <rs:ln>"
        )

    try:
        md = _attributes(md_element, _MD_ATTRIBUTES, limits, "<rs:md>")
        links = [_link(_attributes(el, _LN_ATTRIBUTES, limits, "<rs:ln>")) for el in link_elements]
        entries = _entries(entry_elements, limits)
    except _Invalid as exc:
        if exc.index is None and exc.rule == "entry.capability-value":
            exc.rule = "document.capability-value"
        raise ValidationError(exc.rule, name, exc.index, exc.detail) from None
    document = cls.model_validate({"md": md, "links": links, "entries": entries})
    if validate:
        check_document(document, trusted=True)
    return document


def _entries(elements: list[Any], limits: Limits) -> list[dict[str, Any]]:
    """The entries' fields, converted and bounded: the hot loop, hence locals for globals."""
    loc_tag, lastmod_tag, md_tag, ln_tag, changefreq_tag = LOC, LASTMOD, RS_MD, RS_LN, CHANGEFREQ
    attributes, link, datetime_ = _attributes, _link, _datetime
    fast, fromisoformat = UTC_SECONDS.fullmatch, datetime.fromisoformat
    md_table, ln_table = _MD_ATTRIBUTES, _LN_ATTRIBUTES
    max_chars, max_links = limits.max_value_chars, limits.max_links
    entries: list[dict[str, Any]] = []
    append = entries.append
    index = 0
    try:
        for index, element in enumerate(elements):  # noqa: B007  # used on error
            loc = lastmod = changefreq = md = None
            links: list[dict[str, Any] | Link] | None = None
            for child in element:
                tag = child.tag
                if tag == loc_tag:
                    if loc is not None:
                        raise _Invalid("entry.element-repeated", "two <loc>")
                    loc = child.text or ""
                    if len(loc) > max_chars:
                        raise LimitExceededError("max_value_chars", len(loc), max_chars, "<loc>")
                    loc = loc.strip()
                elif tag == lastmod_tag:
                    if lastmod is not None:
                        raise _Invalid("entry.element-repeated", "two <lastmod>")
                    text = child.text or ""
                    if len(text) > max_chars:
                        raise LimitExceededError(
                            "max_value_chars", len(text), max_chars, "<lastmod>"
                        )
                    text = text.strip()
                    # Inline fast path for "YYYY-MM-DDThh:mm:ssZ"; anything else, or an
                    # impossible date, goes through parse_datetime for the full rules.
                    if fast(text) is not None:
                        try:
                            lastmod = fromisoformat(text)
                        except ValueError:
                            lastmod = datetime_(text)  # raises the datetime.w3c error
                    else:
                        lastmod = datetime_(text)
                elif tag == md_tag:
                    if md is not None:
                        raise _Invalid("entry.element-repeated", "two <rs:md>")
                    md = attributes(child, md_table, limits, "<rs:md>")
                elif tag == ln_tag:
                    if links is None:
                        links = []
                    if len(links) == max_links:
                        raise LimitExceededError(
                            "max_links", max_links + 1, max_links, "<rs:ln> in one entry"
                        )
                    links.append(link(attributes(child, ln_table, limits, "<rs:ln>")))
                elif tag == changefreq_tag:
                    if changefreq is not None:
                        raise _Invalid("entry.element-repeated", "two <changefreq>")
                    changefreq = (child.text or "")[:max_chars].strip()
                elif isinstance(tag, str):
                    _check_depth(child, 3)
            append(
                {
                    "loc": loc or "",
                    "lastmod": lastmod,
                    "changefreq": changefreq,
                    "md": md,
                    "links": () if links is None else links,
                }
            )
    except (_Invalid, LimitExceededError) as exc:
        exc.index = index
        raise
    return entries


# --- resourcesync/validate.py ---


import re
from dataclasses import dataclass
from datetime import datetime

from resourcesync.datetimes import format_datetime
from resourcesync.exceptions import ValidationError
from resourcesync.models import Capability, Change, Document, Entry, Link, Metadata
from resourcesync.namespaces import CHANGEFREQ_VALUES, HASH_HEX_LENGTHS, MAX_ENTRIES


@dataclass(frozen=True, slots=True)
class Profile:
    """What one document type requires beyond the common rules (Appendix A, 8-13)."""

    #: Mandatory time attribute of the root ``rs:md``: ``"at"``, ``"from"`` or ``None``.
    root_time: str | None = None
    #: Entries must have ``<rs:md>``.
    entry_md: bool = False
    #: Entries describe changes: ``change`` and a change time are mandatory, in order.
    changes: bool = False
    #: Entries name a capability: ``"any"`` or the one value allowed, else ``None``.
    entry_capability: str | None = None
    #: Manifest ``path``: ``"all"`` entries, ``"unless-deleted"``, or ``None``.
    path: str | None = None


_C = Capability
#: Requirements per (capability, is_index).
PROFILES: dict[tuple[Capability, bool], Profile] = {
    (_C.DESCRIPTION, False): Profile(entry_capability=_C.CAPABILITYLIST.value),
    (_C.DESCRIPTION, True): Profile(),
    (_C.CAPABILITYLIST, False): Profile(entry_md=True, entry_capability="any"),
    (_C.RESOURCELIST, False): Profile(root_time="at"),
    (_C.RESOURCELIST, True): Profile(root_time="at"),
    (_C.RESOURCEDUMP, False): Profile(root_time="at"),
    (_C.RESOURCEDUMP, True): Profile(root_time="at"),
    (_C.RESOURCEDUMP_MANIFEST, False): Profile(root_time="at", entry_md=True, path="all"),
    (_C.CHANGELIST, False): Profile(root_time="from", entry_md=True, changes=True),
    (_C.CHANGELIST, True): Profile(root_time="from"),
    (_C.CHANGEDUMP, False): Profile(root_time="from"),
    (_C.CHANGEDUMP, True): Profile(root_time="from"),
    (_C.CHANGEDUMP_MANIFEST, False): Profile(
        root_time="from", entry_md=True, changes=True, path="unless-deleted"
    ),
    (_C.CHANGELIST_NOTIFICATION, False): Profile(entry_md=True, changes=True),
    (_C.CHANGEDUMP_NOTIFICATION, False): Profile(),
}

_HASH_TOKEN = r"(?:md5:[0-9a-fA-F]{32}|sha-1:[0-9a-fA-F]{40}|sha-256:[0-9a-fA-F]{64})"
_HASH_LIST = re.compile(rf"\s*{_HASH_TOKEN}(?:\s+{_HASH_TOKEN})*\s*", re.ASCII)


def check_hash(value: str) -> tuple[str, str] | None:
    """Check a ``hash`` value: whitespace-separated ``algo:hexdigest`` tokens (Section 7).

    Returns ``(rule, detail)`` when the value is wrong, else ``None``.
    """
    if _HASH_LIST.fullmatch(value) is not None:
        return None
    tokens = value.split()
    if not tokens:
        return "hash.syntax", "empty hash value"
    for token in tokens:
        algorithm, sep, digest = token.partition(":")
        if not sep or not digest:
            return "hash.syntax", f"{token!r} is not algorithm:hexdigest"
        expected = HASH_HEX_LENGTHS.get(algorithm)
        if expected is None:
            return "hash.algorithm", f"unsupported hash algorithm {algorithm!r} in {token!r}"
        if len(digest) != expected or not all(c in "0123456789abcdefABCDEF" for c in digest):
            return "hash.syntax", f"{token!r} is not {expected} hex digits of {algorithm}"
    return "hash.syntax", f"malformed hash value {value!r}"  # pragma: no cover


def check_path(value: str) -> tuple[str, str] | None:
    """Check a package ``path``: leading ``/``, no ``.``/``..`` segments (11.2, 13.2)."""
    if not value.startswith("/"):
        return "path.syntax", f"path {value!r} does not start with '/'"
    if "\\" in value:
        return "path.syntax", f"path {value!r} contains a backslash"
    for segment in value.split("/"):
        if segment in (".", ".."):
            return "path.syntax", f"path {value!r} contains a {segment!r} segment"
    return None


def validate(doc: Document) -> None:
    """Check ``doc`` against the ResourceSync rules.

    Raises:
        ValidationError: the first broken rule, naming rule id, document and entry index.
    """
    check_document(doc, trusted=False)


def _aware(value: datetime | None, name: str, what: str, index: int | None) -> None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ValidationError(
            "datetime.w3c", name, index, f"{what} {value.isoformat()} has no timezone"
        )


def _check_values(md: Metadata | Link, name: str, index: int | None, where: str) -> None:
    """Checks the parser already guarantees: timezones, non-negative lengths, enums."""
    if isinstance(md, Metadata):
        for field in ("at", "completed", "from_", "until", "datetime"):
            _aware(getattr(md, field), name, f"{where} {field.rstrip('_')}", index)
        if md.change is not None and not isinstance(md.change, Change):
            raise ValidationError("entry.change-value", name, index, f"change {md.change!r}")
    else:
        _aware(md.modified, name, f"{where} modified", index)
    if md.length is not None and md.length < 0:
        raise ValidationError("length.value", name, index, f"{where} length {md.length} < 0")


def _check_common(md: Metadata | Link, name: str, index: int | None, where: str) -> None:
    """Checks that apply to both ``rs:md`` and ``rs:ln`` attributes (Section 7)."""
    if md.hash is not None:
        problem = check_hash(md.hash)
        if problem is not None:
            raise ValidationError(problem[0], name, index, f"{where}: {problem[1]}")
    if md.path is not None:
        problem = check_path(md.path)
        if problem is not None:
            raise ValidationError(problem[0], name, index, f"{where}: {problem[1]}")


def _check_times(md: Metadata, name: str, index: int | None, where: str) -> None:
    if md.at is not None and md.completed is not None and md.completed < md.at:
        raise ValidationError(
            "md.completed-before-at", name, index, f"{where} completed is before at"
        )
    if md.from_ is not None and md.until is not None and md.until < md.from_:
        raise ValidationError("md.until-before-from", name, index, f"{where} until is before from")


def _check_links(links: tuple[Link, ...], name: str, index: int | None, trusted: bool) -> None:
    for n, ln in enumerate(links):
        where = f"rs:ln {n}"
        if not ln.rel:
            raise ValidationError("link.rel-required", name, index, f"{where} has no rel")
        if not ln.href:
            raise ValidationError("link.href-required", name, index, f"{where} has no href")
        if not trusted:
            _check_values(ln, name, index, where)
        if ln.pri is not None and not 1 <= ln.pri <= 999_999:
            raise ValidationError("pri.value", name, index, f"{where} pri {ln.pri} not 1..999999")
        if ln.hash is not None or ln.path is not None:
            _check_common(ln, name, index, where)


def check_document(doc: Document, *, trusted: bool) -> None:
    """Validate ``doc``; ``trusted`` skips the checks the parser already made."""
    cls = type(doc)
    capability = getattr(cls, "capability", None)
    md = doc.md
    if capability is None:
        raise ValidationError(
            "document.capability-value", "document", None, "use a Document subclass"
        )
    name = str(capability)  # the value, without the enum's Python-level property
    if md.capability is None:
        raise ValidationError("document.capability-required", name, None, "rs:md has no capability")
    if md.capability != capability:
        raise ValidationError(
            "document.capability-value",
            name,
            None,
            f"rs:md capability {md.capability!s} does not match {cls.__name__}",
        )
    if len(doc.entries) > MAX_ENTRIES:
        raise ValidationError(
            "document.max-entries",
            name,
            None,
            f"{len(doc.entries)} entries, more than the limit of {MAX_ENTRIES}",
        )
    profile = PROFILES[(capability, cls.is_index)]
    if not trusted:
        _check_values(md, name, None, "rs:md")
    if profile.root_time == "at" and md.at is None:
        raise ValidationError(f"{name}.at-required", name, None, "rs:md has no at attribute")
    if profile.root_time == "from" and md.from_ is None:
        raise ValidationError(f"{name}.from-required", name, None, "rs:md has no from attribute")
    if md.at is not None or md.from_ is not None:
        _check_times(md, name, None, "rs:md")
    if md.hash is not None or md.path is not None:
        _check_common(md, name, None, "rs:md")
    if doc.links:
        _check_links(doc.links, name, None, trusted)
    _check_entries(doc.entries, profile, name, trusted)


def _check_entries(entries: tuple[Entry, ...], profile: Profile, name: str, trusted: bool) -> None:
    entry_md, changes, entry_capability, path_rule = (
        profile.entry_md,
        profile.changes,
        profile.entry_capability,
        profile.path,
    )
    seen_capabilities: set[str] = set()
    previous: datetime | None = None
    hash_ok = _HASH_LIST.fullmatch  # the common, valid case without a function call
    for i, entry in enumerate(entries):
        if not entry.loc:
            raise ValidationError("entry.loc-required", name, i, "no <loc>")
        if not trusted:
            _aware(entry.lastmod, name, "lastmod", i)
        if entry.changefreq is not None and entry.changefreq not in CHANGEFREQ_VALUES:
            raise ValidationError(
                "entry.changefreq-value", name, i, f"changefreq {entry.changefreq!r}"
            )
        md = entry.md
        if md is None:
            if entry_md:
                raise ValidationError("entry.md-required", name, i, "no <rs:md>")
        else:
            if not trusted:
                _check_values(md, name, i, "rs:md")
            digest = md.hash
            if (digest is not None and hash_ok(digest) is None) or md.path is not None:
                _check_common(md, name, i, "rs:md")
            if md.at is not None or md.from_ is not None:
                _check_times(md, name, i, "rs:md")
        if changes:
            change = md.change  # type: ignore[union-attr]  # md checked above
            if change is None:
                raise ValidationError("entry.change-required", name, i, "rs:md has no change")
            when = md.datetime or entry.lastmod  # type: ignore[union-attr]
            if when is None:
                raise ValidationError(
                    "entry.lastmod-required", name, i, "neither <lastmod> nor rs:md datetime"
                )
            if previous is not None and when < previous:
                raise ValidationError(
                    "entry.chronological-order",
                    name,
                    i,
                    f"{'datetime' if md.datetime else 'lastmod'} {format_datetime(when)}"  # type: ignore[union-attr]
                    f" is before the previous entry's {format_datetime(previous)}",
                )
            previous = when
        if path_rule is not None and (md is None or md.path is None):
            if path_rule == "all" or md is None or md.change is not Change.DELETED:
                raise ValidationError("manifest.path-required", name, i, "rs:md has no path")
        if entry_capability is not None and md is not None:
            cap = md.capability
            if cap is None:
                raise ValidationError(
                    "entry.capability-required", name, i, "rs:md has no capability"
                )
            if entry_capability == "any":
                if cap in seen_capabilities:
                    raise ValidationError(
                        "capabilitylist.duplicate-capability",
                        name,
                        i,
                        f"a second entry for capability {cap!s}",
                    )
                seen_capabilities.add(cap)
            elif cap != entry_capability:
                raise ValidationError(
                    "entry.capability-value",
                    name,
                    i,
                    f"capability {cap!s}, expected {entry_capability}",
                )
        if entry.links:
            _check_links(entry.links, name, i, trusted)

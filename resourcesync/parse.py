"""Parse ResourceSync documents from bytes, safely and fast.

Hostile input is expected (the hub parses request bodies), so before anything else the
size is checked, then lxml parses with entity resolution, DTD loading and network access
off; any DOCTYPE is rejected outright and nesting is bounded. Whatever the walk reads is
bounded by :class:`~resourcesync.limits.Limits` before it is read (attribute counts, value
sizes, entries, links), so parsing time stays linear in the document's size. The walk
compares tags against precomputed ``{namespace}name`` strings and converts and checks every
value into plain dicts, keyed by field name, holding only what the document carried; one
``model_validate`` call then builds the whole document in pydantic-core, and the
ResourceSync rules run once over the models (:func:`resourcesync.validate.check_document`).

This is a library: it leaves process state such as the cyclic GC alone (a parse in the
hub's thread pool must not change how the event loop's thread collects; the process that
parses decides how, e.g. a parse worker raising its thresholds) and builds models only
through pydantic's public API. Measured on a 1,000-entry notification (valgrind
instruction counts, GC off): one ``model_validate`` of the whole document costs 26.5 M
instructions, 10 M more than the old writes into pydantic's private attributes (about 10% of
a parse); ``model_construct`` runs Python per field and is slower still (3 us per Entry,
10 us per Metadata, against 2.8 us per entry for the whole validation). Plain records
converted at the API edge would not help: every caller reads ``Document.entries``, so every
entry would be converted. Entries carry only the keys the document had, so pydantic fills
the defaults and ``model_fields_set`` is what it was.

Also measured and left out (bench/results/documents.jsonl, branch parse5): feeding the
walk to ``model_validate`` as a generator (2% fewer instructions, slower in time); a loop for
the common entry shape (no fewer instructions: three fresh proxies, their first ``.tag`` and
``items()`` are most of the walk); columns read by compiled XPath (2.2-2.7 k instructions per
entry and column, more than ``items()``) or XSLT; ``strict=True`` (3% of validation). The
cyclic GC costs a 1,000-entry parse ~5% (no cyclic garbage; it keeps ~9 containers alive per
entry, the models most of them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from lxml import etree

from .datetimes import UTC_SECONDS, parse_datetime
from .exceptions import (
    DocumentTooLargeError,
    LimitExceededError,
    ParseError,
    UnsafeDocumentError,
    ValidationError,
)
from .limits import DEFAULT_LIMITS, Limits
from .models import (
    DOCUMENT_TYPES,
    Capability,
    Change,
    Document,
    Link,
)
from .namespaces import (
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
from .validate import check_document

__all__ = ["parse", "parse_root", "parse_tree"]

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
    element: Any, table: dict[str, tuple[str, _Converter]], max_attributes: int, max_chars: int
) -> dict[str, Any]:
    """The converted attributes of an ``rs:md`` or ``rs:ln``, keyed by field name.

    Only attributes present become keys, so pydantic fills the defaults and records
    ``model_fields_set`` as exactly what the element carried; ``extra`` only when needed.
    """
    # Counted first: lxml's items() is quadratic in the number of attributes.
    count = len(element.attrib)
    if count > max_attributes:
        where = "<rs:md>" if table is _MD_ATTRIBUTES else "<rs:ln>"
        raise LimitExceededError("max_attributes", count, max_attributes, where)
    fields: dict[str, Any] = {}
    extra: dict[str, str] | None = None
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
            if convert is None:
                fields[name] = value
            # The two common converters inline, their errors left to them.
            elif convert is _change and value in _CHANGES:
                fields[name] = _CHANGES[value]
            elif convert is _length and value.isdigit() and value.isascii():
                fields[name] = int(value)
            else:
                fields[name] = convert(value)
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

    max_attributes, max_chars = limits.max_attributes, limits.max_value_chars
    try:
        md = _attributes(md_element, _MD_ATTRIBUTES, max_attributes, max_chars)
        links = []
        for element in link_elements:
            fields = _attributes(element, _LN_ATTRIBUTES, max_attributes, max_chars)
            links.append(fields if "rel" in fields and "href" in fields else _link(fields))
        entries = _entries(entry_elements, limits) if entry_elements else []
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
    max_attributes = limits.max_attributes
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
                    md = attributes(child, md_table, max_attributes, max_chars)
                elif tag == ln_tag:
                    if links is None:
                        links = []
                    if len(links) == max_links:
                        raise LimitExceededError(
                            "max_links", max_links + 1, max_links, "<rs:ln> in one entry"
                        )
                    fields = attributes(child, ln_table, max_attributes, max_chars)
                    links.append(fields if "rel" in fields and "href" in fields else link(fields))
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

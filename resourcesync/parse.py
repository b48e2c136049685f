"""Parse ResourceSync documents from bytes, safely and fast.

Hostile input is expected (the hub parses request bodies), so before anything else the
size is checked, then lxml parses with entity resolution, DTD loading and network access
off; any DOCTYPE is rejected outright and nesting is bounded. Whatever the walk reads is
bounded by :class:`~resourcesync.limits.Limits` before it is read (attribute counts, value
sizes, entries, links), so parsing time stays linear in the document's size. The walk compares tags
against precomputed ``{namespace}name`` strings and builds models without pydantic
validation: every value is converted and checked here, then the ResourceSync rules run
once over the models (:func:`resourcesync.validate.check_document`).
"""

from __future__ import annotations

import gc
import re
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

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
    Entry,
    Link,
    Metadata,
    construct,
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

__all__ = ["parse"]

_local = threading.local()
M = TypeVar("M", Metadata, Link)


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
_MD_DEFAULTS: dict[str, Any] = dict.fromkeys(Metadata.model_fields)
_ENTRY_FIELDS = set(Entry.model_fields)
# Missing rel/href stay empty; validation reports them (link.rel-required, ...).
_LN_DEFAULTS: dict[str, Any] = {**dict.fromkeys(Link.model_fields), "rel": "", "href": ""}
_setattr = object.__setattr__
_new = object.__new__


def _build(
    cls: type[M],
    element: Any,
    table: dict[str, tuple[str, _Converter]],
    defaults: dict[str, Any],
    limits: Limits,
) -> M:
    """Build a Metadata or Link from an element's attributes, without pydantic."""
    # Counted first: lxml's items() is quadratic in the number of attributes.
    count = len(element.attrib)
    if count > limits.max_attributes:
        where = "rs:md" if cls is Metadata else "rs:ln"
        raise LimitExceededError("max_attributes", count, limits.max_attributes, f"<{where}>")
    fields = defaults.copy()
    present = set()
    extra: dict[str, str] = {}
    max_chars = limits.max_value_chars
    for key, value in element.items():
        if len(value) > max_chars:
            raise LimitExceededError(
                "max_value_chars", len(value), max_chars, f"attribute {key[:100]!r}"
            )
        slot = table.get(key)
        if slot is None:
            extra[key] = value
            present.add("extra")
        else:
            name, convert = slot
            fields[name] = value if convert is None else convert(value)
            present.add(name)
    fields["extra"] = extra
    obj = _new(cls)
    _setattr(obj, "__dict__", fields)
    _setattr(obj, "__pydantic_fields_set__", present)
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj


# A DOCTYPE sits in the prolog: looking at the first bytes rejects it before libxml2
# reads any declaration. A DOCTYPE further in is still caught after parsing (docinfo).
_HEAD = 4096
_DOCTYPE = re.compile(
    b"|".join(re.escape("<!DOCTYPE".encode(codec)) for codec in ("ascii", "utf-16-le", "utf-16-be"))
)

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


#: Below this many entries a document builds too few objects for pausing the GC to pay.
_GC_PAUSE_MIN_ENTRIES = 64


def _pause_gc() -> None:
    """Pause the cyclic GC while building models: none of them form cycles, and
    collections triggered by thousands of young objects cost about 15% of parsing.
    Counted so that concurrent parses in several threads restore the state once."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1


def _resume_gc() -> None:
    global _gc_pauses
    with _gc_lock:
        _gc_pauses -= 1
        if _gc_pauses == 0 and _gc_was_enabled:
            gc.enable()


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
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > max_bytes:
        raise DocumentTooLargeError(size, max_bytes)
    if _DOCTYPE.search(data, 0, _HEAD) is not None:  # searched in place: no copy
        raise UnsafeDocumentError("DOCTYPE declarations (DTDs, entities) are not allowed")
    try:
        root = etree.fromstring(data if isinstance(data, bytes) else bytes(data), _parser())
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
    if validate and len(entry_elements) > MAX_ENTRIES:
        raise ValidationError(
            "document.max-entries",
            name,
            None,
            f"{len(entry_elements)} entries, more than the limit of {MAX_ENTRIES}",
        )
    if len(entry_elements) > limits.max_entries:
        raise LimitExceededError(
            "max_entries", len(entry_elements), limits.max_entries, f"{name} entries"
        )
    if len(link_elements) > limits.max_links:
        raise LimitExceededError(
            "max_links", len(link_elements), limits.max_links, f"{name} root <rs:ln>"
        )

    try:
        md = _build(Metadata, md_element, _MD_ATTRIBUTES, _MD_DEFAULTS, limits)
        links = tuple(
            _build(Link, el, _LN_ATTRIBUTES, _LN_DEFAULTS, limits) for el in link_elements
        )
        if len(entry_elements) < _GC_PAUSE_MIN_ENTRIES:
            entries = _entries(entry_elements, limits)
        else:
            _pause_gc()
            try:
                entries = _entries(entry_elements, limits)
            finally:
                _resume_gc()
    except _Invalid as exc:
        if exc.index is None and exc.rule == "entry.capability-value":
            exc.rule = "document.capability-value"
        raise ValidationError(exc.rule, name, exc.index, exc.detail) from None
    document = construct(cls, {"md": md, "links": links, "entries": entries})
    if validate:
        check_document(document, trusted=True)
    return document


def _entries(elements: list[Any], limits: Limits) -> tuple[Entry, ...]:
    """Build the entries: the hot loop, hence locals for globals and no pydantic."""
    loc_tag, lastmod_tag, md_tag, ln_tag, changefreq_tag = LOC, LASTMOD, RS_MD, RS_LN, CHANGEFREQ
    build, datetime_, new, setattr_ = _build, _datetime, _new, _setattr
    fast, fromisoformat = UTC_SECONDS.fullmatch, datetime.fromisoformat
    md_table, md_defaults, ln_table, ln_defaults = (
        _MD_ATTRIBUTES,
        _MD_DEFAULTS,
        _LN_ATTRIBUTES,
        _LN_DEFAULTS,
    )
    entry_fields = _ENTRY_FIELDS
    max_chars, max_links = limits.max_value_chars, limits.max_links
    entries: list[Entry] = []
    append = entries.append
    index = 0
    try:
        for index, element in enumerate(elements):  # noqa: B007  # used on error
            loc = lastmod = changefreq = md = None
            links: list[Link] = []
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
                    md = build(Metadata, child, md_table, md_defaults, limits)
                elif tag == ln_tag:
                    if len(links) == max_links:
                        raise LimitExceededError(
                            "max_links", max_links + 1, max_links, "<rs:ln> in one entry"
                        )
                    links.append(build(Link, child, ln_table, ln_defaults, limits))
                elif tag == changefreq_tag:
                    if changefreq is not None:
                        raise _Invalid("entry.element-repeated", "two <changefreq>")
                    changefreq = (child.text or "")[:max_chars].strip()
                elif isinstance(tag, str):
                    _check_depth(child, 3)
            entry = new(Entry)
            setattr_(
                entry,
                "__dict__",
                {
                    "loc": loc or "",
                    "lastmod": lastmod,
                    "changefreq": changefreq,
                    "md": md,
                    "links": tuple(links),
                },
            )
            # Shared: frozen models never mutate it, and model_copy() copies it first.
            setattr_(entry, "__pydantic_fields_set__", entry_fields)
            setattr_(entry, "__pydantic_extra__", None)
            setattr_(entry, "__pydantic_private__", None)
            append(entry)
    except (_Invalid, LimitExceededError) as exc:
        exc.index = index
        raise
    return tuple(entries)

"""Parse ResourceSync documents from bytes, safely and fast.

Hostile input is expected (the hub parses request bodies), so before anything else the
size is checked, then lxml parses with entity resolution, DTD loading and network access
off; any DOCTYPE is rejected outright and nesting is bounded. The walk compares tags
against precomputed ``{namespace}name`` strings and builds models without pydantic
validation: every value is converted and checked here, then the ResourceSync rules run
once over the models (:func:`resourcesync.validate.check_document`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lxml import etree

from .datetimes import parse_datetime
from .exceptions import (
    DocumentTooLargeError,
    ParseError,
    UnsafeDocumentError,
    ValidationError,
)
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


def _text(value: str) -> str:
    return value


# Attribute name -> (field name, converter). Attributes not listed go to ``extra``.
_Converter = Callable[[str], Any]
_MD_ATTRIBUTES: dict[str, tuple[str, _Converter]] = {
    "capability": ("capability", _capability),
    "at": ("at", _datetime),
    "completed": ("completed", _datetime),
    "from": ("from_", _datetime),
    "until": ("until", _datetime),
    "change": ("change", _change),
    "datetime": ("datetime", _datetime),
    "hash": ("hash", _text),
    "length": ("length", _length),
    "type": ("type", _text),
    "encoding": ("encoding", _text),
    "path": ("path", _text),
}
_LN_ATTRIBUTES: dict[str, tuple[str, _Converter]] = {
    "rel": ("rel", _text),
    "href": ("href", _text),
    "modified": ("modified", _datetime),
    "hash": ("hash", _text),
    "length": ("length", _length),
    "type": ("type", _text),
    "pri": ("pri", _pri),
    "encoding": ("encoding", _text),
    "path": ("path", _text),
}


def _attributes(element: Any, table: dict[str, tuple[str, _Converter]]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for key, value in element.items():
        known = table.get(key)
        if known is None:
            extra[key] = value
        else:
            name, convert = known
            values[name] = convert(value)
    values["extra"] = extra
    return values


def _metadata(element: Any) -> Metadata:
    return construct(Metadata, _attributes(element, _MD_ATTRIBUTES))


def _link(element: Any) -> Link:
    values = _attributes(element, _LN_ATTRIBUTES)
    # Missing rel/href are kept empty; validation reports them (link.*-required).
    values.setdefault("rel", "")
    values.setdefault("href", "")
    return construct(Link, values)


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
) -> Document:
    """Parse a ResourceSync document and return the matching :class:`Document` subclass.

    The type comes from the root element (``urlset`` or ``sitemapindex``) and the root
    ``rs:md/@capability``. With ``validate=False`` the ResourceSync rules are skipped, but
    values that the models cannot hold (bad datetimes, non-integer lengths, unknown
    ``change`` or ``capability`` values) are still errors.

    Raises:
        DocumentTooLargeError: ``data`` is longer than ``max_bytes`` (checked first).
        UnsafeDocumentError: a DOCTYPE (hence DTDs, entities) or excessive nesting.
        ParseError: not well-formed XML, or not a Sitemap ``urlset``/``sitemapindex``.
        ValidationError: a ResourceSync rule is broken.
    """
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > max_bytes:
        raise DocumentTooLargeError(size, max_bytes)
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        message = str(exc)
        if "depth" in message:
            raise UnsafeDocumentError(f"too deeply nested: {message}") from None
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
    name = capability.value
    if validate and len(entry_elements) > MAX_ENTRIES:
        raise ValidationError(
            "document.max-entries",
            name,
            None,
            f"{len(entry_elements)} entries, more than the limit of {MAX_ENTRIES}",
        )

    index: int | None = None
    try:
        md = _metadata(md_element)
        links = tuple(_link(el) for el in link_elements)
        entries = []
        new_entry = Entry.__new__
        for index, element in enumerate(entry_elements):  # noqa: B007  # used on error
            loc = lastmod = changefreq = entry_md = None
            entry_links: list[Link] = []
            for child in element:
                child_tag = child.tag
                if child_tag == LOC:
                    if loc is not None:
                        raise _Invalid("entry.element-repeated", "two <loc>")
                    loc = (child.text or "").strip()
                elif child_tag == LASTMOD:
                    if lastmod is not None:
                        raise _Invalid("entry.element-repeated", "two <lastmod>")
                    lastmod = _datetime((child.text or "").strip())
                elif child_tag == RS_MD:
                    if entry_md is not None:
                        raise _Invalid("entry.element-repeated", "two <rs:md>")
                    entry_md = _metadata(child)
                elif child_tag == RS_LN:
                    entry_links.append(_link(child))
                elif child_tag == CHANGEFREQ:
                    if changefreq is not None:
                        raise _Invalid("entry.element-repeated", "two <changefreq>")
                    changefreq = (child.text or "").strip()
                elif isinstance(child_tag, str):
                    _check_depth(child, 3)
            entry = new_entry(Entry)
            _set_entry(entry, loc, lastmod, changefreq, entry_md, tuple(entry_links))
            entries.append(entry)
        index = None
    except _Invalid as exc:
        if exc.rule == "entry.capability-value" and index is None:
            exc.rule = "document.capability-value"
        raise ValidationError(exc.rule, name, index, exc.detail) from None
    document = construct(cls, {"md": md, "links": links, "entries": tuple(entries)})
    if validate:
        check_document(document, trusted=True)
    return document


_setattr = object.__setattr__


def _set_entry(
    entry: Entry,
    loc: str | None,
    lastmod: Any,
    changefreq: str | None,
    md: Metadata | None,
    links: tuple[Link, ...],
) -> None:
    """Fill a bare Entry in place: the hot path, so no defaults dict and no validation."""
    fields = {
        "loc": loc or "",
        "lastmod": lastmod,
        "changefreq": changefreq,
        "md": md,
        "links": links,
    }
    _setattr(entry, "__dict__", fields)
    _setattr(entry, "__pydantic_fields_set__", set(fields))
    _setattr(entry, "__pydantic_extra__", None)
    _setattr(entry, "__pydantic_private__", None)

"""Write ResourceSync documents as UTF-8 XML bytes.

The output follows the standard's examples: the Sitemap namespace is the default
namespace, ResourceSync's is bound to ``rs`` (Section 7, Table 2), root ``<rs:ln>``
elements come before the root ``<rs:md>`` (Examples 6, 7, 12-33), and each entry lists
``<loc>``, ``<lastmod>``, ``<changefreq>``, ``<rs:md>``, then ``<rs:ln>``. Datetimes are
written in the recommended ``YYYY-MM-DDThh:mm:ss[.s]Z`` form.

The XML is built as text rather than through an lxml tree: it is faster, and escaping
covers every character that attribute-value normalization would otherwise change.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from .datetimes import format_datetime
from .exceptions import ValidationError
from .models import Document, Entry, Link, Metadata
from .namespaces import MAX_BYTES, RS_NS, SITEMAP_NS

__all__ = ["serialize"]

_XML_NS = "http://www.w3.org/XML/1998/namespace"
# Characters XML 1.0 cannot carry at all (Section 2.2 of XML 1.0).
_INVALID_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9._-]*")

_MD_ORDER: tuple[tuple[str, str], ...] = (
    ("at", "at"),
    ("completed", "completed"),
    ("from_", "from"),
    ("until", "until"),
    ("change", "change"),
    ("datetime", "datetime"),
    ("hash", "hash"),
    ("length", "length"),
    ("type", "type"),
    ("encoding", "encoding"),
    ("path", "path"),
)
_LN_ORDER: tuple[str, ...] = (
    "modified",
    "hash",
    "length",
    "type",
    "encoding",
    "path",
    "pri",
)


def _text(value: str) -> str:
    if "&" in value:
        value = value.replace("&", "&amp;")
    if "<" in value:
        value = value.replace("<", "&lt;")
    if ">" in value:
        value = value.replace(">", "&gt;")
    if "\r" in value:
        value = value.replace("\r", "&#13;")
    return value


def _attr(value: str) -> str:
    value = _text(value)
    if '"' in value:
        value = value.replace('"', "&quot;")
    if "\n" in value:
        value = value.replace("\n", "&#10;")
    if "\t" in value:
        value = value.replace("\t", "&#9;")
    return value


def _value(value: Any) -> str:
    if isinstance(value, datetime):
        return format_datetime(value)
    if isinstance(value, str):  # StrEnum members included
        return _attr(str(value))
    return str(value)


def _extra(extra: dict[str, str]) -> str:
    """Extension attributes; ``{ns}name`` keys get a prefix declared on the element."""
    parts: list[str] = []
    declared: dict[str, str] = {}
    for key, value in extra.items():
        if key.startswith("{"):
            namespace, _, local = key[1:].partition("}")
            if namespace == _XML_NS:
                prefix = "xml"
            elif namespace == RS_NS:
                prefix = "rs"
            else:
                prefix = declared.get(namespace) or f"ns{len(declared)}"
                if namespace not in declared:
                    declared[namespace] = prefix
                    parts.append(f' xmlns:{prefix}="{_attr(namespace)}"')
            name = f"{prefix}:{local}"
        else:
            name = local = key
        if _NAME.fullmatch(local) is None:
            raise ValidationError(
                "document.xml-char", "document", None, f"{key!r} is not an XML attribute name"
            )
        parts.append(f' {name}="{_attr(value)}"')
    return "".join(parts)


def _md(md: Metadata, capability: str | None) -> str:
    fields = md.__dict__
    parts = ["<rs:md"]
    if capability is not None:
        parts.append(f' capability="{capability}"')
    for field, name in _MD_ORDER:
        value = fields[field]
        if value is not None:
            parts.append(f' {name}="{_value(value)}"')
    if md.extra:
        parts.append(_extra(md.extra))
    parts.append("/>")
    return "".join(parts)


def _ln(ln: Link) -> str:
    fields = ln.__dict__
    parts = [f'<rs:ln rel="{_attr(ln.rel)}" href="{_attr(ln.href)}"']
    for name in _LN_ORDER:
        value = fields[name]
        if value is not None:
            parts.append(f' {name}="{_value(value)}"')
    if ln.extra:
        parts.append(_extra(ln.extra))
    parts.append("/>")
    return "".join(parts)


def _entry(entry: Entry, tag: str) -> str:
    parts = [f"  <{tag}>\n    <loc>{_text(entry.loc)}</loc>\n"]
    if entry.lastmod is not None:
        parts.append(f"    <lastmod>{format_datetime(entry.lastmod)}</lastmod>\n")
    if entry.changefreq is not None:
        parts.append(f"    <changefreq>{_text(entry.changefreq)}</changefreq>\n")
    md = entry.md
    if md is not None:
        capability = None if md.capability is None else md.capability.value
        parts.append(f"    {_md(md, capability)}\n")
    for ln in entry.links:
        parts.append(f"    {_ln(ln)}\n")
    parts.append(f"  </{tag}>\n")
    return "".join(parts)


def serialize(doc: Document, *, xml_declaration: bool = True) -> bytes:
    """Serialize ``doc`` as UTF-8 XML, as laid out in the standard's examples.

    The document is not validated (call :func:`resourcesync.validate` for that); the
    root capability is the document class's own.

    Raises:
        ValidationError: a string holds a character XML cannot represent
            (``document.xml-char``), or the result exceeds 50 MB (``document.max-bytes``).
    """
    cls = type(doc)
    name = cls.capability.value
    root, tag = ("sitemapindex", "sitemap") if cls.is_index else ("urlset", "url")
    parts: list[str] = []
    if xml_declaration:
        parts.append('<?xml version="1.0" encoding="UTF-8"?>\n')
    parts.append(f'<{root} xmlns="{SITEMAP_NS}" xmlns:rs="{RS_NS}">\n')
    parts.extend(f"  {_ln(ln)}\n" for ln in doc.links)
    parts.append(f"  {_md(doc.md, name)}\n")
    header = len(parts)
    parts.extend([_entry(entry, tag) for entry in doc.entries])
    parts.append(f"</{root}>\n")
    text = "".join(parts)
    if _INVALID_CHARS.search(text) is not None:
        index = next(
            (i for i, part in enumerate(parts[header:-1]) if _INVALID_CHARS.search(part)), None
        )
        raise ValidationError(
            "document.xml-char", name, index, "a value holds a character XML 1.0 cannot carry"
        )
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > MAX_BYTES:
        raise ValidationError(
            "document.max-bytes",
            name,
            None,
            f"{len(data)} bytes, more than the limit of {MAX_BYTES}",
        )
    return data

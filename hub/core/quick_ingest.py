"""The common publish, a few plain changes, packed without building models (issue 22).

:func:`hub.core.events.packed_from_document` builds pydantic models and runs the
ResourceSync rules over them: for a one-change notification, model validation and rule
checks were half of the parse. Most publishes are one plain shape: a
``changelist-notification`` whose entries each hold one ``<loc>``, one ``<lastmod>`` in
``YYYY-MM-DDThh:mm:ssZ``, one ``<rs:md>`` with ``change`` and optional ``hash``,
``length``, ``type``, and ``<rs:ln rel href>`` links. :func:`quick_rows` reads that shape
straight from the tree, checking the same rules and limits, and returns exactly the rows
the full path would store; on anything else it declines (``None``), and the full path
decides, so every error, and its message, still comes from one place. Like the full path,
it reads only the text of ``<loc>`` and ``<lastmod>`` and the attributes of ``<rs:md>`` and
``<rs:ln>``, and ignores attributes of ``<urlset>``, ``<url>``, ``<loc>``, ``<lastmod>``
and the children of those leaf elements (libxml2 bounds their nesting).
``tests/hub/core/test_quick_ingest.py`` holds the two paths together on a seeded fuzz.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from hub.core.events import EMPTY_BODY, LOC, packed_from_root, w3c
from hub.core.exceptions import BadRequest
from hub.core.packed import Packed, pack
from resourcesync import DEFAULT_LIMITS, Limits, parse_root
from resourcesync.datetimes import UTC_SECONDS
from resourcesync.namespaces import LASTMOD, MAX_ENTRIES, RS_LN, RS_MD, URL, URLSET
from resourcesync.namespaces import LOC as LOC_TAG
from resourcesync.validate import check_hash

Row = tuple[str, str, bytes]

_NOTIFICATION = "changelist-notification"
_CHANGES = frozenset({"created", "updated", "deleted"})


def packed_from_document(body: bytes, max_bytes: int, limits: Limits = DEFAULT_LIMITS) -> Packed:
    """:func:`hub.core.events.packed_from_document`, through :func:`quick_rows` when it can."""
    if not body:
        raise BadRequest(EMPTY_BODY)
    root = parse_root(body, max_bytes=max_bytes)
    rows = quick_rows(root, limits)
    return packed_from_root(root, limits) if rows is None else pack(rows)


def _link(element: Any, max_chars: int, max_attributes: int) -> dict[str, str] | None:
    """``{"rel", "href"}`` of an ``<rs:ln>`` with exactly those two, non-empty; else None."""
    if len(element.attrib) != 2 or max_attributes < 2:
        return None
    rel = element.get("rel")
    href = element.get("href")
    if not rel or not href or len(rel) > max_chars or len(href) > max_chars:
        return None
    return {"rel": rel, "href": href}


def _lastmod(element: Any, max_chars: int) -> datetime | None:
    text = element.text or ""
    if len(text) > max_chars:
        return None
    text = text.strip()
    if UTC_SECONDS.fullmatch(text) is None:  # other W3C spellings: the full path
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _md(element: Any, max_chars: int, max_attributes: int) -> dict[str, Any] | None:
    """``change`` and the optional ``hash``, ``length``, ``type`` of an entry's ``<rs:md>``."""
    attrib = element.attrib
    if len(attrib) > min(4, max_attributes):
        return None
    fields: dict[str, Any] = {}
    for key, value in attrib.items():
        if len(value) > max_chars:
            return None
        if key == "change":
            if value not in _CHANGES:
                return None
        elif key == "hash":
            if check_hash(value) is not None:
                return None
        elif key == "length":
            if not (value.isascii() and value.isdigit()):
                return None
            value = int(value)
        elif key != "type":
            return None
        fields[key] = value
    return fields if "change" in fields else None


def quick_rows(root: Any, limits: Limits = DEFAULT_LIMITS) -> list[Row] | None:
    """The ``(loc, change, stored JSON)`` rows of a plain notification (see the module
    docstring), equal to what the full path stores; ``None`` for any other document."""
    max_chars, max_links, max_attributes = (
        limits.max_value_chars,
        limits.max_links,
        limits.max_attributes,
    )
    if root.tag != URLSET:
        return None
    has_md = False
    root_links = 0
    entries = []
    for child in root:
        tag = child.tag
        if tag == URL:
            entries.append(child)
        elif tag == RS_MD:
            if has_md or max_attributes < 1 or max_chars < len(_NOTIFICATION):
                return None
            # Counted, not listed: lxml's items() is quadratic in the number of attributes.
            if len(child.attrib) != 1 or child.get("capability") != _NOTIFICATION:
                return None
            has_md = True
        elif tag == RS_LN:
            root_links += 1
            if root_links > max_links or _link(child, max_chars, max_attributes) is None:
                return None
        else:
            return None
    if not has_md or not entries or len(entries) > min(limits.max_entries, MAX_ENTRIES):
        return None
    rows: list[Row] = []
    previous: datetime | None = None
    for entry in entries:
        loc: str | None = None
        lastmod: datetime | None = None
        md: dict[str, Any] | None = None
        links: list[dict[str, str]] = []
        for child in entry:
            tag = child.tag
            if tag == LOC_TAG:
                text = child.text or ""
                if loc is not None or len(text) > max_chars:
                    return None
                loc = text.strip()
            elif tag == LASTMOD:
                if lastmod is not None:
                    return None
                lastmod = _lastmod(child, max_chars)
                if lastmod is None:
                    return None
            elif tag == RS_MD:
                if md is not None:
                    return None
                md = _md(child, max_chars, max_attributes)
                if md is None:
                    return None
            elif tag == RS_LN:
                link = _link(child, max_chars, max_attributes)
                if link is None or len(links) == max_links:
                    return None
                links.append(link)
            else:
                return None
        if loc is None or lastmod is None or md is None or LOC.fullmatch(loc) is None:
            return None
        if previous is not None and lastmod < previous:
            return None
        previous = lastmod
        change = md["change"]
        event: dict[str, Any] = {"loc": loc, "lastmod": w3c(lastmod), "change": change}
        for name in ("hash", "length", "type"):
            if name in md:
                event[name] = md[name]
        if links:
            event["links"] = links
        rows.append((loc, change, orjson.dumps(event)))
    return rows

"""The common publish, a few plain changes, packed without building models.

:func:`packed_from_document` is the one way a publish's body becomes the packed changes
the store takes. The full path (:func:`hub.core.events.packed_from_root`) builds pydantic
models and runs the ResourceSync rules over them: for a one-change notification, model
validation and rule checks were half of the parse. Most publishes are one plain shape: a
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

import re
from datetime import datetime
from typing import Any

import orjson

from hub.core.events import EMPTY_BODY, LOC, packed_from_root
from hub.core.exceptions import BadRequest
from hub.core.packed import Packed, pack_nul_free
from resourcesync import DEFAULT_LIMITS, Limits, parse_root
from resourcesync.namespaces import LASTMOD, MAX_ENTRIES, RS_LN, RS_MD, URL, URLSET
from resourcesync.namespaces import LOC as LOC_TAG
from resourcesync.validate import HASH_LIST

Row = tuple[str, str, bytes]

_NOTIFICATION = "changelist-notification"
_CHANGES = frozenset({"created", "updated", "deleted"})
_NUL = "\0"
#: NUL-separated values each matching LOC (HASH_LIST): a regex call per document, not per
#: value, whose call cost was as much as its matching. Each pattern is grouped (an
#: alternation in it stays whole); neither matches a NUL, which a test holds.
_LOCS = re.compile(rf"(?:{LOC.pattern})(?:\0(?:{LOC.pattern}))*", LOC.flags).fullmatch
_HASHES = re.compile(
    rf"(?:{HASH_LIST.pattern})(?:\0(?:{HASH_LIST.pattern}))*", HASH_LIST.flags
).fullmatch


def packed_from_document(body: bytes, max_bytes: int, limits: Limits = DEFAULT_LIMITS) -> Packed:
    """The packed changes of a publish's body (4xx for any body that is not a notification or
    Change List): through :func:`quick_rows` when it can, else the full path."""
    if not body:
        raise BadRequest(EMPTY_BODY)
    root = parse_root(body, max_bytes=max_bytes)
    rows = quick_rows(root, limits)
    return packed_from_root(root, limits) if rows is None else pack_nul_free(rows)


def quick_rows(root: Any, limits: Limits = DEFAULT_LIMITS) -> list[Row] | None:
    """The ``(loc, change, stored JSON)`` rows of a plain notification (see the module
    docstring), equal to what the full path stores; ``None`` for any other document.

    One function with the names it needs in locals: at one change per publish, calls and
    global lookups were a third of it. A ``<lastmod>`` in exactly ``YYYY-MM-DDThh:mm:ssZ``
    that :meth:`datetime.fromisoformat` accepts is already what :func:`hub.core.events.w3c`
    writes, and such fixed-width UTC strings sort as their instants do, so the text itself
    is stored and compared.
    """
    max_chars, max_links, max_attributes = (
        limits.max_value_chars,
        limits.max_links,
        limits.max_attributes,
    )
    # The root rs:md holds one attribute, the capability: under smaller limits the full
    # path decides; an rs:ln holds two.
    if max_attributes < 1 or max_chars < len(_NOTIFICATION) or root.tag != URLSET:
        return None
    link_ok = max_attributes >= 2
    url_tag, md_tag, ln_tag, loc_tag, lastmod_tag = URL, RS_MD, RS_LN, LOC_TAG, LASTMOD
    has_md = False
    root_links = 0
    entries = []
    for child in root:
        tag = child.tag
        if tag == url_tag:
            entries.append(child)
        elif tag == md_tag:
            # Counted, not listed: lxml's items() is quadratic in the number of attributes.
            if has_md or len(child.attrib) != 1 or child.get("capability") != _NOTIFICATION:
                return None
            has_md = True
        elif tag == ln_tag:
            root_links += 1
            if root_links > max_links or not link_ok or len(child.attrib) != 2:
                return None
            rel = child.get("rel")
            href = child.get("href")
            if not rel or not href or len(rel) > max_chars or len(href) > max_chars:
                return None
        else:
            return None
    if not has_md or not entries or len(entries) > min(limits.max_entries, MAX_ENTRIES):
        return None
    max_md = min(4, max_attributes)
    changes = _CHANGES
    fromisoformat, dumps = datetime.fromisoformat, orjson.dumps
    rows: list[Row] = []
    locs: list[str] = []
    hashes: list[str] = []
    previous = ""
    for entry in entries:
        loc: str | None = None
        lastmod: str | None = None
        change: str | None = None  # set once the one rs:md is read
        hash_: str | None = None
        length: int | None = None
        kind: str | None = None
        links: list[dict[str, str]] | None = None
        for child in entry:
            tag = child.tag
            if tag == loc_tag:
                text = child.text or ""
                if loc is not None or len(text) > max_chars:
                    return None
                loc = text.strip()
            elif tag == lastmod_tag:
                text = child.text or ""
                if lastmod is not None or len(text) > max_chars:
                    return None
                text = text.strip()
                # Exactly YYYY-MM-DDThh:mm:ssZ: twenty ASCII characters with these six
                # separators, whose digits fromisoformat checks (other spellings, and
                # impossible dates, get the full path's verdict).
                if len(text) != 20 or text[4::3] != "--T::Z" or not text.isascii():
                    return None
                try:
                    fromisoformat(text)
                except ValueError:
                    return None
                lastmod = text
            elif tag == md_tag:
                attrib = child.attrib
                if change is not None or len(attrib) > max_md:
                    return None
                for key, value in attrib.items():
                    if len(value) > max_chars:
                        return None
                    if key == "change":
                        if value not in changes:
                            return None
                        change = value
                    elif key == "hash":
                        hash_ = value
                        hashes.append(value)
                    elif key == "length":
                        if not (value.isascii() and value.isdigit()):
                            return None
                        length = int(value)
                    elif key == "type":
                        kind = value
                    else:
                        return None
                if change is None:
                    return None
            elif tag == ln_tag:
                if links is None:
                    links = []
                if len(links) == max_links or not link_ok or len(child.attrib) != 2:
                    return None
                rel = child.get("rel")
                href = child.get("href")
                if not rel or not href or len(rel) > max_chars or len(href) > max_chars:
                    return None
                links.append({"rel": rel, "href": href})
            else:
                return None
        if loc is None or lastmod is None or change is None or lastmod < previous:
            return None
        previous = lastmod
        locs.append(loc)
        stored: dict[str, Any] = {"loc": loc, "lastmod": lastmod, "change": change}
        if hash_ is not None:
            stored["hash"] = hash_
        if length is not None:
            stored["length"] = length
        if kind is not None:
            stored["type"] = kind
        if links is not None:
            stored["links"] = links
        rows.append((loc, change, dumps(stored)))
    # Every loc against LOC and every hash against HASH_LIST, each in one regex call over
    # the values joined by NUL (which XML text cannot hold, nor either pattern match).
    if _LOCS(_NUL.join(locs)) is None or (hashes and _HASHES(_NUL.join(hashes)) is None):
        return None
    return rows

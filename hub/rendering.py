"""XML of the materialized documents, written straight from the stored JSON (no I/O here).

Building one pydantic model per entry would dominate the cost of serving a 50,000-entry
page, so entries are rendered by string building with XML escaping; every document still
parses and validates with :func:`resourcesync.parse` (the tests check each one served).

Change List entries carry (Z39.99 §12.1, ResourceSync 1.1):

- ``<lastmod>``: the publisher's time of the change, as published (``rs:md/@datetime`` of the
  notification if it had one, else its ``<lastmod>``);
- ``rs:md/@datetime``: the hub's receipt time (the event id's milliseconds), which is what
  orders the entries: receipt order is forward chronological by construction, whatever the
  publishers' clocks say;
- ``rs:md/@rshub:id`` (namespace :data:`RSHUB_NS`, the same extension attribute as in the
  WebSub bodies of :mod:`hub.notification`): the hub's event id, so a client can switch
  between the push streams and polling at an exact position.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from xml.sax.saxutils import escape

import orjson

from .notification import RSHUB_NS

_NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)
DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
URLSET_OPEN = f"{DECLARATION}<urlset {_NS}>"
CHANGES_OPEN = f'{DECLARATION}<urlset {_NS} xmlns:rshub="{RSHUB_NS}">'
URLSET_CLOSE = "</urlset>"
INDEX_OPEN = f"{DECLARATION}<sitemapindex {_NS}>"
INDEX_CLOSE = "</sitemapindex>"

_MD_ATTRS = ("hash", "length", "type")
_LINK_ATTRS = ("rel", "href", "modified", "hash", "length", "type", "pri", "encoding", "path")
_ATTR_ENTITIES = {'"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}

#: Rendered text is flushed in chunks of about this many characters.
CHUNK_CHARS = 64 * 1024


def attr(value: object) -> str:
    """``value`` as a double-quoted, escaped XML attribute value."""
    return '"' + escape(str(value), _ATTR_ENTITIES) + '"'


@lru_cache(maxsize=4096)
def w3c_ms(ms: int) -> str:
    """Milliseconds since the epoch as a W3C datetime in UTC (fraction only when needed)."""
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}".rstrip("0")
    return text + "Z"


def event_ms(event_id: str) -> int:
    return int(event_id.split("-", 1)[0])


def root(capability: str, links: Iterable[tuple[str, str]], **times: int | None) -> str:
    """Root ``rs:ln`` elements then the root ``rs:md`` (times in ms; ``from_`` for from)."""
    parts = [f"<rs:ln rel={attr(rel)} href={attr(href)}/>" for rel, href in links]
    md = f"<rs:md capability={attr(capability)}"
    for name, value in times.items():
        if value is not None:
            md += f' {name.rstrip("_")}="{w3c_ms(value)}"'
    parts.append(md + "/>")
    return "".join(parts)


def _links(links: list[dict[str, Any]]) -> str:
    out = []
    for link in links:
        out.append("<rs:ln")
        for name in _LINK_ATTRS:
            if name in link:
                out.append(f" {name}={attr(link[name])}")
        out.append("/>")
    return "".join(out)


def _md_extra(data: dict[str, Any]) -> str:
    return "".join(f" {name}={attr(data[name])}" for name in _MD_ATTRS if name in data)


def change_entry(event_id: str, stored: bytes, floor_ms: int) -> str:
    """One Change List ``<url>``; the receipt time is never before the page's ``from``."""
    data = orjson.loads(stored)
    when = max(event_ms(event_id), floor_ms)
    text = (
        f"<url><loc>{escape(data['loc'])}</loc><lastmod>{data['lastmod']}</lastmod>"
        f'<rs:md change="{data["change"]}" datetime="{w3c_ms(when)}" rshub:id="{event_id}"'
        f"{_md_extra(data)}/>"
    )
    if "links" in data:
        text += _links(data["links"])
    return text + "</url>"


def resource_entry(stored: bytes) -> str:
    """One Resource List ``<url>`` from a stored change (the resource's latest state)."""
    data = orjson.loads(stored)
    extra = _md_extra(data)
    text = f"<url><loc>{escape(data['loc'])}</loc><lastmod>{data['lastmod']}</lastmod>"
    if extra:
        text += f"<rs:md{extra}/>"
    if "links" in data:
        text += _links(data["links"])
    return text + "</url>"


def index_entry(loc: str, **times: int | None) -> str:
    """One ``<sitemap>`` of an index, with an ``rs:md`` of its times (ms)."""
    md = "".join(
        f' {name.rstrip("_")}="{w3c_ms(value)}"'
        for name, value in times.items()
        if value is not None
    )
    return f"<sitemap><loc>{escape(loc)}</loc><rs:md{md}/></sitemap>"


def capability_entry(loc: str, capability: str, links: Iterable[tuple[str, str]] = ()) -> str:
    text = f"<url><loc>{escape(loc)}</loc><rs:md capability={attr(capability)}/>"
    text += "".join(f"<rs:ln rel={attr(rel)} href={attr(href)}/>" for rel, href in links)
    return text + "</url>"


def chunked(parts: Iterable[str], size: int = CHUNK_CHARS) -> Iterator[bytes]:
    """Join ``parts`` into UTF-8 chunks of about ``size`` characters."""
    buf: list[str] = []
    length = 0
    for part in parts:
        buf.append(part)
        length += len(part)
        if length >= size:
            yield "".join(buf).encode()
            buf, length = [], 0
    if buf:
        yield "".join(buf).encode()

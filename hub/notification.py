"""The ``changelist-notification`` bodies the hub POSTs to WebSub callbacks.

Rendered straight from the stored JSON, one cached ``<url>`` fragment per event, because
the same event goes to every subscriber. Each entry carries the publisher's ``lastmod`` and
the hub's receipt time as the ResourceSync 1.1 ``rs:md/@datetime`` (the event id's
milliseconds): receipt order is the order subscribers get, so the entries are always in
forward chronological order (Z39.99 §12.1) even when publishers' clocks disagree.

Each entry also names its event id, as the extension attribute ``rshub:id`` on its
``rs:md`` (namespace :data:`RSHUB_NS`), so a subscriber can de-duplicate and resume
entry by entry; a header listing every id would outgrow common header-size limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from xml.sax.saxutils import escape, quoteattr

from .events import decode
from .feed import Event

#: Namespace of rshub's extension attributes in delivered documents.
RSHUB_NS = "urn:rshub:1"

HEAD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    b'xmlns:rs="http://www.openarchives.org/rs/terms/" '
    b'xmlns:rshub="' + RSHUB_NS.encode() + b'">'
)
TAIL = b"</urlset>"

_MD_ATTRS = ("hash", "length", "type")
_LINK_ATTRS = ("rel", "href", "modified", "hash", "length", "type", "pri", "encoding", "path")


def receipt_time(event_id: str) -> str:
    """The event id's milliseconds as a W3C datetime (UTC)."""
    ms = int(event_id.split("-", 1)[0])
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}"
    return text + "Z"


def render_entry(event: Event) -> bytes:
    """One ``<url>`` element for ``event``."""
    data = decode(event.data)
    parts = [
        "<url><loc>",
        escape(data["loc"]),
        "</loc><lastmod>",
        data["lastmod"],
        "</lastmod>",
        f'<rs:md change="{data["change"]}" datetime="{receipt_time(event.id)}"',
        f' rshub:id="{event.id}"',
    ]
    for name in _MD_ATTRS:
        if name in data:
            parts.append(f" {name}={quoteattr(str(data[name]))}")
    parts.append("/>")
    for link in data.get("links", ()):
        parts.append("<rs:ln")
        for name in _LINK_ATTRS:
            if name in link:
                parts.append(f" {name}={quoteattr(str(link[name]))}")
        parts.append("/>")
    parts.append("</url>")
    return "".join(parts).encode()


def render(events: Sequence[Event], up: str | None = None) -> bytes:
    """A complete notification for ``events`` (``up``: the topic's Capability List)."""
    root = b""
    if up is not None:
        root = b'<rs:ln rel="up" href=%s/>' % quoteattr(up).encode()
    root += b'<rs:md capability="changelist-notification"/>'
    return HEAD + root + b"".join(e.xml(render_entry) for e in events) + TAIL

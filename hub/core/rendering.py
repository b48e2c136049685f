"""The one writer of the hub's XML: WebSub bodies and every materialized document. No I/O.

Building one pydantic model per entry would dominate the cost of serving a 50,000-entry
page or fanning a change out to many callbacks, so entries are rendered by string building
with XML escaping; every output still parses and validates with :func:`resourcesync.parse`
(the unit tests check each kind).

A change entry (Z39.99 §12.1, ResourceSync 1.1) in a WebSub body (:func:`change_entry`):

- ``<lastmod>``: the publisher's time of the change, as published;
- ``rs:md/@datetime``: the hub's receipt time (the event id's milliseconds), which orders the
  entries: receipt order is forward chronological by construction, whatever the
  publishers' clocks say;
- ``rs:md/@rshub:id`` (namespace :data:`RSHUB_NS`): the hub's event id, so a client can
  de-duplicate, resume entry by entry, and switch between push and polling at an exact
  position (a header listing every id would outgrow common header-size limits).

In the documents a Destination polls (Change List pages, ``changes.xml``, Resource Lists:
:func:`listed_change`, :func:`resource_entry`) ``<lastmod>`` is the hub's receipt time too,
the same instant as ``rs:md/@datetime``, and the publisher's value moves to
``rs:md/@rshub:lastmod``: a client compares the Resource List's ``lastmod``, the Change
Lists' ``lastmod`` and ``datetime`` and its own position with one another, and the
reference client (resync) takes its position after a baseline from the Resource List's
``lastmod``, so every one of them must be the hub's clock. A publisher's clock that runs
ahead would otherwise hide the changes that follow a baseline.

A package of a ``changedump-notification`` (stored with ``change`` =
:data:`hub.core.events.CHANGEDUMP`) is delivered in a ``changedump-notification`` of its own
(:func:`package_entry`: no ``change``, its ``from``/``until`` span, the same ``datetime`` and
``rshub:id``); a WebSub batch never mixes the two kinds (:func:`same_kind`). It names no
resource, so the documents for polling (Change Lists, ``changes.xml``, Resource Lists)
leave it out.

Times are written as :func:`resourcesync.format_datetime` writes them: a fraction only when
there is one, without trailing zeros.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from hub.core import resource_states
from hub.core.events import CHANGEDUMP, Event, decode, id_ms

#: Namespace of rshub's extension attributes.
RSHUB_NS = "urn:rshub:1"

#: The media type and charset of every XML document the hub writes, and the
#: ``Content-Type`` they are served and delivered with: one value, since WebSub §7 asks a
#: delivery's to match the topic's (websub.rocks compares the two strings). aiohttp writes
#: a response's type and charset as ``type; charset=x``.
MEDIA_TYPE = "application/xml"
CHARSET = "utf-8"
CONTENT_TYPE = f"{MEDIA_TYPE}; charset={CHARSET}"

_NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)
DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
URLSET_OPEN = f"{DECLARATION}<urlset {_NS}>"
#: A ``<urlset>`` whose entries carry ``rshub:`` attributes (Change Lists, Resource Lists,
#: WebSub bodies).
RSHUB_URLSET_OPEN = f'{DECLARATION}<urlset {_NS} xmlns:rshub="{RSHUB_NS}">'
URLSET_CLOSE = "</urlset>"
INDEX_OPEN = f"{DECLARATION}<sitemapindex {_NS}>"
INDEX_CLOSE = "</sitemapindex>"

_MD_ATTRS = ("hash", "length", "type")
_LINK_ATTRS = ("rel", "href", "modified", "hash", "length", "type", "pri", "encoding", "path")
_ATTR_ENTITIES = {'"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
#: Any character :func:`attr` escapes.
_ATTR_SPECIAL = re.compile('[&<>"\n\r\t]')

#: Rendered text is flushed in chunks of about this many characters.
CHUNK_CHARS = 64 * 1024


def escape(text: str) -> str:
    """XML character data: ``&``, ``>`` and ``<`` escaped, as ``xml.sax.saxutils.escape``
    does (not imported: the xml.sax package is ~3 ms of every start)."""
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


def attr(value: object) -> str:
    """``value`` as a double-quoted, escaped XML attribute value."""
    text = str(value)
    # Most values need no escaping: one search instead of seven replaces, on the path of
    # every WebSub body (the WebSub latency, publish -> first callback POST).
    if _ATTR_SPECIAL.search(text) is None:
        return '"' + text + '"'
    text = escape(text)
    for char, entity in _ATTR_ENTITIES.items():
        text = text.replace(char, entity)
    return '"' + text + '"'


@lru_cache(maxsize=4096)
def w3c_ms(ms: int) -> str:
    """Milliseconds since the epoch as a W3C datetime in UTC (fraction only when needed)."""
    text = _w3c_seconds(ms // 1000)
    if ms % 1000:
        text += f".{ms % 1000:03d}".rstrip("0")
    return text + "Z"


@lru_cache(maxsize=256)
def _w3c_seconds(seconds: int) -> str:
    """The whole seconds of :func:`w3c_ms`: shared by the events of one second, each of
    which has its own millisecond (``strftime`` was a fifth of a body's rendering)."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


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


def package_entry(event_id: str, data: dict[str, Any]) -> str:
    """One package ``<url>`` of a ``changedump-notification``: ``<lastmod>`` as published."""
    span = "".join(f" {name}={attr(data[name])}" for name in ("from", "until") if name in data)
    text = (
        f"<url><loc>{escape(data['loc'])}</loc><lastmod>{data['lastmod']}</lastmod>"
        f'<rs:md datetime="{w3c_ms(id_ms(event_id))}" rshub:id="{event_id}"'
        f"{_md_extra(data)}{span}/>"
    )
    if "links" in data:
        text += _links(data["links"])
    return text + "</url>"


def same_kind(events: Sequence[Event]) -> int:
    """How many of ``events``, from the first, are of the first one's kind (changes, or
    packages of a Change Dump): what one notification can carry."""
    dump = events[0].fields["change"] == CHANGEDUMP
    for i, event in enumerate(events):
        if (event.fields["change"] == CHANGEDUMP) is not dump:
            return i
    return len(events)


def change_entry(event_id: str, data: dict[str, Any]) -> str:
    """One change ``<url>`` of a WebSub body: ``<lastmod>`` as the publisher sent it."""
    if data["change"] == CHANGEDUMP:
        return package_entry(event_id, data)
    text = (
        f"<url><loc>{escape(data['loc'])}</loc><lastmod>{data['lastmod']}</lastmod>"
        f'<rs:md change={attr(data["change"])} datetime="{w3c_ms(id_ms(event_id))}"'
        f' rshub:id="{event_id}"{_md_extra(data)}/>'
    )
    if "links" in data:
        text += _links(data["links"])
    return text + "</url>"


def listed_change(event_id: str, data: dict[str, Any], floor_ms: int = 0) -> str:
    """One change ``<url>`` of a Change List (a page or ``changes.xml``): ``<lastmod>`` and
    ``datetime`` are the receipt time, never before ``floor_ms`` (a page's ``from``); the
    publisher's ``lastmod`` is ``rshub:lastmod``. A package (no change of a resource): ""."""
    if data["change"] == CHANGEDUMP:
        return ""
    when = w3c_ms(max(id_ms(event_id), floor_ms))
    text = (
        f"<url><loc>{escape(data['loc'])}</loc><lastmod>{when}</lastmod>"
        f'<rs:md change={attr(data["change"])} datetime="{when}" rshub:id="{event_id}"'
        f" rshub:lastmod={attr(data['lastmod'])}{_md_extra(data)}/>"
    )
    if "links" in data:
        text += _links(data["links"])
    return text + "</url>"


def event_entry(event: Event) -> bytes:
    """:func:`change_entry` of a live event, for :meth:`Event.xml` to cache."""
    return change_entry(event.id, event.fields).encode()


def notification(
    events: Sequence[Event], up: str | None = None, gap: tuple[str, str] | None = None
) -> bytes:
    """A complete ``changelist-notification`` for ``events`` (``up``: the Capability List),
    or ``changedump-notification`` when they are packages (see :func:`same_kind`).

    ``gap`` (last trimmed id, Resource List URL): retention removed events before these
    that the subscriber never got. Said in the body, so the signature covers it: a root
    ``rs:ln rel="resourcelist"`` and ``rs:md/@rshub:trimmed-through``.
    """
    head = RSHUB_URLSET_OPEN
    capability = (
        "changedump-notification"
        if events and events[0].fields["change"] == CHANGEDUMP
        else "changelist-notification"
    )
    if up is not None:
        head += f'<rs:ln rel="up" href={attr(up)}/>'
    if gap is None:
        head += f'<rs:md capability="{capability}"/>'
    else:
        head += f'<rs:ln rel="resourcelist" href={attr(gap[1])}/>'
        head += f'<rs:md capability="{capability}"'
        head += f" rshub:trimmed-through={attr(gap[0])}/>"
    return head.encode() + b"".join(e.xml(event_entry) for e in events) + URLSET_CLOSE.encode()


def lost_marker(loc: str, lost_through: str, at_ms: int) -> str:
    """The first entry of a ``changes.xml`` that no longer lists every change: a change of
    ``loc`` (the hub's ``changes-lost`` URL, 410 Gone) at ``at_ms``, so that a client whose
    position is before it tries to apply it and fails (see
    :func:`hub.core.latest_changes.marker_ms`). ``rshub:lost-through``: the event id of the
    newest change not listed."""
    when = w3c_ms(at_ms)
    return (
        f"<url><loc>{escape(loc)}</loc><lastmod>{when}</lastmod>"
        f'<rs:md change="updated" datetime="{when}" rshub:lost-through={attr(lost_through)}/>'
        "</url>"
    )


def resource_entry(event_id: str, data: dict[str, Any]) -> str:
    """One Resource List ``<url>`` from a stored change (the resource's latest state):
    ``<lastmod>`` is when the hub received that change, as in the Change Lists. A package
    (no resource, though the fold keeps it as it keeps every loc): ""."""
    if data["change"] == CHANGEDUMP:
        return ""
    text = (
        f"<url><loc>{escape(data['loc'])}</loc><lastmod>{w3c_ms(id_ms(event_id))}</lastmod>"
        f"<rs:md rshub:lastmod={attr(data['lastmod'])}{_md_extra(data)}/>"
    )
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


# -- whole documents, rendered off the event loop (hub.live.parsing runs them in its pool) ----

#: Entries a caller may render on the event loop (about 2 ms); more go to the pool.
INLINE_ENTRIES = 400


@dataclass(frozen=True, slots=True)
class Rendered:
    """One version of a document rendered whole, as sent and gzipped (built once, off loop)."""

    raw: bytes
    gz: bytes
    #: When the content was read (ms), e.g. a Resource List's ``at``.
    at_ms: int
    #: The newest event the content reflects (its version), if any.
    last_id: str | None

    @property
    def nbytes(self) -> int:
        return len(self.raw) + len(self.gz)


def rendered(chunks: Iterable[bytes], at_ms: int, last_id: str | None) -> Rendered:
    """Join and gzip encoded ``chunks``."""
    raw = b"".join(chunks)
    return Rendered(raw, gzip.compress(raw, 6), at_ms, last_id)


def resource_entries(entries: Iterable[tuple[bytes, bytes]]) -> Iterator[str]:
    """Resource List ``<url>`` elements for fold entries (``(loc, state)``: see
    :mod:`hub.core.resource_states`); DamagedData for a state that is none."""
    for loc, value in entries:
        yield resource_entry(*resource_states.decode(loc, value))


def resource_list(head: str, fold: dict[bytes, bytes], at_ms: int, last_id: str | None) -> Rendered:
    """A whole Resource List from the fold (``loc -> value``), in ``loc`` order."""
    entries = [(loc, fold[loc]) for loc in sorted(fold)]
    parts = chunked([head, *resource_entries(entries), URLSET_CLOSE])
    return rendered(parts, at_ms, last_id)


def resource_page(head: str, entries: list[tuple[bytes, bytes]]) -> bytes:
    """One page of a paged Resource List snapshot: fold entries ``(loc, state)``."""
    return b"".join(chunked([head, *resource_entries(entries), URLSET_CLOSE]))


def relinked(page: bytes, base: str, alias: str) -> bytes:
    """A stored page whose root links name ``base``, with them naming ``alias`` instead.

    Snapshot pages are rendered once, under the public base, and kept in Redis; a client
    that reached the hub under an alias gets them with links it can follow. Only the root
    ``rs:ln`` elements (before the first ``<url>``) change: resource URIs are the source's.
    """
    head, sep, rest = page.partition(b"<url>")
    old, new = (f'href="{base}/'.encode(), f'href="{alias}/'.encode())
    return head.replace(old, new) + sep + rest


def change_rows(head: str, rows: list[tuple[str, bytes]], floor_ms: int) -> bytes:
    """``head`` then one batch of a Change List page's entries (stored events)."""
    parts = [head, *(listed_change(eid, decode(data), floor_ms) for eid, data in rows)]
    return "".join(parts).encode()

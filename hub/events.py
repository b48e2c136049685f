"""Changes as the hub stores and streams them: compact JSON, one object per change.

Stored form (stream field ``e``): ``{"loc", "lastmod", "change", "hash"?, "length"?,
"type"?, "links"?}``. Clients see the same object with ``id`` and ``topic`` spliced in
front, without re-encoding (:func:`with_id`).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import orjson

from resourcesync import Entry, Link, format_datetime

from .exceptions import BadRequest
from .store import Change


def _link(link: Link) -> dict[str, Any]:
    out: dict[str, Any] = {"rel": link.rel, "href": link.href}
    for name in ("modified", "hash", "length", "type", "pri", "encoding", "path"):
        value = getattr(link, name, None)
        if value is not None:
            out[name] = format_datetime(value) if name == "modified" else value
    return out


@functools.lru_cache(maxsize=4096)
def _w3c(moment: datetime) -> str:
    # Publishers' batches share timestamps; formatting is most of the per-change cost.
    return format_datetime(moment)


def change_from_entry(entry: Entry, index: int) -> Change:
    """The stored form of one Change List entry."""
    md = entry.md
    change = md.change if md is not None else None
    when = entry.change_time
    if change is None or when is None:  # the parser's validation makes this unreachable
        raise BadRequest(f"entry {index}: a change needs rs:md change and lastmod")
    if "\0" in entry.loc:
        raise BadRequest(f"entry {index}: loc contains a NUL character")
    event: dict[str, Any] = {
        "loc": entry.loc,
        "lastmod": _w3c(when),
        "change": str(change),
    }
    if md is not None:
        if md.hash is not None:
            event["hash"] = md.hash
        if md.length is not None:
            event["length"] = md.length
        if md.type is not None:
            event["type"] = md.type
    if entry.links:
        event["links"] = [_link(link) for link in entry.links]
    return Change(entry.loc, event["change"], orjson.dumps(event))


def with_id(event_id: str, topic: str, stored: bytes) -> bytes:
    """``stored`` as a client event: ``{"id": ..., "topic": ..., <stored fields>}``."""
    return b'{"id":"%s","topic":"%s",%s' % (event_id.encode(), topic.encode(), stored[1:])


def decode(stored: bytes) -> dict[str, Any]:
    return orjson.loads(stored)  # type: ignore[no-any-return]

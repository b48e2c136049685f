"""A change as the subscriber hands it to its caller, whichever way it came.

Push transports carry the hub's event id; Change Lists of a plain ResourceSync Source do
not. :attr:`ChangeEvent.key` is therefore the identity used for de-duplication across
transports: ``(loc, lastmod, change)``, with the event id on top when known. The change
type belongs to the identity: a Source may create and delete a resource within one
``lastmod`` tick (ResourceSync 1.0 Sources often write no time on deletions at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from resourcesync import Entry, format_datetime, parse_datetime

__all__ = ["ChangeEvent", "Gap", "event_order"]


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One change of one resource.

    ``lastmod`` is the W3C datetime as the hub writes it (``YYYY-MM-DDThh:mm:ssZ``);
    ``time`` is when the change happened (``rs:md/@datetime`` if the Source gave one, else
    ``lastmod``); ``id`` is the hub's event id, ``None`` from a plain Source.
    """

    loc: str
    lastmod: str
    change: str
    id: str | None = None
    topic: str | None = None
    hash: str | None = None
    length: int | None = None
    type: str | None = None
    links: tuple[dict[str, Any], ...] = ()
    time: datetime | None = field(default=None, compare=False)
    #: Re-sent by an operator's replay of dead letters (``X-RSHub-Replay``): older than
    #: changes already handed over, so judged per resource
    #: (:meth:`subscriber.position.EventCursor.seen`).
    replayed: bool = field(default=False, compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity across transports: ``(loc, lastmod, change)``."""
        return (self.loc, self.lastmod, self.change)

    @property
    def when(self) -> datetime:
        """The change time, falling back to ``lastmod``."""
        return self.time if self.time is not None else parse_datetime(self.lastmod)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ChangeEvent:
        """From the hub's JSON event (WebSocket, SSE)."""
        lastmod = _normal(str(obj["lastmod"]))
        return cls(
            loc=str(obj["loc"]),
            lastmod=lastmod,
            change=str(obj["change"]),
            id=None if obj.get("id") is None else str(obj["id"]),
            topic=obj.get("topic"),
            hash=obj.get("hash"),
            length=None if obj.get("length") is None else int(obj["length"]),
            type=obj.get("type"),
            links=tuple(obj.get("links") or ()),
        )

    @classmethod
    def from_entry(
        cls,
        entry: Entry,
        *,
        id: str | None = None,
        topic: str | None = None,
        default_time: datetime | None = None,
    ) -> ChangeEvent:
        """From a Change List or notification entry (1.0 or 1.1).

        ``lastmod`` is the entry's ``<lastmod>`` when present, else its 1.1 ``datetime``,
        else ``default_time``; ``time`` is the change time (``datetime`` first).
        """
        md = entry.md
        when = entry.change_time or default_time
        stamp = entry.lastmod if entry.lastmod is not None else when
        if stamp is None or md is None or md.change is None:
            raise ValueError(f"{entry.loc}: not a change entry (needs rs:md change and a time)")
        links = tuple(
            {k: v for k, v in link.model_dump(exclude={"extra"}).items() if v is not None}
            for link in entry.links
        )
        for link in links:
            if "modified" in link:
                link["modified"] = format_datetime(link["modified"])
        return cls(
            loc=entry.loc,
            lastmod=format_datetime(stamp),
            change=str(md.change),
            id=id,
            topic=topic,
            hash=md.hash,
            length=md.length,
            type=md.type,
            links=links,
            time=when,
        )

    def to_json(self) -> dict[str, Any]:
        """The hub's JSON event shape; absent fields are left out."""
        out: dict[str, Any] = {}
        if self.id is not None:
            out["id"] = self.id
        if self.topic is not None:
            out["topic"] = self.topic
        out["loc"] = self.loc
        out["lastmod"] = self.lastmod
        out["change"] = self.change
        for name in ("hash", "length", "type"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.links:
            out["links"] = list(self.links)
        if self.replayed:
            out["replayed"] = True
        return out

    def dumps(self) -> bytes:
        return orjson.dumps(self.to_json())


@dataclass(frozen=True, slots=True)
class Gap:
    """The hub trimmed changes before it could deliver them (WebSub ``X-RSHub-Gap``).

    Every change up to ``trimmed_through`` (a hub event id) that this subscriber had not yet
    received is lost: the one way back is a new baseline from the Resource List.
    """

    trimmed_through: str
    #: The topic's Resource List, as the hub named it (``rs:ln rel="resourcelist"``).
    resourcelist: str | None = None


def _normal(value: str) -> str:
    try:
        return format_datetime(parse_datetime(value))
    except ValueError:
        return value


def event_order(event_id: str) -> tuple[int, int] | None:
    """Sort key of a hub event id (``<ms>-<seq>``), ``None`` if it has another shape.

    The hub documents ids as opaque but strictly increasing per topic; this reads the Redis
    stream id form so that "already seen" is a comparison instead of an unbounded set.
    """
    ms, sep, seq = event_id.partition("-")
    if not sep or not ms.isdigit() or not seq.isdigit():
        return None
    return (int(ms), int(seq))

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

__all__ = ["RSHUB_LASTMOD", "ChangeEvent", "Gap", "event_order", "published_lastmod"]

_CHANGES = frozenset({"created", "updated", "deleted"})
#: The ``change`` of a hub event that announces a package of a Change Dump (a
#: ``changedump-notification``): no change of one resource, which a mirror goes past.
CHANGEDUMP = "changedump"


def is_package(item: Any) -> bool:
    """Whether a pushed JSON event is a Change Dump package, not a change."""
    return isinstance(item, dict) and item.get("change") == CHANGEDUMP


#: The publisher's ``lastmod`` on the hub's Change Lists and Resource Lists, whose own
#: ``<lastmod>`` is the hub's receipt time: an extension attribute of ``rs:md``.
RSHUB_LASTMOD = "{urn:rshub:1}lastmod"


def published_lastmod(entry: Entry) -> datetime | None:
    """The entry's time as its publisher gave it: ``rs:md/@rshub:lastmod`` on the hub's
    documents (what push delivers, so that a change has one identity whichever way it came),
    else ``<lastmod>``.

    Raises:
        ValueError: ``rshub:lastmod`` is no W3C datetime.
    """
    extra = entry.md.extra.get(RSHUB_LASTMOD) if entry.md is not None else None
    return parse_datetime(extra) if extra is not None else entry.lastmod


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
    def from_json(cls, obj: Any) -> ChangeEvent:
        """From the hub's JSON event (WebSocket, SSE).

        Raises :class:`ValueError` naming the first field that is not what the hub writes:
        the stream is another party's bytes, and a field taken as it came (a ``change`` of
        ``"moved"`` fetched as an update, an unparseable ``lastmod``) failed only later,
        far from its cause.
        """
        if not isinstance(obj, dict):
            raise ValueError(f"an event is a JSON object, not {type(obj).__name__}")
        loc, lastmod, change = obj.get("loc"), obj.get("lastmod"), obj.get("change")
        if not isinstance(loc, str) or not loc:
            raise ValueError(f"an event's loc is a non-empty string, not {loc!r:.100}")
        if not isinstance(change, str) or change not in _CHANGES:
            raise ValueError(
                f"an event's change is created, updated or deleted, not {change!r:.60}"
            )
        if not isinstance(lastmod, str):
            raise ValueError(f"an event's lastmod is a W3C datetime, not {lastmod!r:.60}")
        lastmod = format_datetime(parse_datetime(lastmod))  # its ValueError says why
        strings = {name: obj.get(name) for name in ("id", "topic", "hash", "type")}
        for name, value in strings.items():
            if value is not None and not isinstance(value, str):
                raise ValueError(f"an event's {name} is a string, not {value!r:.60}")
        length = obj.get("length")
        if length is not None and (type(length) is not int or length < 0):
            raise ValueError(f"an event's length is a non-negative integer, not {length!r:.60}")
        links = obj.get("links") or []
        if not isinstance(links, list) or not all(isinstance(ln, dict) for ln in links):
            raise ValueError(f"an event's links are a list of objects, not {links!r:.100}")
        return cls(
            loc=loc,
            lastmod=lastmod,
            change=change,
            id=strings["id"],
            topic=strings["topic"],
            hash=strings["hash"],
            length=length,
            type=strings["type"],
            links=tuple(links),
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

        ``lastmod`` is the publisher's (:func:`published_lastmod`) when present, else the
        entry's 1.1 ``datetime``, else ``default_time``; ``time`` is the change time
        (``datetime`` first).
        """
        md = entry.md
        when = entry.change_time or default_time
        published = published_lastmod(entry)
        stamp = published if published is not None else when
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
    #: Found polling the hub's ``changes.xml``: it no longer lists changes through
    #: ``trimmed_through`` (trimmed, or more URIs changed than it lists).
    unlisted: bool = False


def event_order(event_id: str) -> tuple[int, int] | None:
    """Sort key of a hub event id (``<ms>-<seq>``), ``None`` if it has another shape.

    The hub documents ids as opaque but strictly increasing per topic; this reads the Redis
    stream id form so that "already seen" is a comparison instead of an unbounded set.
    """
    ms, sep, seq = event_id.partition("-")
    if not sep or not ms.isdigit() or not seq.isdigit():
        return None
    return (int(ms), int(seq))

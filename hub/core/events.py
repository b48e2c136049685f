"""Changes as the hub stores, streams and filters them: plain data, no I/O.

A change is stored as compact JSON (stream field ``e``): ``{"loc", "lastmod", "change",
"hash"?, "length"?, "type"?, "links"?}``. A package announced by a ``changedump-notification``
(a Change Dump's ZIP, Z39.99 §13) is stored the same way, with ``change`` set to
:data:`CHANGEDUMP` and its span as ``"from"``/``"until"``: it travels on every transport
as a change does, and ``?change=changedump`` selects it. It is no resource: the documents
for polling leave it out (:mod:`hub.core.rendering`). Its event id is the Redis stream id
``<ms>-<seq>``, assigned at receipt, so ids are strictly increasing and say when the hub
received the change. Clients see the stored object with ``id`` and ``topic`` spliced in
front, without re-encoding (:func:`with_id`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from hub.core.exceptions import BadRequest, DamagedData
from hub.core.packed import Packed, pack
from resourcesync import (
    DEFAULT_LIMITS,
    ChangeDumpNotification,
    ChangeList,
    ChangeListNotification,
    Document,
    Entry,
    Limits,
    Link,
    format_datetime,
    parse,
    parse_tree,
)
from resourcesync.validate import HTTP_LOC

#: An event id as a comparable tuple: ``(ms, seq)``.
EventKey = tuple[int, int]

#: The stream id grammar: ``<ms>-<seq>`` or ``<ms>``, ASCII digits only (``\d`` would take
#: any Unicode digit), no sign, no spaces; each part must also fit 64 bits unsigned.
_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")
#: The largest part of an event id (Redis stream ids are two unsigned 64-bit integers).
U64_MAX = 2**64 - 1
#: What a 400 for a malformed event id says.
ID_RULE = (
    "an event id is <ms>-<seq> or <ms>: unsigned 64-bit decimal integers "
    "(digits 0-9 only, no sign, no spaces)"
)
#: What a publish with no body gets (400).
EMPTY_BODY = (
    "empty body: expected a changelist-notification or changedump-notification XML document"
)
#: The ``change`` of a stored package of a ``changedump-notification``, and its filter value.
CHANGEDUMP = "changedump"
#: What a published ``<loc>`` must be (the one rule, shared with the publishers).
LOC = HTTP_LOC


def parse_id(value: str) -> EventKey:
    """``"<ms>-<seq>"`` (or ``"<ms>"``) as a comparable tuple; 400 if it is not one."""
    match = _ID.fullmatch(value)
    key = (int(match.group(1)), int(match.group(2) or 0)) if match else None
    if key is None or key[0] > U64_MAX or key[1] > U64_MAX:
        raise BadRequest(f"invalid event id {value[:60]!r}: {ID_RULE}", rule=ID_RULE)
    return key


def format_id(key: EventKey) -> str:
    return f"{key[0]}-{key[1]}"


def id_ms(event_id: str) -> int:
    """The receipt time (ms since the epoch) an event id carries."""
    return int(event_id.split("-", 1)[0])


class Change(NamedTuple):
    """One change ready to store: its loc and change type (for the fold) and its JSON."""

    loc: str
    change: str
    event: bytes


class Event:
    """One stored change with its lazily computed encodings, shared by every consumer."""

    __slots__ = ("_fields", "_json", "_xml", "data", "id", "key")

    def __init__(self, event_id: str, data: bytes) -> None:
        self.id = event_id
        self.key = parse_id(event_id)
        self.data = data
        self._json: bytes | None = None
        self._xml: bytes | None = None
        self._fields: dict[str, Any] | None = None

    @property
    def fields(self) -> dict[str, Any]:
        """The stored change, decoded (once, for filters and rendering)."""
        if self._fields is None:
            self._fields = decode(self.data)
        return self._fields

    def json(self, topic: str) -> bytes:
        if self._json is None:
            self._json = with_id(self.id, topic, self.data)
        return self._json

    def xml(self, render: Callable[[Event], bytes]) -> bytes:
        if self._xml is None:
            self._xml = render(self)
        return self._xml


def with_id(event_id: str, topic: str, stored: bytes) -> bytes:
    """``stored`` as a client event: ``{"id": ..., "topic": ..., <stored fields>}``."""
    return b'{"id":"%s","topic":"%s",%s' % (event_id.encode(), topic.encode(), stored[1:])


def decode(stored: bytes) -> dict[str, Any]:
    """A stored change (as :func:`hub.core.quick_ingest.packed_from_document` wrote it) as a dict.

    Raises:
        DamagedData: it is not one (Redis held something else under the key).
    """
    try:
        change = orjson.loads(stored)
    except orjson.JSONDecodeError as exc:
        raise DamagedData(f"a stored change is not JSON ({exc})") from None
    try:  # spelled out: a generator over the names tripled the cost of a decode
        if (
            type(change["loc"]) is str
            and type(change["lastmod"]) is str
            and type(change["change"]) is str
        ):
            return change  # type: ignore[no-any-return]
    except (KeyError, TypeError):  # not an object, or one without them
        pass
    raise DamagedData(f"a stored change lacks loc, lastmod or change: {bytes(stored[:100])!r}")


# -- from ResourceSync documents ----------------------------------------------------------


def _link(link: Link) -> dict[str, Any]:
    out: dict[str, Any] = {"rel": link.rel, "href": link.href}
    for name in ("modified", "hash", "length", "type", "pri", "encoding", "path"):
        value = getattr(link, name, None)
        if value is not None:
            out[name] = format_datetime(value) if name == "modified" else value
    return out


@functools.lru_cache(maxsize=4096)
def w3c(moment: datetime) -> str:
    # Publishers' batches share timestamps; formatting is most of the per-change cost.
    return format_datetime(moment)


def _stored(entry: Entry, index: int) -> tuple[str, str, bytes]:
    """``(loc, change, stored JSON)`` of one Change List entry: the one definition of it."""
    md = entry.md
    change = None if md is None else md.change
    when = entry.lastmod if md is None or md.datetime is None else md.datetime
    if change is None or when is None:  # the parser's validation makes this unreachable
        raise BadRequest(f"entry {index}: a change needs rs:md change and lastmod")
    loc = entry.loc
    if LOC.fullmatch(loc) is None:
        raise BadRequest(
            f"entry {index}: loc must be an absolute http(s) URL, got {loc[:200]!r}",
            rule="entry.loc-absolute-http",
            index=index,
        )
    kind = str(change)  # the value, without the enum's Python-level property
    event: dict[str, Any] = {"loc": loc, "lastmod": w3c(when), "change": kind}
    if md is not None:
        if md.hash is not None:
            event["hash"] = md.hash
        if md.length is not None:
            event["length"] = md.length
        if md.type is not None:
            event["type"] = md.type
    if entry.links:
        event["links"] = [_link(link) for link in entry.links]
    return loc, kind, orjson.dumps(event)


def _package(entry: Entry, index: int) -> tuple[str, str, bytes]:
    """``(loc, CHANGEDUMP, stored JSON)`` of one ``changedump-notification`` entry: a
    package, whose ``lastmod`` is its own, else the end (or start) of its span."""
    md = entry.md
    span_end = None if md is None else (md.until or md.from_)
    when = entry.lastmod or span_end
    if when is None:
        raise BadRequest(
            f"entry {index}: a changedump-notification entry needs lastmod, or rs:md until or from",
            rule="entry.package-time",
            index=index,
        )
    loc = entry.loc
    if LOC.fullmatch(loc) is None:
        raise BadRequest(
            f"entry {index}: loc must be an absolute http(s) URL, got {loc[:200]!r}",
            rule="entry.loc-absolute-http",
            index=index,
        )
    event: dict[str, Any] = {"loc": loc, "lastmod": w3c(when), "change": CHANGEDUMP}
    if md is not None:
        for name in ("hash", "length", "type"):
            value = getattr(md, name)
            if value is not None:
                event[name] = value
        if md.from_ is not None:
            event["from"] = w3c(md.from_)
        if md.until is not None:
            event["until"] = w3c(md.until)
    if entry.links:
        event["links"] = [_link(link) for link in entry.links]
    return loc, CHANGEDUMP, orjson.dumps(event)


def change_from_entry(entry: Entry, index: int) -> Change:
    """The stored form of one Change List entry."""
    return Change._make(_stored(entry, index))


def changes_from_document(
    body: bytes, max_bytes: int, limits: Limits = DEFAULT_LIMITS
) -> list[Change]:
    """The changes of a ``changelist-notification`` (or Change List) body; 4xx otherwise."""
    if not body:
        raise BadRequest(EMPTY_BODY)
    doc = parse(body, max_bytes=max_bytes, limits=limits)
    stored = _package if isinstance(doc, ChangeDumpNotification) else _stored
    make = Change._make
    return [make(stored(e, i)) for i, e in enumerate(_notification_entries(doc))]


def packed_from_root(root: Any, limits: Limits = DEFAULT_LIMITS) -> Packed:
    """The packed changes of a body already parsed by :func:`resourcesync.parse_root`, through
    the models and every ResourceSync rule: the full path, which
    :func:`hub.core.quick_ingest.packed_from_document` (the one way a publish is packed)
    takes for any document its quick reading declines."""
    doc = parse_tree(root, limits=limits)
    stored = _package if isinstance(doc, ChangeDumpNotification) else _stored
    return pack(stored(e, i) for i, e in enumerate(_notification_entries(doc)))


def _notification_entries(doc: Document) -> tuple[Entry, ...]:
    """The validated entries of a notification or Change List; 4xx for any other body."""
    kinds = ChangeListNotification | ChangeList | ChangeDumpNotification
    if not isinstance(doc, kinds) or doc.is_index:
        raise BadRequest(
            "expected a changelist-notification (or Change List) or changedump-notification"
            f" document, got {doc.capability!s}" + (" index" if doc.is_index else "")
        )
    if not doc.entries:
        what = "packages" if isinstance(doc, ChangeDumpNotification) else "changes"
        raise BadRequest(f"the notification carries no {what}")
    return doc.entries


# -- stream filters -------------------------------------------------------------------------

#: The values of ``?change=``: the three changes, and the packages of Change Dumps.
CHANGE_TYPES = frozenset({"created", "updated", "deleted", CHANGEDUMP})
MAX_PREFIXES = 32


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Server-side stream filter: ``?change=created,deleted`` and ``?prefix=URI`` (repeatable).

    Both together must hold. Filtering never moves a client's position backwards: the events
    it skips are skipped for good, and resuming from the last event it received is still
    gap-free for its filter.
    """

    changes: frozenset[str] | None = None
    prefixes: tuple[str, ...] = ()

    @classmethod
    def from_query(cls, query: Mapping[str, str], prefixes: list[str]) -> EventFilter | None:
        """The filter a request asks for, or ``None`` for "everything"."""
        wanted: frozenset[str] | None = None
        if "change" in query:
            wanted = frozenset(v.strip() for v in query["change"].split(",") if v.strip())
            if wanted - CHANGE_TYPES or not wanted:
                raise BadRequest(
                    "change filter must list created, updated, deleted or changedump, got "
                    f"{query['change'][:80]!r}"
                )
        if len(prefixes) > MAX_PREFIXES:
            raise BadRequest(f"at most {MAX_PREFIXES} prefix filters")
        if wanted is None and not prefixes:
            return None
        return cls(wanted, tuple(prefixes))

    def accepts(self, fields: dict[str, Any]) -> bool:
        if self.changes is not None and fields.get("change") not in self.changes:
            return False
        return not self.prefixes or str(fields.get("loc", "")).startswith(self.prefixes)

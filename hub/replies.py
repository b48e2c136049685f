"""Redis replies as the hub reads them: raw bytes in, typed values out.

redis-py types replies loosely (``bytes | str | None``, ``Any``); these few functions are
the one place where the hub states what it expects back, so the rest stays typed.
"""

from __future__ import annotations

from typing import Any

from . import keys


def text(value: bytes | str | int) -> str:
    """A reply value as text (the hub's clients do not decode responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def bytes_(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def events(rows: Any) -> list[tuple[str, bytes]]:
    """An XRANGE/XREVRANGE reply of event entries: ``[(id, stored JSON), ...]``."""
    return [(text(eid), bytes_(fields[keys.EVENT_FIELD])) for eid, fields in rows or ()]


def first_id(rows: Any) -> str | None:
    """The id of the first entry of an XRANGE/XREVRANGE reply, if any."""
    return text(rows[0][0]) if rows else None


def xread_events(result: Any) -> list[tuple[str, bytes]]:
    """The entries of an XREAD reply for one stream."""
    return events(result[0][1]) if result else []

"""Server-side filters for streams: by change type and by URI prefix.

``?change=created,deleted`` keeps only those change types; ``?prefix=URI`` (repeatable)
keeps only changes whose ``loc`` starts with one of the prefixes. Both together must hold.
Filtering never moves a client's position backwards: the events it skips are skipped for
good, and resuming from the last event it received is still gap-free for its filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .exceptions import BadRequest

CHANGES = frozenset({"created", "updated", "deleted"})
MAX_PREFIXES = 32


@dataclass(frozen=True, slots=True)
class EventFilter:
    changes: frozenset[str] | None = None
    prefixes: tuple[str, ...] = ()

    @classmethod
    def from_query(cls, query: Mapping[str, str], prefixes: list[str]) -> EventFilter | None:
        """The filter a request asks for, or ``None`` for "everything"."""
        wanted: frozenset[str] | None = None
        if "change" in query:
            wanted = frozenset(v.strip() for v in query["change"].split(",") if v.strip())
            unknown = wanted - CHANGES
            if unknown or not wanted:
                raise BadRequest(
                    f"change filter must list created, updated or deleted, got "
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

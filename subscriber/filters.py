"""Which changes a subscriber wants: ``--change`` and ``--prefix``, asked of the hub.

The hub filters pushed changes itself (``?change=&prefix=`` on streams, ``hub.filter.*`` on
a WebSub subscription); polled Change Lists are filtered here, by the same rule: both
parts must hold, ``prefix`` repeats and any one of them will do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .events import ChangeEvent

__all__ = ["CHANGE_TYPES", "MAX_PREFIXES", "ChangeFilter"]

CHANGE_TYPES = frozenset({"created", "updated", "deleted"})
#: The hub takes at most this many prefixes.
MAX_PREFIXES = 32


@dataclass(frozen=True, slots=True)
class ChangeFilter:
    changes: frozenset[str] | None = None
    prefixes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, changes: Iterable[str] | None = None, prefixes: Iterable[str] = ()
    ) -> ChangeFilter | None:
        """The filter, or ``None`` for every change; ``ValueError`` for an unknown type."""
        wanted = None if changes is None else frozenset(c.strip() for c in changes if c.strip())
        if wanted is not None and (not wanted or wanted - CHANGE_TYPES):
            raise ValueError(f"change types are created, updated, deleted; got {sorted(wanted)}")
        found = cls(wanted, tuple(prefixes))
        return None if wanted is None and not found.prefixes else found

    def accepts(self, event: ChangeEvent) -> bool:
        if self.changes is not None and event.change not in self.changes:
            return False
        return not self.prefixes or event.loc.startswith(self.prefixes)

    def fields(self, change: str, prefix: str) -> list[tuple[str, str]]:
        """The filter as request fields named ``change`` and ``prefix``."""
        out = [] if self.changes is None else [(change, ",".join(sorted(self.changes)))]
        return out + [(prefix, p) for p in self.prefixes]

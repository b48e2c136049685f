"""Damaged data in Redis, said once.

A record the hub did not write (:class:`~hub.core.exceptions.DamagedData`, a WRONGTYPE key)
is met again by every round of the job that walks over it: the ownership round each tick,
the page scan each second. :class:`DamageLog` says each damaged thing once, and again only
after it was seen whole, so the log shows the damage without filling up with it.
"""

from __future__ import annotations

import logging

#: Things remembered as said at most; past it each is said every time (memory stays bounded).
MAX_REMEMBERED = 10_000


class DamageLog:
    """Warnings about damaged things, each said once until it is whole again."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._said: set[str] = set()

    def __bool__(self) -> bool:
        """Whether anything is remembered as said (else :meth:`whole` has nothing to do)."""
        return bool(self._said)

    def damaged(self, what: str, problem: object) -> None:
        if what in self._said:
            return
        if len(self._said) < MAX_REMEMBERED:
            self._said.add(what)
        self.log.warning("%s is damaged, left out until repaired: %s", what, problem)

    def whole(self, what: str) -> None:
        """``what`` was read fine: if it breaks again, say so again."""
        if self._said:
            self._said.discard(what)

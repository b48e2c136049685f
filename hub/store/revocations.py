"""Token revocations in Redis: one hash that every hub process reads, and a version counter.

Each revocation is a field of :data:`hub.store.keys.REVOCATIONS` (its kind, fingerprint or
jti, and topic; :class:`hub.core.revocations.Revocation`), the token never: only its
fingerprint. One script (``revocation.lua``) adds or removes a field and raises
:data:`hub.store.keys.REVOCATIONS_VERSION` at once, so a process that polls the counter
(:meth:`RevocationStore.version`, one ``GET``) re-reads the hash exactly when it changed.
Revocations survive restarts with the rest of Redis. One with an expiry
(:attr:`hub.core.revocations.Revocation.expires_at`) is left out of :meth:`RevocationStore.load`
once past, and forgotten by the next revoke.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from hub.core.damage import DamageLog
from hub.core.revocations import MAX_REVOCATIONS, Revocation
from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe

log = logging.getLogger(__name__)

_KEYS = [keys.REVOCATIONS, keys.REVOCATIONS_VERSION]


class RevocationsFull(Exception):
    """The hash holds :data:`hub.core.revocations.MAX_REVOCATIONS` already."""


class RevocationStore:
    def __init__(self, redis: Client, script_pipe: ScriptPipe) -> None:
        self.redis = redis
        self.scripts = script_pipe
        self.damage = DamageLog(log)

    async def version(self) -> int:
        """The set's version: it moves with every change (0 before the first)."""
        return keys.count(await self.redis.get(keys.REVOCATIONS_VERSION))

    async def load(self, now: float | None = None) -> tuple[int, list[Revocation]]:
        """The version, then every revocation (read in that order: a change between the two
        reads leaves the version behind the set, so the next poll reads it again), but
        those expired by ``now`` (default: the time now). A field the hub did not write is
        said once and left out."""
        now = time.time() if now is None else now
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.REVOCATIONS_VERSION)
            pipe.hgetall(keys.REVOCATIONS)
            version, rows = await pipe.execute()
        out = []
        for field, record in (rows or {}).items():
            try:
                revocation = _revocation(field, record)
            except (ValueError, TypeError, AttributeError) as exc:  # JSON's and text's too
                self.damage.damaged(f"revocation {keys.shown_text(field)!r}", exc)
                continue
            if not revocation.expired(now):
                out.append(revocation)
        return keys.count(version), out

    async def revoke(self, revocation: Revocation) -> Revocation | None:
        """Store ``revocation``; None when it was in force already (the first stays).

        Raises:
            RevocationsFull: no room for another one.
        """
        fields: dict[str, float] = {"at": revocation.revoked_at}
        if revocation.expires_at is not None:
            fields["expires"] = revocation.expires_at
        done = await self.scripts.run(
            scripts.REVOCATION,
            _KEYS,
            [
                "revoke",
                revocation.field,
                orjson.dumps(fields).decode(),
                MAX_REVOCATIONS,
                repr(max(revocation.revoked_at, time.time())),
            ],
        )
        if int(done) < 0:
            raise RevocationsFull(f"the hub keeps at most {MAX_REVOCATIONS} revocations")
        return revocation if int(done) else None

    async def get(self, revocation: Revocation) -> Revocation | None:
        """The stored revocation of the same token and topic, with its own time."""
        record = await self.redis.hget(keys.REVOCATIONS, revocation.field)
        try:
            return None if record is None else _revocation(revocation.field, record)
        except (ValueError, TypeError, AttributeError):  # shown as revoked at 0
            return revocation

    async def lift(self, revocation: Revocation) -> bool:
        """Remove the revocation of the same token and topic; False when there was none."""
        done = await self.scripts.run(scripts.REVOCATION, _KEYS, ["lift", revocation.field])
        return bool(int(done))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _revocation(field: Any, record: Any) -> Revocation:
    fields = orjson.loads(record)
    at, expires = fields.get("at"), fields.get("expires")
    if not _number(at):
        raise ValueError("no time in its record")
    if expires is not None and not _number(expires):
        raise ValueError("its expiry is not a time")
    return Revocation.from_field(
        keys.text(field), float(at), None if expires is None else float(expires)
    )

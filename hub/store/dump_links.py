"""The Resource Dump and Change Dump a topic's Source declared (:mod:`hub.core.dump_links`),
kept as fields of the topic's ``keys.topic_meta`` hash: deleted with the topic, and the
latest declaration of each replaces the one before."""

from __future__ import annotations

from hub.core.dump_links import DUMP_RELS
from hub.core.events import LOC
from hub.store import keys
from hub.store.redis_connection import Client

__all__ = ["declare", "declared"]

#: The ``topic_meta`` field of each declared dump, by its link relation.
_FIELDS = {rel: f"{keys.DUMP_FIELD_PREFIX}{rel}" for rel in DUMP_RELS}


async def declare(redis: Client, topic: str, links: dict[str, str]) -> None:
    """Keep ``links`` (``rel -> href``, rels of :data:`DUMP_RELS`) for ``topic``."""
    known = [(_FIELDS[rel], href) for rel, href in links.items() if rel in _FIELDS]
    if known:
        await redis.hset(keys.topic_meta(topic), mapping={field: href for field, href in known})


async def declared(redis: Client, topic: str) -> dict[str, str]:
    """``rel -> href`` of ``topic``'s declared dumps, in :data:`DUMP_RELS` order; a value
    Redis holds that is no http(s) URL (not written here) is left out."""
    values = await redis.hmget(keys.topic_meta(topic), list(_FIELDS.values()))
    out = {}
    for rel, value in zip(_FIELDS, values, strict=True):
        if value is None:
            continue
        href = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        if LOC.fullmatch(href) is not None:
            out[rel] = href
    return out

"""Every Redis key the hub uses, in one place.

A topic's keys carry the topic name as a Redis Cluster hash tag (``{name}``), so all of them
share one hash slot and a Lua script may touch them together.
"""

from __future__ import annotations

PREFIX = "rshub:"

#: Set of every topic name that has ever been published to.
TOPICS = PREFIX + "topics"

#: Stream field holding one change as compact JSON (without its id).
EVENT_FIELD = b"e"


def events(topic: str) -> str:
    """The topic's change stream; entry ids are the event ids."""
    return f"{PREFIX}{{{topic}}}:events"


def idempotency(topic: str, key: str) -> str:
    """Remembers a publish's body digest and event ids under its Idempotency-Key."""
    return f"{PREFIX}{{{topic}}}:idem:{key}"


def subscriptions(topic: str) -> str:
    """Hash: callback URL -> subscription JSON."""
    return f"{PREFIX}{{{topic}}}:subs"


def cursors(topic: str) -> str:
    """Hash: callback URL -> id of the last event delivered to it."""
    return f"{PREFIX}{{{topic}}}:cursors"


def pages(topic: str) -> str:
    """Sorted set of closed Change List pages, scored by page number (see ``hub.pages``)."""
    return f"{PREFIX}{{{topic}}}:pages"


def pages_head(topic: str) -> str:
    """Hash: the open Change List page and how far the stream was scanned (``hub.pages``)."""
    return f"{PREFIX}{{{topic}}}:pages:head"


def resourcelist_snapshot(topic: str) -> str:
    """Hash: the current Resource List snapshot (id, at, completed, pages, last_id)."""
    return f"{PREFIX}{{{topic}}}:rl:snapshot"


def resourcelist_page(topic: str, snapshot: str, page: int) -> str:
    """One rendered page of a Resource List snapshot (expires with the snapshot)."""
    return f"{PREFIX}{{{topic}}}:rl:{snapshot}:{page}"


def resources(topic: str) -> str:
    """Hash: loc -> latest resource state, folded from the changes."""
    return f"{PREFIX}{{{topic}}}:resources"


def topic_meta(topic: str) -> str:
    """Hash of small per-topic facts (created time, last publish, ...)."""
    return f"{PREFIX}{{{topic}}}:meta"


#: Set of topic names that have (or had) WebSub subscriptions.
SUBSCRIBED_TOPICS = PREFIX + "subscribed-topics"


def pinged(topic: str) -> str:
    """Set of digests of changes already stored from publish pings of the topic's URL."""
    return f"{PREFIX}{{{topic}}}:pinged"

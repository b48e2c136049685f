"""Every Redis key, hash field and reply shape the hub uses, in one place.

A topic's keys carry the topic name as a Redis Cluster hash tag (``{name}``), so all of them
share one hash slot and a Lua script may touch them together. The Lua scripts spell the
hash fields as ``$NAME`` placeholders, filled in from :data:`SCRIPT_NAMES` when they are
loaded (:mod:`hub.store.scripts`), so each name is written once.

redis-py types replies loosely (``bytes | str | None``, ``Any``); the reply functions at the
end are the one place where the hub states what it expects back, so the rest stays typed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from redis.exceptions import ResponseError

from hub.core.exceptions import DamagedData
from hub.core.topics import TOPIC_NAME

PREFIX = "rshub:"

#: Set of every topic name that has ever been published to.
TOPICS = PREFIX + "topics"

#: Counter bumped each time a process adds a name to :data:`TOPICS` (before the topic's
#: first event): while it stands still, the set has no new name (hub.live.topic_directory).
TOPICS_VERSION = PREFIX + "topics:version"

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


def tails(topic: str) -> str:
    """Set of the hub processes (node ids) whose live feed follows the topic by notice: the
    append script tells each of them but its caller what it appended (hub.live.feed)."""
    return f"{PREFIX}{{{topic}}}:tails"


#: Pub/sub channel of a process's tail notices, its node id appended.
TAIL_CHANNEL = PREFIX + "tail:"


def cursors(topic: str) -> str:
    """Hash: callback URL -> id of the last event delivered to it."""
    return f"{PREFIX}{{{topic}}}:cursors"


def holds(topic: str) -> str:
    """Sorted set: callback URL -> its cursor's milliseconds. Its lowest score is how far
    back retention may not trim (see ``hub.store.event_store.Retention``); kept with every
    cursor write."""
    return f"{PREFIX}{{{topic}}}:holds"


def pages(topic: str) -> str:
    """Sorted set of closed Change List pages, scored by page number (see ``hub.store.pages``)."""
    return f"{PREFIX}{{{topic}}}:pages"


def pages_head(topic: str) -> str:
    """Hash: the open Change List page and how far the stream was scanned (``hub.store.pages``)."""
    return f"{PREFIX}{{{topic}}}:pages:head"


def rendered_page(topic: str, n: int) -> str:
    """String: closed Change List page ``n``, gzipped (``hub.store.rendered_pages``)."""
    return f"{PREFIX}{{{topic}}}:pages:rendered:{n}"


def resourcelist_snapshot(topic: str) -> str:
    """Hash: the current Resource List snapshot (id, at, completed, pages, last_id)."""
    return f"{PREFIX}{{{topic}}}:rl:snapshot"


def resourcelist_page(topic: str, snapshot: str, page: int) -> str:
    """One rendered page of a Resource List snapshot (expires with the snapshot)."""
    return f"{PREFIX}{{{topic}}}:rl:{snapshot}:{page}"


def resourcelist_copy(topic: str, token: str) -> str:
    """Hash with a TTL: one reader's copy of the fold, read in batches (``hub.store.snapshots``)."""
    return f"{PREFIX}{{{topic}}}:rl:copy:{token}"


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


def content(topic: str) -> str:
    """Hash: a plain WebSub topic's latest content (:data:`CONTENT_BODY`, :data:`CONTENT_TYPE`;
    see ``hub.store.topic_contents``)."""
    return f"{PREFIX}{{{topic}}}:content"


#: ``content``: the content's bytes and its ``Content-Type`` header value.
CONTENT_BODY = "body"
CONTENT_TYPE = "type"


# -- hash fields --------------------------------------------------------------------------

#: ``topic_meta``: id of the newest event, ms of the last publish, ms the topic was created,
#: and the id of the newest event retention ever trimmed.
LAST_ID = "last_id"
LAST_PUBLISH_MS = "last_publish_ms"
CREATED_MS = "created_ms"
TRIMMED_THROUGH = "trimmed_through"
#: ``topic_meta``: changes ever stored for the topic (a counter for publish rates).
PUBLISHED = "published"
#: ``topic_meta``: the Source's declared dumps, ``dump:resourcedump`` and ``dump:changedump``
#: (``hub.store.dump_links``).
DUMP_FIELD_PREFIX = "dump:"

#: ``pages_head``: the open Change List page (see ``hub.store.pages``).
HEAD_N, HEAD_FROM, HEAD_FIRST, HEAD_SCANNED, HEAD_COUNT, HEAD_WEND = (
    "n",
    "from",
    "first",
    "scanned",
    "count",
    "wend",
)

#: ``resourcelist_snapshot``: id, at, completed, pages, last_id.
SNAP_ID, SNAP_AT, SNAP_COMPLETED, SNAP_PAGES, SNAP_LAST_ID = (
    "id",
    "at",
    "completed",
    "pages",
    LAST_ID,
)

#: ``requests``: the topic's request counter (no callback URL is spelled so).
REQUEST_SEQ = "#seq"

#: Placeholders the Lua scripts may use (``$LAST_ID`` ...), with their values.
SCRIPT_NAMES: dict[str, str] = {
    "EVENT_FIELD": EVENT_FIELD.decode(),
    "TAIL_CHANNEL": TAIL_CHANNEL,
    "LAST_ID": LAST_ID,
    "LAST_PUBLISH_MS": LAST_PUBLISH_MS,
    "CREATED_MS": CREATED_MS,
    "TRIMMED_THROUGH": TRIMMED_THROUGH,
    "PUBLISHED": PUBLISHED,
    "HEAD_N": HEAD_N,
    "HEAD_FROM": HEAD_FROM,
    "HEAD_FIRST": HEAD_FIRST,
    "HEAD_SCANNED": HEAD_SCANNED,
    "HEAD_COUNT": HEAD_COUNT,
    "HEAD_WEND": HEAD_WEND,
    "REQUEST_SEQ": REQUEST_SEQ,
}


# -- replies ------------------------------------------------------------------------------


def text(value: bytes | str | int) -> str:
    """A reply value as text (the hub's clients do not decode responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def optional_text(value: bytes | str | int | None) -> str | None:
    return None if value is None else text(value)


def shown_text(value: bytes | str | None) -> str | None:
    """A value for a listing, whatever its bytes (undecodable ones replaced)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def topic_names(members: Iterable[bytes | str]) -> tuple[list[str], list[bytes | str]]:
    """The members of :data:`TOPICS` (or :data:`SUBSCRIBED_TOPICS`) that are topic names,
    sorted, and the others: a member the hub did not write (not UTF-8, not a name) is left
    out, or one such member stopped every job that walks the topics."""
    names, others = [], []
    for member in members:
        try:
            name = text(member)
        except UnicodeDecodeError:
            others.append(member)
            continue
        if TOPIC_NAME.fullmatch(name):
            names.append(name)
        else:
            others.append(member)
    return sorted(names), others


def count(value: bytes | str | None) -> int:
    """A counter or time of a meta hash for a listing: 0 when absent or not a number (one
    topic's damaged figure must not fail the listing of every topic)."""
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


#: What Redis answers a command on a key that holds another type, and a script's error on
#: a value it could not read: a damaged topic (see :func:`is_damage`), not an outage.
_DAMAGE = re.compile(r"WRONGTYPE|Error running script|user_script")


def is_damage(exc: BaseException) -> bool:
    """Whether a Redis error says what a key holds is not what the hub wrote."""
    return isinstance(exc, ResponseError) and _DAMAGE.search(str(exc)) is not None


def per_topic(replies: list[Any], each: int) -> Iterator[list[Any] | None]:
    """The replies of a ``raise_on_error=False`` pipeline of ``each`` commands per topic,
    topic by topic: None for a topic with a damaged key (a listing shows it empty rather
    than fail for every topic); any other error (an outage) is raised."""
    for start in range(0, len(replies), each):
        group = replies[start : start + each]
        errors = [r for r in group if isinstance(r, Exception)]
        for error in errors:
            if not is_damage(error):
                raise error
        yield None if errors else group


def as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def hscan_reply(reply: Any) -> tuple[int, dict[bytes, bytes]]:
    """An HSCAN reply: the next cursor (0 at the end) and the batch of fields."""
    cursor, found = reply
    return int(cursor), {as_bytes(k): as_bytes(v) for k, v in found.items()}


def event_rows(rows: Any) -> list[tuple[str, bytes]]:
    """An XRANGE/XREVRANGE reply of event entries: ``[(id, stored JSON), ...]``.

    Raises:
        DamagedData: an entry has no change (another program's XADD).
    """
    try:
        return [(text(eid), as_bytes(fields[EVENT_FIELD])) for eid, fields in rows or ()]
    except KeyError:
        raise _entry_damaged(rows, lambda fields: EVENT_FIELD in fields) from None


def script_event_rows(rows: Any) -> list[tuple[str, bytes]]:
    """Event entries as a script returns an XRANGE: ``[[id, [field, value, ...]], ...]``."""
    out = []
    for eid, fields in rows or ():
        values = dict(zip(map(as_bytes, fields[::2]), fields[1::2], strict=False))
        if EVENT_FIELD not in values:
            raise _entry_damaged([(eid, values)], lambda fields: False)
        out.append((text(eid), as_bytes(values[EVENT_FIELD])))
    return out


def _entry_damaged(rows: Any, whole: Any) -> DamagedData:
    eid = shown_text(next(eid for eid, fields in rows if not whole(fields)))
    return DamagedData(f"stream entry {eid} holds no change (no field 'e')", entry_id=eid)


def first_row_id(rows: Any) -> str | None:
    """The id of the first entry of an XRANGE/XREVRANGE reply, if any."""
    return text(rows[0][0]) if rows else None


def xread_rows(result: Any) -> list[tuple[str, bytes]]:
    """The entries of an XREAD reply for one stream."""
    return event_rows(result[0][1]) if result else []


# -- delivery ownership (see hub.store.leases) ----------------------------------------------------

#: Sorted set: live hub process id -> lease expiry (ms, Redis clock). It and
#: :data:`LEADER` share a hash tag: the heartbeat script touches both. The tag holds an
#: ``@``, which no topic name may: a topic's keys are found (and deleted) by its own tag,
#: so a topic named ``hub`` must never match these.
NODES = PREFIX + "{@hub}:nodes"

#: Stream of subscription changes (``topic``, ``callback``, ``kind``), so the process that
#: owns a subscription learns at once that another process activated or removed it.
SUBSCRIPTION_CHANGES = PREFIX + "subscription-changes"

#: String: the process that runs the hub-wide periodic jobs, with a TTL.
LEADER = PREFIX + "{@hub}:leader"


def requests(topic: str) -> str:
    """Hash: ``$REQUEST_SEQ`` -> the number of the topic's last (un)subscription request
    (Redis's clock in microseconds, or one more);
    callback URL -> the number of the newest request stored for it (the latest request
    wins, see ``SubscriptionStore.activate_latest``)."""
    return f"{PREFIX}{{{topic}}}:requests"


def request_marks(topic: str) -> str:
    """Sorted set: callback URL -> when (ms) its number in ``requests`` may be forgotten, as
    no request older than the one stored can be stored any more by then."""
    return f"{PREFIX}{{{topic}}}:requests:marks"


def owners(topic: str) -> str:
    """Hash: callback URL -> ``"<node> <fencing token>"``."""
    return f"{PREFIX}{{{topic}}}:owners"


def owner_heartbeats(topic: str) -> str:
    """Hash: node -> its heartbeat's expiry (ms, Redis clock), kept by every node holding a
    lease of the topic, so a claim reads the holder's liveness in the topic's own slot."""
    return f"{PREFIX}{{{topic}}}:owner-heartbeats"


def owner_epoch(topic: str) -> str:
    """Counter from which every fencing token of the topic's subscriptions is drawn."""
    return f"{PREFIX}{{{topic}}}:owner-epoch"


def dead_letters(topic: str, sub_id: str) -> str:
    """Stream: the events a subscription (by its ``subscription_id``) could not be
    delivered within the retry window, one entry each (``hub.store.dead_letters``)."""
    return f"{PREFIX}{{{topic}}}:dead:{sub_id}"


def dead_letter_replay(topic: str, sub_id: str) -> str:
    """String with a TTL: the hub process replaying a subscription's dead letters now, so
    that no other process replays them at the same time (``hub.store.dead_letters``)."""
    return f"{PREFIX}{{{topic}}}:dead-replay:{sub_id}"


def resourcelist_lock(topic: str) -> str:
    """String with a TTL: the process taking a Resource List snapshot of ``topic`` now."""
    return f"{PREFIX}{{{topic}}}:rl:taking"


def xread_fields(result: Any) -> list[tuple[str, dict[str, str]]]:
    """The entries of an XREAD reply for one stream, with their fields as text."""
    rows = result[0][1] if result else ()
    return [(text(eid), {text(k): text(v) for k, v in fields.items()}) for eid, fields in rows]


# -- attempt log and presence ---------------------------------------------------------------


def attempts(topic: str, sub_id: str) -> str:
    """List, newest first: the last delivery attempts of one subscription (by its id), each
    a JSON array (``hub.store.attempts.Attempt``'s fields in order)."""
    return f"{PREFIX}{{{topic}}}:attempts:{sub_id}"


def last_successes(topic: str) -> str:
    """Hash: callback URL -> its last 2xx delivery attempt (as in ``attempts``)."""
    return f"{PREFIX}{{{topic}}}:last-success"


def presence(node: str) -> str:
    """Hash with a TTL: ``<transport> <topic>`` -> live stream clients of one hub process."""
    return f"{PREFIX}presence:{node}"


def failed_verification(sub_id: str) -> str:
    """String with a TTL: the last failed intent verification of a subscription (by its
    id), as JSON (``hub.store.subscriptions.FailedVerification``). Not under the topic's
    tag: a subscription that never verified has no other key to be found by."""
    return f"{PREFIX}failed-verification:{sub_id}"


# -- token revocations (hub.store.revocations) -----------------------------------------

#: Hash: ``<kind> <fingerprint or jti> <topic or *>`` -> JSON ``{"at": epoch seconds}``,
#: every revocation in force. Its hash tag is no topic name (``@`` is in none), so deleting
#: a topic never touches it; the version counter shares it (one script writes both).
REVOCATIONS = PREFIX + "{@revocations}"
#: Counter, raised by every revocation and lift: a process re-reads the hash when it moved.
REVOCATIONS_VERSION = PREFIX + "{@revocations}:version"


def used_signature(digest: str) -> str:
    """String with a TTL: a self-service request signature already accepted (no replays)."""
    return f"{PREFIX}used-signature:{digest}"

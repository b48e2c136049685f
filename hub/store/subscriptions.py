"""WebSub subscriptions and their delivery cursors, kept in Redis so they survive restarts.

A subscription's record carries its delivery state (failures, suspension, the time of the
next retry), so whichever process owns it next continues its back-off instead of starting
over. Writes by delivery workers are fenced by their lease token (:mod:`hub.store.leases`).
Every activation and removal is also appended to ``keys.SUBSCRIPTION_CHANGES``, so the
process that owns a subscription learns of it at once, whichever process took the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

import orjson
from redis.exceptions import RedisError

from hub.core import metrics
from hub.core.damage import DamageLog
from hub.core.exceptions import DamagedData
from hub.core.placement import subscription_id
from hub.core.retrying import STORE_OUTAGE, retrying
from hub.core.revocations import Credential
from hub.core.tasks import Tasks, cancel_and_wait
from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe

log = logging.getLogger(__name__)

#: Entries kept in the subscription change stream (a process that missed more reconciles).
_CHANGES_KEPT = 10_000

#: Kinds of :class:`SubscriptionChange`. A topic removal (the admin API deleted the topic)
#: carries no callback: every process ends its live streams of that topic.
ACTIVATED, REMOVED, TOPIC_REMOVED = "activated", "removed", "topic-removed"
#: A hub process left (shut down) after releasing its leases; its id is the ``callback``.
#: The others heartbeat at once to take its subscriptions over, rather than on their tick.
NODE_LEFT = "node-left"
#: A hub process started (its id is the ``callback``): the others heartbeat at once to learn
#: it, and hand it its share now rather than on their next tick.
NODE_JOINED = "node-joined"
#: A hub process released leases it should no longer hold (its id is the ``callback``): the
#: node that should hold them claims them now rather than on its next tick.
RELEASED = "leases-released"
#: The kinds that name a hub process, not a subscription.
NODE_KINDS = frozenset({NODE_LEFT, NODE_JOINED, RELEASED})


class State(StrEnum):
    #: Verified; deliveries flow.
    ACTIVE = "active"
    #: Kept failing; still probed at the longest back-off and resumed from its cursor when
    #: the callback answers again. Never deleted for failing (only 410 or expiry end it).
    SUSPENDED = "suspended"
    #: Kept failing for ``disable_after_seconds``: nothing is delivered until it is
    #: re-subscribed or resumed (``POST /admin/subscriptions/resume``).
    DISABLED = "disabled"


@dataclass(slots=True)
class Subscription:
    topic: str
    topic_url: str
    callback: str
    lease_seconds: int
    expires_at: float
    secret: str | None = None
    state: State = State.ACTIVE
    created_at: float = field(default_factory=time.time)
    failures: int = 0
    last_error: str | None = None
    #: When the next delivery attempt is due after a failure (epoch seconds; 0 = now).
    retry_at: float = 0.0
    #: Gap notices delivered: retention trimmed events before this subscription got them
    #: (``X-RSHub-Gap``), and the last trimmed id of the latest one.
    gaps: int = 0
    last_gap: str | None = None
    #: The failure policy's counts (:class:`hub.core.failure_policy.Track`): weighted failures
    #: toward suspension, the first counted failure since the last success, the first failure of
    #: the batch in flight (epoch seconds, 0 = none), and when it was disabled.
    strikes: int = 0
    failing_since: float = 0.0
    batch_failing_since: float = 0.0
    disabled_at: float = 0.0
    #: A gap notice whose batch was dead-lettered: the next delivery carries it.
    untold_gap: str | None = None

    # -- signatures, filters, rate limit (hub.core.signing, events, token_bucket)
    #: ``websub`` (``X-Hub-Signature``) or ``standard-webhooks``.
    signature: str = "websub"
    #: The secret a re-subscription replaced, still signing until ``previous_until``.
    previous_secret: str | None = None
    previous_until: float = 0.0
    #: ``hub.filter.change`` (None: every change type) and ``hub.filter.prefix``.
    filter_changes: list[str] | None = None
    filter_prefixes: list[str] = field(default_factory=list)
    #: ``hub.rate_limit`` as [per second, burst] (None: the settings' default), and the
    #: admin API's override of it (None: none).
    rate_limit: list[float] | None = None
    admin_rate_limit: list[float] | None = None
    #: The token a private topic's subscription was made with, by its fingerprint and a
    #: signed token's jti (:class:`hub.core.revocations.Credential`; never the token):
    #: revoking it ends the subscription. None: made without one (an open topic).
    token_fingerprint: str | None = None
    token_jti: str | None = None

    def to_json(self) -> bytes:
        # orjson writes a dataclass itself, as asdict() would hand it over, in a twentieth
        # of the time (asdict copies every field deeply: 7% of the hub's time subscribing).
        return orjson.dumps(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> Subscription:
        """Raises :class:`DamagedData` for a record that is not one the hub wrote."""
        try:
            raw = orjson.loads(data)
            raw["state"] = State(raw.get("state", State.ACTIVE))
            # Fields a newer hub added are left out, so processes of two versions can share
            # Redis.
            sub = cls(**{k: v for k, v in raw.items() if k in _FIELDS})
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # JSON errors too
            raise DamagedData(f"not a subscription record ({exc})") from None
        for name, plain, fits in _FIELD_CHECKS:
            value = getattr(sub, name)
            if type(value) not in plain and not fits(value):
                raise DamagedData(f"not a subscription record (its {name} is of the wrong type)")
        if isinstance(sub.lease_seconds, float):
            sub.lease_seconds = int(sub.lease_seconds)
        return sub

    def recovered(self) -> None:
        """Back to active with no failure on record (a 2xx, or an operator's resume)."""
        self.state, self.failures, self.last_error, self.retry_at = State.ACTIVE, 0, None, 0.0
        self.strikes, self.failing_since, self.batch_failing_since = 0, 0.0, 0.0
        self.disabled_at = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.topic, self.callback)

    @property
    def credential(self) -> Credential | None:
        """The token it was made with, as a revocation names it (None: none, or a record
        whose fingerprint is not one the hub wrote)."""
        fingerprint, jti = self.token_fingerprint, self.token_jti
        if not isinstance(fingerprint, str):
            return None
        return Credential(fingerprint, jti if isinstance(jti, str) else None)

    @property
    def disabled(self) -> bool:
        return self.state is State.DISABLED

    @property
    def expired(self) -> bool:
        return time.time() >= self.expires_at

    def public(self) -> dict[str, object]:
        """What introspection may show (no secret)."""
        out = asdict(self)
        out["secret"] = bool(self.secret)
        out["previous_secret"] = bool(self.previous_secret)
        out["id"] = subscription_id(self.topic, self.callback)
        # Which token made it is the operator's business (a revocation), not the topic's
        # publishers': a guessable token's fingerprint would name it.
        del out["token_fingerprint"], out["token_jti"]
        return out


_FIELDS = frozenset(f.name for f in fields(Subscription))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _whole(value: object) -> bool:
    """A count the hub writes as an int; an integral float (a hand-made record) reads."""
    return _count(value) or (isinstance(value, float) and value.is_integer())


def _text(value: object) -> bool:
    return isinstance(value, str)


def _text_or_none(value: object) -> bool:
    return value is None or isinstance(value, str)


def _texts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _numbers_or_none(value: object) -> bool:
    return value is None or (isinstance(value, list) and all(_number(v) for v in value))


#: What each field of a record must hold: one the hub did not write (a count as text, a
#: fractional lease) is damaged data when read, not a worker failing on it later.
_FIELD_TYPES: dict[str, Callable[[object], bool]] = {
    "topic": _text,
    "topic_url": _text,
    "callback": _text,
    "lease_seconds": _whole,
    "expires_at": _number,
    "secret": _text_or_none,
    "state": lambda v: isinstance(v, State),  # made a State as the record is read
    "created_at": _number,
    "failures": _count,
    "last_error": _text_or_none,
    "retry_at": _number,
    "gaps": _count,
    "last_gap": _text_or_none,
    "strikes": _count,
    "failing_since": _number,
    "batch_failing_since": _number,
    "disabled_at": _number,
    "untold_gap": _text_or_none,
    "signature": _text,
    "previous_secret": _text_or_none,
    "previous_until": _number,
    "filter_changes": lambda v: v is None or _texts(v),
    "filter_prefixes": _texts,
    "rate_limit": _numbers_or_none,
    "admin_rate_limit": _numbers_or_none,
    "token_fingerprint": _text_or_none,
    "token_jti": _text_or_none,
}

#: The exact types of value that fit each field at a glance (those JSON gives when the hub
#: wrote the record), so that only other values are put to :data:`_FIELD_TYPES`' checks: a
#: process starting the workers of 100,000 subscriptions reads every record.
_AT_A_GLANCE: dict[Callable[[object], bool], frozenset[type]] = {
    _text: frozenset({str}),
    _text_or_none: frozenset({str, type(None)}),
    _number: frozenset({int, float}),
    _count: frozenset({int}),
    _whole: frozenset({int}),
}
_FIELD_CHECKS = tuple(
    (name, _AT_A_GLANCE.get(fits, frozenset()), fits) for name, fits in _FIELD_TYPES.items()
)


@dataclass(frozen=True, slots=True)
class SubscriptionChange:
    id: str
    topic: str
    callback: str
    #: ``activated``, ``removed``, ``topic-removed`` (see :data:`TOPIC_REMOVED`), or one
    #: naming a hub process: :data:`NODE_LEFT`, :data:`NODE_JOINED`, :data:`RELEASED`.
    kind: str


#: Seconds a failed verification stays readable in the subscription's record: long
#: enough for its subscriber to look after a failed start, short enough to need no clean-up.
FAILED_VERIFICATION_SECONDS = 24 * 3600


@dataclass(frozen=True, slots=True)
class FailedVerification:
    """Why the hub's last verification of a (un)subscription request failed, and when;
    otherwise only in the hub's log, which a subscriber cannot read."""

    at: float
    mode: str
    topic: str
    reason: str
    #: The request's ``hub.secret``: a request signed with it may read this (never shown).
    secret: str | None = None

    def public(self) -> dict[str, object]:
        return {"at": self.at, "mode": self.mode, "topic": self.topic, "reason": self.reason}


class SubscriptionStore:
    def __init__(
        self, redis: Client, *, scripts: ScriptPipe | None = None, blocking: Client | None = None
    ) -> None:
        self.redis = redis
        self.scripts = scripts or ScriptPipe(redis)
        self.blocking = blocking or redis
        self.damage = DamageLog(log)

    async def activate(self, sub: Subscription, cursor: str | None) -> str:
        """Save ``sub``; set its cursor to ``cursor`` if given, keep an existing one otherwise.

        Returns the cursor in force. A re-subscription therefore updates the one existing
        (topic, callback) subscription and delivers nothing twice.
        """
        in_force = await self._activate(sub, cursor, [])
        assert in_force is not None  # only a request can be superseded
        return in_force

    async def request_arrived(self, topic: str) -> int:
        """Number a WebSub (un)subscription request of ``topic`` as it is accepted."""
        number: int = await self.scripts.run(
            scripts.REQUEST_ARRIVED, [keys.requests(topic), keys.request_marks(topic)], []
        )
        return int(number)

    async def request_arrived_at_end(self, topic: str) -> tuple[int, str | None]:
        """:meth:`request_arrived`, with the id of ``topic``'s last event (None: none yet),
        read at once: where a new subscription without ``hub.since`` starts."""
        number, last = await self.scripts.run(
            scripts.REQUEST_ARRIVED,
            [keys.requests(topic), keys.request_marks(topic), keys.events(topic)],
            [],
        )
        return int(number), keys.optional_text(last)

    async def _command(self, key: str, command: str, *args: str | bytes | int) -> Any:
        """One command on ``key`` through the script pipe (see ``scripts/command.lua``)."""
        return await self.scripts.run(scripts.COMMAND, [key], [command, *args])

    async def activate_latest(
        self, sub: Subscription, cursor: str | None, request: int, remember_ms: int
    ) -> str | None:
        """:meth:`activate` for the subscribe request numbered ``request``
        (:meth:`request_arrived`), unless a later request for the same callback was stored
        already, by any hub process: then nothing is saved (None). The number is kept for
        ``remember_ms``, as long as an older request may still try to store itself."""
        return await self._activate(sub, cursor, [request, remember_ms])

    async def _activate(
        self, sub: Subscription, cursor: str | None, request: list[int]
    ) -> str | None:
        in_force = await self.scripts.run(
            scripts.ACTIVATE,
            [
                keys.subscriptions(sub.topic),
                keys.cursors(sub.topic),
                keys.holds(sub.topic),
                keys.requests(sub.topic),
                keys.request_marks(sub.topic),
            ],
            [sub.callback, sub.to_json(), cursor or "", *request],
        )
        if in_force is None:
            return None
        # In this order (each awaited: on a Cluster the two go to different primaries): a
        # process that learns of the subscription from the change stream finds its topic
        # in the set when it next reads every subscription.
        await self._command(keys.SUBSCRIBED_TOPICS, "SADD", sub.topic)
        await self._changed(sub.topic, sub.callback, ACTIVATED)
        return keys.text(in_force)

    async def save_fenced(self, sub: Subscription, node: str, token: int) -> bool:
        """Save ``sub`` only while ``node`` holds its lease with ``token``."""
        saved = await self.scripts.run(
            scripts.FENCED_SAVE,
            [keys.owners(sub.topic), keys.subscriptions(sub.topic)],
            [node, token, sub.callback, sub.to_json()],
        )
        return bool(int(saved))

    async def get(self, topic: str, callback: str) -> Subscription | None:
        """Raises :class:`DamagedData` if the record is not the hub's."""
        data = await self._command(keys.subscriptions(topic), "HGET", callback)
        return Subscription.from_json(data) if data else None

    async def records(
        self, topic: str, callbacks: list[str]
    ) -> list[tuple[bytes | None, str | None]]:
        """Each callback's stored record (unparsed: None when gone) and delivery cursor,
        in one round trip: a process that starts the workers of 100,000 subscriptions
        read them with two round trips each, one at a time (the round that started them
        took longer than subscribing them)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.subscriptions(topic), callbacks)
            pipe.hmget(keys.cursors(topic), callbacks)
            datas, cursors = await pipe.execute()
        return [
            (data or None, keys.optional_text(cursor))
            for data, cursor in zip(datas, cursors, strict=True)
        ]

    async def find(self, sub_id: str) -> Subscription | None:
        """The subscription whose :func:`~hub.core.placement.subscription_id` is ``sub_id``.

        A scan of every subscription: for the admin API and a subscriber's own record,
        which are rare, so no index has to be kept consistent with every write.
        """
        for topic, callback in await self.all_keys():
            if subscription_id(topic, callback) == sub_id:
                return await self.get(topic, callback)
        return None

    async def note_failed_verification(self, sub_id: str, failed: FailedVerification) -> None:
        """Keep ``failed`` for :data:`FAILED_VERIFICATION_SECONDS` (the last one wins)."""
        data = orjson.dumps({**failed.public(), "secret": failed.secret})
        await self.redis.set(keys.failed_verification(sub_id), data, ex=FAILED_VERIFICATION_SECONDS)

    async def clear_failed_verification(self, sub_id: str) -> None:
        await self._command(keys.failed_verification(sub_id), "DEL")

    async def failed_verification(self, sub_id: str) -> FailedVerification | None:
        """The last failed verification of ``sub_id`` still kept; None if none (or it is
        not the hub's: a damaged value is no reason to fail the record it is part of)."""
        data = await self.redis.get(keys.failed_verification(sub_id))
        try:
            row = orjson.loads(data) if data else None
            if row is None:
                return None
            secret = row.get("secret")
            return FailedVerification(
                float(row["at"]),
                str(row["mode"]),
                str(row["topic"]),
                str(row["reason"]),
                None if secret is None else str(secret),
            )
        except (ValueError, KeyError, TypeError):
            return None

    async def delete(self, topic: str, callback: str) -> None:
        await self._delete(topic, callback, ["any"])

    async def delete_made_with(self, topic: str, callback: str, fingerprint: str) -> bool:
        """:meth:`delete`, only if the stored subscription was made with the token of
        ``fingerprint`` (False: nothing removed): a revocation ends what its token made,
        and a re-subscription made meanwhile with another token stays."""
        return await self._delete(topic, callback, ["made-with", fingerprint])

    async def delete_latest(
        self, topic: str, callback: str, request: int, remember_ms: int
    ) -> bool:
        """:meth:`delete` for the unsubscribe request numbered ``request``, unless a later
        request for the same callback was stored already (False then, nothing removed); see
        :meth:`activate_latest`."""
        return await self._delete(topic, callback, ["latest", request, remember_ms])

    async def _delete(self, topic: str, callback: str, decides: list[str | int]) -> bool:
        removed = await self.scripts.run(
            scripts.DELETE_SUBSCRIPTION,
            [
                keys.subscriptions(topic),
                keys.cursors(topic),
                keys.owners(topic),
                keys.holds(topic),
                keys.dead_letters(topic, subscription_id(topic, callback)),
                keys.attempts(topic, subscription_id(topic, callback)),
                keys.last_successes(topic),
                keys.requests(topic),
                keys.request_marks(topic),
            ],
            [callback, *decides],
        )
        if int(removed) < 0:
            return False
        await self._changed(topic, callback, REMOVED)
        return True

    async def topic_removed(self, topic: str) -> None:
        """Tell every hub process that ``topic`` was deleted."""
        await self._changed(topic, "", TOPIC_REMOVED)

    async def node_left(self, node: str) -> None:
        """Tell every hub process that ``node`` left and released its leases."""
        await self._changed("", node, NODE_LEFT)

    async def node_changed(self, node: str, kind: str) -> None:
        """Tell every hub process that ``node`` joined or released leases (``kind``)."""
        await self._changed("", node, kind)

    async def cursor(self, topic: str, callback: str) -> str | None:
        return keys.optional_text(await self.redis.hget(keys.cursors(topic), callback))

    async def subscribed_topics(self) -> list[str]:
        names, others = keys.topic_names(await self.redis.smembers(keys.SUBSCRIBED_TOPICS))
        for member in others:
            self.damage.damaged(f"subscribed-topic set member {member!r}", "not a topic name")
        return names

    async def all(self) -> list[Subscription]:
        subs: list[Subscription] = []
        for topic in await self.subscribed_topics():
            subs.extend(await self.for_topic(topic))
        return subs

    async def all_keys(self) -> set[tuple[str, str]]:
        """Every subscription's (topic, callback), in one round trip per few hundred topics."""
        topics = await self.subscribed_topics()
        found: set[tuple[str, str]] = set()
        for start in range(0, len(topics), 500):
            chunk = topics[start : start + 500]
            async with self.redis.pipeline(transaction=False) as pipe:
                for topic in chunk:
                    pipe.hkeys(keys.subscriptions(topic))
                rows = await pipe.execute()
            for topic, callbacks in zip(chunk, rows, strict=True):
                found.update((topic, keys.text(cb)) for cb in callbacks)
        return found

    async def for_topic(self, topic: str) -> list[Subscription]:
        """Every subscription of ``topic`` but damaged records (said once, left out)."""
        rows = await self.redis.hgetall(keys.subscriptions(topic))
        subs = []
        for callback, data in rows.items():
            try:
                subs.append(Subscription.from_json(data))
            except DamagedData as exc:
                name = keys.shown_text(callback)
                self.damage.damaged(f"subscription of {name!r} to topic {topic!r}", exc)
        return subs

    async def cursors(self, topic: str) -> dict[str, str]:
        """Every subscription's delivery cursor for ``topic``: callback -> event id."""
        rows = await self.redis.hgetall(keys.cursors(topic))
        return {keys.text(k): keys.text(v) for k, v in rows.items()}

    async def write_cursors(
        self, topic: str, node: str, marks: dict[str, tuple[int, str]]
    ) -> set[str]:
        """Fenced cursor writes (callback -> (token, event id)); returns the refused ones."""
        args: list[Any] = [node]
        for callback, (token, event_id) in marks.items():
            args.extend((callback, token, event_id))
        refused = await self.scripts.run(
            scripts.FENCED_CURSORS,
            [keys.owners(topic), keys.cursors(topic), keys.holds(topic)],
            args,
        )
        return {keys.text(cb) for cb in refused or ()}

    # -- the change stream ------------------------------------------------------------

    async def _changed(self, topic: str, callback: str, kind: str) -> None:
        await self._command(
            keys.SUBSCRIPTION_CHANGES,
            "XADD",
            *("MAXLEN", "~", _CHANGES_KEPT, "*"),
            *("topic", topic, "callback", callback, "kind", kind),
        )

    async def last_change_id(self) -> str:
        rows = await self.redis.xrevrange(keys.SUBSCRIPTION_CHANGES, "+", "-", count=1)
        return keys.first_row_id(rows) or "0-0"

    async def wait_changes(self, after: str, block_ms: int) -> list[SubscriptionChange]:
        """Changes after ``after``, waiting up to ``block_ms`` for the first one."""
        result = await self.blocking.xread(
            {keys.SUBSCRIPTION_CHANGES: after}, count=1000, block=block_ms
        )
        return [
            SubscriptionChange(eid, f["topic"], f["callback"], f["kind"])
            for eid, f in keys.xread_fields(result)
        ]


class CursorWriter:
    """Fenced delivery-cursor writes, committed in groups.

    A worker awaits :meth:`write` after each 2xx and before its next POST, so at most the
    batch in flight can be delivered twice when a process dies. Writes that arrive while
    one round is in flight go out together in the next: one script call per topic per
    round, however many workers wait (the same batching as
    :class:`hub.store.script_pipe.ScriptPipe`).
    """

    def __init__(
        self, store: SubscriptionStore, node: str, tasks: Tasks, gather_seconds: float = 0.002
    ) -> None:
        self.store = store
        self.node = node
        #: Where a round of writes runs (one task at a time, while writes are pending).
        self.tasks = tasks
        #: How long a round waits for more writes before it goes out. The 2xx answers to one
        #: publish's fan-out arrive over a few milliseconds; without the wait, each loop turn
        #: sent a round of its own (a fifth of the hub's CPU per delivery, py-spy), with it
        #: the whole fan-out shares a few. A worker waits for its write only before its
        #: *next* POST, so this delays no delivery under way.
        self.gather_seconds = gather_seconds
        self._dirty: dict[tuple[str, str], tuple[int, str]] = {}
        self._waiters: dict[tuple[str, str], list[asyncio.Future[bool]]] = defaultdict(list)
        self._task: asyncio.Task[None] | None = None

    async def write(self, topic: str, callback: str, token: int, event_id: str) -> bool:
        """Write the cursor; False when refused because the lease is no longer ours."""
        key = (topic, callback)
        self._dirty[key] = (token, event_id)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters[key].append(future)
        if self._task is None:
            self._task = self.tasks.spawn("cursor-writer", self._commit())
        return await future

    def forget(self, topic: str, callback: str) -> None:
        self._dirty.pop((topic, callback), None)

    async def _commit(self) -> None:
        try:
            while self._dirty:
                if self.gather_seconds:
                    await asyncio.sleep(self.gather_seconds)
                dirty, refused = await retrying(
                    self._write_round,
                    STORE_OUTAGE,
                    retry_on=RedisError,
                    log=log,
                    what="cursor write",
                    failed=lambda _error, _delay: metrics.redis_error(),
                )
                for key in dirty:
                    for future in self._waiters.pop(key, ()):
                        if not future.done():
                            future.set_result(key not in refused)
        finally:
            self._task = None

    async def _write_round(
        self,
    ) -> tuple[dict[tuple[str, str], tuple[int, str]], set[tuple[str, str]]]:
        """Write the marks now due: those written, and those refused (lease lost). A
        failure keeps them due, behind any newer mark, and raises."""
        dirty, self._dirty = self._dirty, {}
        by_topic: dict[str, dict[str, tuple[int, str]]] = defaultdict(dict)
        for (topic, callback), mark in dirty.items():
            by_topic[topic][callback] = mark
        refused: set[tuple[str, str]] = set()
        try:
            for topic, marks in by_topic.items():
                for callback in await self.store.write_cursors(topic, self.node, marks):
                    log.info("cursor of %s -> %s refused: lease lost", topic, callback)
                    refused.add((topic, callback))
        except RedisError:
            for key, mark in dirty.items():  # keep them, newer marks first
                self._dirty.setdefault(key, mark)
            raise
        return dirty, refused

    async def settle(self, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout``) until the writes due now are written or refused."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)

    async def close(self) -> None:
        """Wait (briefly) for writes under way; give up on them if Redis is away."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), 5.0)
        await cancel_and_wait([self._task])
        await self.tasks.stop()
        for waiters in self._waiters.values():
            for future in waiters:
                future.cancel()
        self._waiters.clear()

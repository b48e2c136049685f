"""The JSON bodies of the hub's HTTP API, as pydantic models.

The web layer builds its JSON answers from these models (:func:`dump`), and the OpenAPI
document (:mod:`hub.core.openapi`) takes its schemas from the same models, so what the hub
serves and what the document says cannot drift apart. A field without a default is in
every answer (``null`` where its type allows); a field with a default of ``None`` is in an
answer only when the handler sets it (:func:`dump` leaves unset ones out).

Every answer carries exactly the fields its model lists (``extra="forbid"``): a field added
to an answer but not to its model fails in the handler's own tests, never goes out
undocumented. Only the error body is open (:class:`ErrorBody`: its fields that help vary
with the error).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field, ValidationError, with_config
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import TypedDict

from hub.core.exceptions import DamagedData
from hub.core.overview import Overview
from hub.core.presence import TopicPresence

__all__ = [
    "REQUEST_MODELS",
    "RESPONSE_MODELS",
    "AdminSubscription",
    "AdminSubscriptions",
    "AdminTopic",
    "AdminTopics",
    "Attempt",
    "DeadLetter",
    "DeadLetterReplay",
    "DeadLetters",
    "DeliveryFilter",
    "ErrorBody",
    "FailedVerification",
    "Health",
    "LastSuccess",
    "Lifted",
    "Overview",
    "PublishAccepted",
    "RateLimitInForce",
    "RateLimitRequest",
    "Revocation",
    "RevocationRequest",
    "Revocations",
    "Subscription",
    "SubscriptionDeleted",
    "SubscriptionRateLimit",
    "SubscriptionRecord",
    "SubscriptionTarget",
    "Subscriptions",
    "TopicDeleted",
    "TopicPresence",
    "TopicSummary",
    "dump",
]

SubscriptionState = Literal["active", "suspended", "disabled"]


class _Answer(BaseModel):
    """An answer with exactly its listed fields."""

    model_config = ConfigDict(extra="forbid")


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


#: A request field that may be left out, but is never ``null``: no default in its schema
#: (``null`` would not be of its type).
_ABSENT: Any = Field(None, json_schema_extra=_no_default)


def dump(body: BaseModel) -> dict[str, Any]:
    """``body`` as the JSON object the hub sends: every field set, none it left unset."""
    return body.model_dump(mode="json", exclude_unset=True)


def answer_damage(exc: ValidationError) -> DamagedData:
    """An answer's model refusing what it was built from: the handlers build answers from
    typed values and from what Redis holds, so the value the hub did not write is in Redis
    (a fractional lease, a count as text). Named by the answer and its first bad field;
    the value itself is not shown (it may be anything)."""
    errors = exc.errors(include_url=False)
    first = errors[0] if errors else None
    where = ".".join(str(part) for part in first["loc"]) if first else "?"
    reason = first["msg"] if first else "invalid"
    return DamagedData(f"a stored value does not fit {exc.title}'s field {where!r}: {reason}")


# -- errors and publishing ------------------------------------------------------------------


class ErrorBody(BaseModel):
    """Every error the hub answers in JSON: a message and the HTTP status, plus fields that
    help (e.g. trimmed_through, resourcelist, rule, document, index, header)."""

    model_config = ConfigDict(extra="allow")

    error: str
    status: int = Field(ge=400, le=599)


# A typed dict, not a model: it is built on the publish path, where a model's validation
# and dump cost about ten times the answer's own encoding (17 µs more a publish, measured);
# mypy checks its keys and types instead, and pydantic describes it as it does a model.
@with_config(ConfigDict(extra="forbid"))
class PublishAccepted(TypedDict):
    """A publish's (or publish ping's) 202: the stored changes' event ids."""

    topic: str
    accepted: Annotated[int, Field(ge=0)]
    ids: list[str]
    replayed: NotRequired[
        Annotated[
            bool, Field(description="The answer of an earlier publish with this Idempotency-Key")
        ]
    ]
    fetched: NotRequired[
        Annotated[int, Field(ge=0, description="A publish ping: the changes it fetched")]
    ]
    note: NotRequired[str]
    content_type: NotRequired[
        Annotated[
            str,
            Field(
                description="A plain WebSub topic's publish: the Content-Type its content was "
                "stored with (and is delivered with)"
            ),
        ]
    ]
    length: NotRequired[Annotated[int, Field(ge=0, description="Its content's bytes")]]


# -- operations: health, a topic's subscriptions ---------------------------------------------


class EmbeddedRedisStatus(_Answer):
    """The redis-server the hub started itself (``rshub serve`` without a Redis URL)."""

    state: Literal["stopped", "running", "restarting"]
    pid: int | None
    port: int | None
    restarts: int = Field(description="Restarts by the hub's supervisor since it started")
    last_exit: str | None = Field(description="How the last server that died ended")
    last_exit_status: int | None = Field(description="Its exit status (negative: a signal)")
    last_error: str | None = Field(description="Why the last restart failed (null: none did)")


class Health(_Answer):
    """Anyone gets only ``status``; the other fields are for those who may see the overview
    (admin token, hub-wide token, or a direct loopback client of an open hub without admin
    token)."""

    status: Literal["ok", "degraded"]
    hub: str | None = None
    redis: str | None = None
    version: str | None = None
    pid: int | None = None
    node: str | None = None
    nodes: int | None = None
    embedded_redis: EmbeddedRedisStatus | None = None


class Subscription(_Answer):
    """A WebSub subscription's stored record as its topic's operators see it: never a
    secret, nor the token it was made with."""

    topic: str
    topic_url: str
    callback: str
    id: str = Field(description="The subscription's id, as /metrics labels it")
    state: SubscriptionState
    lease_seconds: int
    expires_at: float
    created_at: float
    secret: bool = Field(description="Whether one is set (never its value)")
    failures: int
    last_error: str | None
    retry_at: float = Field(description="When the next attempt is due (epoch s; 0: now)")
    gaps: int = Field(description="Gap notices delivered (retention trimmed events it missed)")
    last_gap: str | None = Field(description="The trimmed-through id of the last")
    untold_gap: str | None = Field(description="A gap notice the next delivery carries")
    strikes: int = Field(description="Weighted failures toward suspension")
    failing_since: float = Field(description="The first failure since the last success (0)")
    batch_failing_since: float
    disabled_at: float
    signature: str = Field(description="`websub` or `standard-webhooks`")
    previous_secret: bool = Field(description="Whether a rotated-out secret still signs")
    previous_until: float
    filter_changes: list[str] | None = Field(description="`hub.filter.change` (null: all)")
    filter_prefixes: list[str] = Field(description="`hub.filter.prefix`")
    rate_limit: list[float] | None = Field(description="`hub.rate_limit`: per second, burst")
    admin_rate_limit: list[float] | None = Field(description="The operator's override")
    cursor: str | None


class Subscriptions(_Answer):
    topic: str
    last_id: str | None
    subscriptions: list[Subscription]


class SubscriptionTarget(BaseModel):
    """A subscription named by its topic (a name or a topic URL) and callback."""

    topic: str
    callback: str


class SubscriptionDeleted(_Answer):
    topic: str
    callback: str
    deleted: Literal[True]


# -- the admin API: topics ----------------------------------------------------------------


class TopicSummary(_Answer):
    name: str
    length: int = Field(description="Events retained")
    first_id: str | None
    last_id: str | None
    last_publish: str | None = Field(description="ISO 8601 (UTC)")
    last_publish_ms: int | None
    subscriptions: int


class AdminTopics(_Answer):
    topics: list[TopicSummary]


class AdminTopic(TopicSummary):
    changelist_pages: int
    resourcelist_size: int
    presence: TopicPresence


class TopicDeleted(_Answer):
    topic: str
    deleted: Literal[True]
    keys: int = Field(description="Redis keys removed")
    subscriptions: int


# -- the admin API: subscriptions and their delivery terms ------------------------------------


class RateLimitInForce(_Answer):
    per_second: float = Field(description="Deliveries per second (0: none)")
    burst: int
    source: Literal["admin", "subscriber", "default"]


class SubscriptionRateLimit(RateLimitInForce):
    """The rate limit in force and where it comes from."""

    id: str
    topic: str
    callback: str


class RateLimitRequest(_Answer):
    per_second: float = Field(description="Deliveries per second")
    burst: Annotated[int, Field(ge=1)] | SkipJsonSchema[None] = _ABSENT


class DeliveryFilter(_Answer):
    """``hub.filter.*``."""

    changes: list[str] | None
    prefixes: list[str]


class LastSuccess(_Answer):
    at: float
    time: str | None
    event_id: str


class AdminSubscription(_Answer):
    """A subscription as operators see it, with its delivery terms (never its secrets)."""

    topic: str
    topic_url: str
    callback: str
    id: str
    state: SubscriptionState
    cursor: str | None
    last_id: str | None
    lag_events: int
    lag_capped: bool
    lag_seconds: float
    failures: int
    last_error: str | None
    gaps: int
    last_gap: str | None
    retry_at: float | None
    expires_at: float
    expires: str | None
    lease_seconds: int
    created_at: float
    secret: bool = Field(description="Whether one is set (never its value)")
    signature: str = Field(description="`websub` or `standard-webhooks`")
    previous_secret: bool = Field(
        description="Whether a rotated-out secret still signs (never its value)"
    )
    previous_secret_until: float | None = Field(description="When it stops signing (epoch s)")
    filter: DeliveryFilter | None = Field(description="null: every change")
    rate_limit: RateLimitInForce
    strikes: int = Field(description="Weighted failures toward suspension")
    disabled_at: float | None
    last_success: LastSuccess | None


class AdminSubscriptions(_Answer):
    subscriptions: list[AdminSubscription]


class Attempt(_Answer):
    at: float = Field(description="When the POST was sent (epoch seconds)")
    time: str | None
    status: int | None = Field(description="null: no HTTP answer")
    latency_ms: float
    error: str | None
    first_event_id: str
    last_event_id: str
    events: int


class FailedVerification(_Answer):
    """Why the last verification of a request for this id failed, and when."""

    at: float
    mode: str
    topic: str
    reason: str
    time: str | None


class SubscriptionRecord(AdminSubscription):
    failed_verification: FailedVerification | None
    attempts: list[Attempt] = Field(description="Newest first")


class DeadLetter(_Answer):
    entry: str = Field(description="Its entry (what ?after= takes)")
    id: str
    loc: str | None
    change: str | None
    lastmod: str | None
    dead_lettered_at: float
    failing_since: float
    error: str


class DeadLetters(_Answer):
    id: str
    topic: str
    callback: str
    state: SubscriptionState
    total: int
    dead_letters: list[DeadLetter] = Field(description="The oldest first")


class DeadLetterReplay(_Answer):
    id: str
    topic: str
    callback: str
    state: SubscriptionState
    replayed: int
    remaining: int
    error: str | None = Field(description="What stopped the replay (null: nothing)")


# -- the admin API: token revocations ---------------------------------------------------------


class Revocation(_Answer):
    fingerprint: str | None = Field(description="The token's SHA-256 in hex (never the token)")
    jti: str | None = Field(description="A signed read token's id")
    topic: str | None = Field(description="null: every topic")
    revoked_at: float = Field(description="Epoch seconds")
    revoked: str | None = Field(description="The same, ISO 8601 (UTC)")
    expires_at: float | None = Field(
        description="When it stops applying, epoch seconds (null: never); a signed read "
        "token's revocation ends with the token's own expiry unless given"
    )
    expires: str | None = Field(description="The same, ISO 8601 (UTC)")
    new: bool | None = Field(None, description="false: it was in force already")


class Revocations(_Answer):
    revocations: list[Revocation]
    version: int = Field(description="Moves with every change")


class Lifted(_Answer):
    fingerprint: str | None
    jti: str | None
    topic: str | None
    lifted: Literal[True]


class RevocationRequest(_Answer):
    """Exactly one of ``token``, ``fingerprint`` or ``jti``; ``topic`` for that topic only.
    Each a string when given (``null`` is refused: 400)."""

    token: Annotated[str, Field(min_length=1, max_length=4096)] | SkipJsonSchema[None] = _ABSENT
    fingerprint: Annotated[str, Field(pattern="^[0-9a-fA-F]{64}$")] | SkipJsonSchema[None] = _ABSENT
    jti: Annotated[str, Field(min_length=1, max_length=256)] | SkipJsonSchema[None] = _ABSENT
    topic: str | SkipJsonSchema[None] = _ABSENT
    expires: (
        Annotated[str, Field(description="ISO 8601 with its offset; in the future")]
        | SkipJsonSchema[None]
    ) = _ABSENT


#: Every answer's model, named in the document's components as the class is.
RESPONSE_MODELS: tuple[type[Any], ...] = (
    ErrorBody,
    PublishAccepted,
    Health,
    Subscriptions,
    SubscriptionDeleted,
    AdminTopics,
    AdminTopic,
    TopicDeleted,
    SubscriptionRateLimit,
    AdminSubscriptions,
    SubscriptionRecord,
    DeadLetters,
    DeadLetterReplay,
    Revocation,
    Revocations,
    Lifted,
    Subscription,
    Overview,
)

#: Every JSON request body's model.
REQUEST_MODELS: tuple[type[Any], ...] = (SubscriptionTarget, RateLimitRequest, RevocationRequest)

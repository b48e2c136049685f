"""The hub's HTTP routes as plain data: method, path, what each is for, its parameters and
its answers, written once.

:mod:`hub.core.openapi` makes the OpenAPI document from this table and from the models of
:mod:`hub.core.api_bodies`; a test checks that the routes :func:`hub.web.app.create_app`
registers are exactly these. A JSON body names its model; a body of another kind (an XML
document, an event stream, a WebSocket upgrade, a WebSub form) is described here, by its
media type and schema. What every operation answers alike (a 417 for an ``Expect`` the hub
does not know, a 400 for a header it cannot read, a 500 for damaged data wherever Redis is
read) is added by the generator, not repeated here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hub.core import api_bodies as bodies

JSON = "application/json"
XML = "application/xml"
TEXT = "text/plain"
HTML = "text/html"
FORM = "application/x-www-form-urlencoded"
EVENT_STREAM = "text/event-stream"

Schema = dict[str, Any]

_STRING: Schema = {"type": "string"}
#: Content of any media type, kept as it is (a plain WebSub topic's, ``RSHUB_WEBSUB_TOPICS``).
_BINARY: Schema = {"type": "string", "format": "binary"}


@dataclass(frozen=True, slots=True)
class Answer:
    """One status's answer: a JSON body of ``model`` (a pydantic model, or a dataclass
    pydantic describes), and bodies of other ``media`` types."""

    description: str
    model: type[Any] | None = None
    media: Mapping[str, Schema] = field(default_factory=dict)
    headers: Mapping[str, Schema] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestBody:
    """A request's body: JSON of ``model`` (and the same fields as a form when ``form``),
    or bodies of other ``media`` types."""

    description: str = ""
    model: type[Any] | None = None
    form: bool = False
    media: Mapping[str, Schema] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    operation_id: str
    summary: str
    tags: tuple[str, ...]
    answers: Mapping[str, Answer]
    description: str = ""
    parameters: tuple[Schema, ...] = ()
    body: RequestBody | None = None
    #: Operations anyone may call, whose answer grows with a bearer token.
    optional_bearer: bool = False


def error(description: str, **headers: Schema) -> Answer:
    return Answer(description, bodies.ErrorBody, headers=headers)


def _xml(description: str) -> Answer:
    return Answer(description, media={XML: _STRING})


# -- parameters ----------------------------------------------------------------------------

#: The topic name in the path (``components/parameters/topic``, its pattern the name rule).
TOPIC: Schema = {"$ref": "#/components/parameters/topic"}


def _param(name: str, where: str, description: str = "", **schema: Any) -> Schema:
    out: Schema = {"name": name, "in": where, "required": where == "path"}
    if description:
        out["description"] = description
    out["schema"] = schema or dict(_STRING)
    return out


_PAGE = _param("page", "path")
_SUBSCRIPTION_ID = _param(
    "id", "path", "The subscription's id (12 lowercase hex digits, GET /admin/subscriptions)"
)
_ACCESS_TOKEN = _param(
    "access_token",
    "query",
    "A read token or signed read token, for clients that cannot set `Authorization` "
    "(browsers' WebSocket and EventSource).",
)
_CONDITIONAL = (_param("If-None-Match", "header"),)
_SIGNED_HEADERS = (
    _param(
        "X-RSHub-Timestamp", "header", "Self-service: unix seconds, within the tolerance (300 s)"
    ),
    _param(
        "X-RSHub-Signature",
        "header",
        "Self-service: sha256=<hex HMAC-SHA256 of '<timestamp>\\n<path>' keyed with the "
        "subscription's hub.secret>",
    ),
)

#: The event id grammar (hub.core.events.parse_id) and the time grammar
#: (hub.core.resume_points) of a resume point.
_EVENT_ID_PATTERN = "^[0-9]{1,20}(-[0-9]{1,20})?$"
_TIME_PATTERN = (
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]{1,9})?)?"
    "([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
#: A composite resume id of a stream of several topics (hub.core.stream_positions).
_COMPOSITE_PATTERN = "^m1\\.[A-Za-z0-9_-]*$"


def _resume_point(name: str, where: str, *, composite: bool = False) -> Schema:
    """A resume point: an event id or a time (hub.core.resume_points), and on a stream of
    several topics its composite id; anything else is 400."""
    patterns = [_EVENT_ID_PATTERN, _TIME_PATTERN] + ([_COMPOSITE_PATTERN] if composite else [])
    text = (
        "An event id, `<ms>-<seq>` or `<ms>` (unsigned 64-bit decimal integers, digits only, "
        "no sign or spaces; `0`: all retained events), or an ISO 8601 time with its zone "
        "(`2026-11-22T10:00:00Z`: the events the hub received at or after it); else 400 "
        "naming the parameter."
    )
    if composite:
        text += (
            " Or the id of an event of an earlier stream of these topics (`m1.` and "
            "base64url): every topic resumes exactly where that stream was. An event id or "
            "time applies to every topic."
        )
    return _param(name, where, text, type="string", anyOf=[{"pattern": p} for p in patterns])


def _stream_parameters(*, last_event_id: bool) -> tuple[Schema, ...]:
    """A stream's topic, resume point (``since``, SSE's ``Last-Event-ID``) and filters."""
    resume = [_resume_point("since", "query")]
    if last_event_id:
        resume.append(_resume_point("Last-Event-ID", "header"))
    filters = (_param("change", "query"), _param("prefix", "query"), _ACCESS_TOKEN)
    return (TOPIC, *resume, *filters)


def _topics_parameters(*, last_event_id: bool) -> tuple[Schema, ...]:
    """A stream of several topics: which (``topic``, ``topic_prefix``), from where, and the
    filters of a one-topic stream."""
    names: Schema = {
        "name": "topic",
        "in": "query",
        "required": False,
        "style": "form",
        "explode": True,
        "description": "A topic to follow (repeatable, or names separated by commas); at "
        "least one `topic` or `topic_prefix`. A private one the token may not read is "
        "401/403.",
        "schema": {"type": "array", "items": _STRING},
    }
    prefixes = {
        **names,
        "name": "topic_prefix",
        "description": "Follow every topic whose name starts with this (repeatable, at most "
        "32), those first published while the stream is open included, among those the "
        "token may read (the others are left out, never named).",
    }
    resume = [_resume_point("since", "query", composite=True)]
    if last_event_id:
        resume.append(_resume_point("Last-Event-ID", "header", composite=True))
    filters = (_param("change", "query"), _param("prefix", "query"), _ACCESS_TOKEN)
    return (names, prefixes, *resume, *filters)


# -- answers many operations share ------------------------------------------------------------

_AUTH_NOTE = "Needs `Authorization: Bearer <token>` when the hub has publisher tokens."
_BAD_NAME = error("Invalid topic name or request")
UNAVAILABLE = error("Redis unavailable")
_NOT_FOUND = error("Unknown topic (nothing was ever published to it) or page")
_NOT_MODIFIED = Answer("Not modified (If-None-Match / If-Modified-Since)")
_NO_TOKEN = error("No or malformed bearer token")
_EVENT_STREAM = Answer("An endless event stream", media={EVENT_STREAM: _STRING})
_UPGRADE = Answer("Switching to the WebSocket protocol")
_GONE = error("Events after the resume id are no longer retained")
_GONE_OF_TOPICS = error("Events of a topic after its resume point are no longer retained")
#: Reading a private topic (documents, streams): read tokens, signed read tokens (JWT).
_READ_REFUSED = {
    "401": error(
        "A private topic and no token, or a signed read token that is expired, signed with "
        "another key or algorithm, without exp, whose exp is not a number or lies beyond "
        "RSHUB_JWT_MAX_TTL, or not a JWT (the message says which)"
    ),
    "403": error(
        "The token may not read this topic (a signed one names other topics), or it was "
        "revoked (the message says so, naming its fingerprint)"
    ),
}
_TOPICS_BAD = (
    "No topic or prefix, a bad name, prefix, resume id or filter, or more topics or a longer "
    "resume id than the hub's limits (stream_max_topics, stream_max_id_bytes), named"
)
_ORIGIN_REFUSED = (
    "or (with RSHUB_CORS_ORIGINS set) a browser page's Origin is neither listed nor the hub's own"
)

_PUBLISH_ANSWERS = {
    "202": Answer("Stored (or replayed for a repeated Idempotency-Key)", bodies.PublishAccepted),
    "400": error("Not a valid change notification, bad topic name or header"),
    "401": _NO_TOKEN,
    "403": error("The token may not publish to this topic"),
    "409": error("Idempotency-Key reused for a different body"),
    "413": error("Body larger than the hub's limit"),
    "415": error("Not XML (and the topic is not a plain WebSub topic)"),
    "503": error(
        "Redis unavailable; or, with RSHUB_REDIS_WAIT_REPLICAS, fewer replicas than asked "
        "acknowledged the changes in time: they are stored on the Redis primary but may or "
        "may not survive a failover (the message says how many acknowledged); or the "
        "document parser failed. Retry with the same Idempotency-Key: a stored publish is "
        "replayed (and waited for again), never stored twice."
    ),
}

_DOCUMENT_ANSWERS = {
    "200": _xml("The document"),
    "304": _NOT_MODIFIED,
    "400": _BAD_NAME,
    **_READ_REFUSED,
    "404": _NOT_FOUND,
    "410": error("The page was trimmed by retention"),
    "503": UNAVAILABLE,
}


#: A document built from the whole topic (the Resource List, changes.xml): a reader waits
#: for a build at most ``document_wait_seconds`` and then gets the last one built, or this
#: while none was built yet.
_BUILDING = error(
    "Redis unavailable; or the document's first build is still under way (a reader waits "
    "at most RSHUB_DOCUMENT_WAIT_SECONDS, then gets the last one built, or this while none "
    "exists yet)",
    **{
        "Retry-After": {
            "description": "Seconds until the build may be done (only for a build)",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
)


def _document(
    path: str, operation_id: str, summary: str, *params: Schema, built: bool = False
) -> Route:
    """A ResourceSync document for polling: XML, conditional, private topics' read rule;
    ``built``: made from the whole topic in the background (:data:`_BUILDING`)."""
    answers = {**_DOCUMENT_ANSWERS, "503": _BUILDING} if built else _DOCUMENT_ANSWERS
    return Route(
        "get",
        path,
        operation_id,
        summary,
        ("documents",),
        answers,
        parameters=(*params, *_CONDITIONAL),
    )


_ADMIN_NOTE = (
    "Needs the operator token (RSHUB_ADMIN_TOKEN); without one, only loopback clients of an "
    "open hub, under the hub's own names and from its own pages (never another site's: a "
    "Host, Origin or Sec-Fetch-Site of one is refused, 403)."
)


def _admin(
    method: str,
    path: str,
    operation_id: str,
    summary: str,
    ok: Answer,
    *,
    not_found: Answer | None = None,
    body: RequestBody | None = None,
    parameters: tuple[Schema, ...] = (),
    description: str = _ADMIN_NOTE,
    **more: Answer,
) -> Route:
    """An operation of the /admin API: JSON answers, the operator token, errors as JSON."""
    answers = {
        "200": ok,
        "400": error("Bad topic name, field or body"),
        "401": _NO_TOKEN,
        "403": error(
            "Not the operator (or, on an open hub, not loopback, or another site's page: "
            "`header` names the Host, Origin or Sec-Fetch-Site refused)"
        ),
        "503": UNAVAILABLE,
    }
    if not_found is not None:
        answers["404"] = not_found
    if body is not None:
        answers["415"] = error("A body that is neither JSON nor a form")
    answers.update({status.removeprefix("s"): answer for status, answer in more.items()})
    return Route(
        method,
        path,
        operation_id,
        summary,
        ("admin",),
        answers,
        description=description,
        parameters=parameters,
        body=body,
    )


_NO_SUCH = error("No such topic or subscription")
_NO_SUCH_ID = error("No subscription with that id")
_TARGET = RequestBody(
    "The subscription, as a form or a JSON object", bodies.SubscriptionTarget, form=True
)
_REVOCATION_BODY = RequestBody(
    "Exactly one of `token` (fingerprinted at once: never stored, shown or logged), "
    "`fingerprint` (its SHA-256, 64 hex digits) or `jti` (a signed read token's id); `topic` "
    "for that topic only (absent: every topic). Any other field is refused (400), so a "
    "misspelt `topic` never revokes a token everywhere. JSON or a form.",
    bodies.RevocationRequest,
    form=True,
)
_REVOCATION_EFFECT = (
    " Every hub process on the same Redis applies it within RSHUB_REVOCATION_CHECK_SECONDS "
    "(0.25 s): a revoked token gets 403 wherever it was accepted (reading, publishing, "
    "WebSub), its open streams end (WebSocket close 4403, SSE a last `event: error`) and "
    "WebSub subscriptions made with it are removed (their callback gets `hub.mode=denied`)."
)
_RATE_LIMIT_ID = _param(
    "id",
    "path",
    "The subscription's id (as in /admin/subscriptions and /metrics)",
    type="string",
    pattern="^[0-9a-f]{12}$",
)
_RATE_LIMIT_ANSWER = Answer(
    "The rate limit in force and where it comes from", bodies.SubscriptionRateLimit
)
_RATE_LIMITS = "/admin/subscriptions/{id}/rate-limit"

#: A WebSub request, a form (WebSub 5.1, 7.1), with the hub's own extensions.
_WEBSUB_FORM: Schema = {
    "type": "object",
    "required": ["hub.mode"],
    "properties": {
        "hub.mode": {"enum": ["subscribe", "unsubscribe", "publish"]},
        "hub.topic": _STRING,
        "hub.callback": _STRING,
        "hub.lease_seconds": {"type": "integer", "minimum": 1},
        "hub.secret": {"type": "string", "maxLength": 199},
        "hub.since": _STRING,
        "hub.url": _STRING,
        "hub.signature": {
            "enum": ["websub", "standard-webhooks"],
            "description": "How deliveries are signed (with `hub.secret`): `X-Hub-Signature` "
            "(default) or Standard Webhooks (`webhook-id`, `webhook-timestamp`, "
            "`webhook-signature`); a `whsec_` secret is base64 after the prefix.",
        },
        "hub.filter.change": {
            "type": "string",
            "description": "Only these change types, comma-separated: created, updated, "
            "deleted, changedump (packages of a changedump-notification).",
        },
        "hub.filter.prefix": {
            "type": "array",
            "items": _STRING,
            "maxItems": 32,
            "description": "Only changes whose URI starts with one of these (repeatable).",
        },
        "hub.rate_limit": {
            "type": "string",
            "description": "`<deliveries per second>[,<burst>]`, e.g. `2` or `0.5,3`; 0 = none.",
        },
    },
}


ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/topics/{name}",
        "publish",
        "Publish a change notification to a topic",
        ("publishing",),
        _PUBLISH_ANSWERS,
        description="A ResourceSync changelist-notification (or Change List) document, or a "
        "changedump-notification (each package stored as an event with change=changedump); "
        "every change is stored before the 202. To a plain WebSub topic (`RSHUB_WEBSUB_TOPICS`), "
        "the body is its new content, of any type, stored with its Content-Type (one media "
        "type, at most 512 characters; none: application/octet-stream) and delivered whole. "
        + _AUTH_NOTE,
        parameters=(TOPIC, _param("Idempotency-Key", "header", type="string", maxLength=200)),
        body=RequestBody(media={XML: _STRING, "*/*": _BINARY}),
    ),
    Route(
        "get",
        "/topics/{name}",
        "topicUri",
        "The topic URI: its open Change List page, with WebSub Link headers",
        ("documents",),
        {
            **_DOCUMENT_ANSWERS,
            "200": Answer(
                "The document (a plain WebSub topic: its content)",
                media={XML: _STRING, "*/*": _BINARY},
            ),
        },
        description="A plain WebSub topic's is its latest content, with the Content-Type it "
        "was published with and an ETag.",
        parameters=(TOPIC, *_CONDITIONAL),
    ),
    Route(
        "post",
        "/",
        "hub",
        "The WebSub hub URL: subscribe, unsubscribe, publish ping; or publish",
        ("websub", "publishing"),
        {
            "202": Answer(
                "Accepted: a subscription request (being verified), a denial sent to the "
                "callback, or a stored publish / ping",
                bodies.PublishAccepted,
                media={TEXT: _STRING},
            ),
            **{status: answer for status, answer in _PUBLISH_ANSWERS.items() if status != "202"},
            "429": error(
                "Too many publish pings from this publisher (its token; on an open hub its "
                "client address), or too many refused for their token from this client address",
                **{
                    "Retry-After": {
                        "description": "Seconds until a ping can succeed",
                        "schema": {"type": "integer", "minimum": 1},
                    }
                },
            ),
            "502": error(
                "Fetching the pinged URL failed, or (a plain WebSub topic) its answer cannot "
                "be delivered: a Content-Type that is not one media type or is over 512 "
                "characters, a content coding, an empty body"
            ),
        },
        description="A form (`hub.mode` = subscribe | unsubscribe | publish) is a WebSub "
        "request: subscriptions are answered 202 and verified in the background. An XML body "
        'is a publish to the topic named by `Link: <topic-url>; rel="self"`. A topic URL '
        "`/topics/{name}` on a host that is none of the hub's names (public URL, "
        "`--alias-url`, loopback names of a loopback hub) is refused with 400 naming them. "
        "For a plain WebSub topic (`RSHUB_WEBSUB_TOPICS`), a publish ping fetches its "
        "content, of any type, and a body of any type with that Link header is its new "
        "content. " + _AUTH_NOTE,
        body=RequestBody(media={FORM: _WEBSUB_FORM, XML: _STRING, "*/*": _BINARY}),
    ),
    Route(
        "get",
        "/",
        "dashboard",
        "The operators' dashboard (HTML)",
        ("operations",),
        {"200": Answer("HTML", media={HTML: _STRING})},
    ),
    Route(
        "get",
        "/topics/{name}/events",
        "serverSentEvents",
        "Follow a topic as server-sent events (one change per event)",
        ("streams",),
        {
            "200": _EVENT_STREAM,
            "400": error("Bad topic name, resume id or filter"),
            **_READ_REFUSED,
            "410": _GONE,
            "503": UNAVAILABLE,
        },
        parameters=_stream_parameters(last_event_id=True),
    ),
    Route(
        "get",
        "/topics/{name}/ws",
        "webSocket",
        "Follow a topic over a WebSocket (JSON arrays of changes)",
        ("streams",),
        {
            "101": _UPGRADE,
            "400": error("Not a WebSocket upgrade, or a bad name, resume id or filter"),
            **_READ_REFUSED,
            "403": error(f"The token may not read this topic, {_ORIGIN_REFUSED}"),
            "410": _GONE,
            "503": UNAVAILABLE,
        },
        parameters=_stream_parameters(last_event_id=False),
    ),
    Route(
        "get",
        "/events",
        "serverSentEventsOfTopics",
        "Follow several topics as one stream of server-sent events",
        ("streams",),
        {
            "200": _EVENT_STREAM,
            "400": error(_TOPICS_BAD),
            **_READ_REFUSED,
            "410": _GONE_OF_TOPICS,
            "503": UNAVAILABLE,
        },
        description="One event per change, naming its topic; each `id:` is the stream's "
        "resume id after that change (every topic resumes exactly from it), and the stream "
        "opens with an `id:` of where it starts.",
        parameters=_topics_parameters(last_event_id=True),
    ),
    Route(
        "get",
        "/ws",
        "webSocketOfTopics",
        "Follow several topics over one WebSocket",
        ("streams",),
        {
            "101": _UPGRADE,
            "400": error(f"Not a WebSocket upgrade. {_TOPICS_BAD}"),
            **_READ_REFUSED,
            "403": error(f"The token may not read a named topic, {_ORIGIN_REFUSED}"),
            "410": _GONE_OF_TOPICS,
            "503": UNAVAILABLE,
        },
        description='Each text message is `{"id": <resume id after it>, "events": [...]}`, '
        "each change naming its topic; the first has no events.",
        parameters=_topics_parameters(last_event_id=False),
    ),
    _document(
        "/.well-known/resourcesync",
        "sourceDescription",
        "The Source Description: one Capability List per topic",
    ),
    _document(
        "/topics/{name}/capabilitylist.xml",
        "capabilityList",
        "A topic's Capability List",
        TOPIC,
    ),
    _document(
        "/topics/{name}/changelist.xml", "changeListIndex", "A topic's Change List index", TOPIC
    ),
    _document(
        "/topics/{name}/changelist/{page}.xml",
        "changeListPage",
        "One Change List page",
        TOPIC,
        _PAGE,
    ),
    _document(
        "/topics/{name}/changes.xml",
        "latestChanges",
        "The latest change of every URI changed in the retained stream, as one Change List "
        "(at most 50,000 entries); it begins with a marker entry naming changes-lost when "
        "some change is no longer listed",
        TOPIC,
        built=True,
    ),
    Route(
        "get",
        "/topics/{name}/changes-lost",
        "changesLost",
        "What changes.xml no longer lists: always 410 Gone, with `lost_through` (the newest "
        "change not listed, an event id; absent when nothing is lost), `from` (its time: "
        "after a new baseline, where to resume), `changes` and `resourcelist` (where to "
        "re-baseline from)",
        ("documents",),
        {
            "400": _BAD_NAME,
            **_READ_REFUSED,
            "404": _NOT_FOUND,
            "410": error("Changes before `from` are no longer listed: make a new baseline"),
            "503": UNAVAILABLE,
        },
        parameters=(TOPIC,),
    ),
    _document(
        "/topics/{name}/resourcelist.xml",
        "resourceList",
        "A topic's Resource List (an index when large)",
        TOPIC,
        built=True,
    ),
    _document(
        "/topics/{name}/resourcelist/{page}.xml",
        "resourceListPage",
        "One Resource List page of a snapshot",
        TOPIC,
        _PAGE,
    ),
    Route(
        "get",
        "/topics/{name}/subscriptions",
        "subscriptions",
        "A topic's WebSub subscriptions (never their secrets)",
        ("operations",),
        {
            "200": Answer("The subscriptions", bodies.Subscriptions),
            "400": _BAD_NAME,
            "401": _NO_TOKEN,
            "403": error("Not allowed"),
            "503": UNAVAILABLE,
        },
        description="Needs the admin token or a token that may publish to the topic; on a "
        "hub without tokens only direct loopback clients (never through a proxy), and a "
        "private topic's only with a token that may read it.",
        parameters=(TOPIC,),
    ),
    Route(
        "get",
        "/healthz",
        "health",
        "Health of the hub and its Redis",
        ("operations",),
        {
            "200": Answer("Healthy", bodies.Health),
            "503": Answer("Redis unreachable", bodies.Health),
        },
        description='Public: {"status": "ok"} or {"status": "degraded"}. Details (Redis, '
        "pid, node, embedded Redis) only for operators: the admin token, a hub-wide token, "
        "or a direct loopback client of an open hub.",
        optional_bearer=True,
    ),
    Route(
        "get",
        "/metrics",
        "metrics",
        "Prometheus metrics (text exposition format)",
        ("operations",),
        {
            "200": Answer("Metrics", media={TEXT: _STRING}),
            "401": error("RSHUB_METRICS_TOKEN is set: no, malformed or wrong token"),
        },
        description="Public unless RSHUB_METRICS_TOKEN is set; then it needs that token or "
        "the admin token as a bearer. Subscriptions are labelled by id, never by callback "
        'URL; private topics the token may not read are summed under topic="(private)".',
        optional_bearer=True,
    ),
    _admin(
        "get",
        "/admin/topics",
        "adminTopics",
        "Every topic: length, first and last id, last publish, subscription count",
        Answer("The topics", bodies.AdminTopics),
    ),
    _admin(
        "get",
        "/admin/topics/{name}",
        "adminTopic",
        "One topic: Change List pages, Resource List size, presence (clients by kind)",
        Answer("The topic", bodies.AdminTopic),
        not_found=_NO_SUCH,
        parameters=(TOPIC,),
    ),
    _admin(
        "delete",
        "/admin/topics/{name}",
        "adminDeleteTopic",
        "Delete a topic: its stream, documents and subscriptions",
        Answer("Deleted", bodies.TopicDeleted),
        not_found=_NO_SUCH,
        parameters=(TOPIC,),
    ),
    _admin(
        "get",
        "/admin/subscriptions",
        "adminSubscriptions",
        "Subscriptions with state, cursor, lag, last success and delivery terms",
        Answer("The subscriptions", bodies.AdminSubscriptions),
        parameters=(
            _param("topic", "query"),
            _param("state", "query", type="string", enum=["active", "suspended", "disabled"]),
        ),
    ),
    _admin(
        "delete",
        "/admin/subscriptions",
        "adminDeleteSubscription",
        "Delete one subscription",
        Answer("Deleted", bodies.SubscriptionDeleted),
        not_found=_NO_SUCH,
        body=_TARGET,
    ),
    _admin(
        "get",
        _RATE_LIMITS,
        "adminGetRateLimit",
        "A subscription's delivery rate limit",
        _RATE_LIMIT_ANSWER,
        not_found=_NO_SUCH,
        parameters=(_RATE_LIMIT_ID,),
    ),
    _admin(
        "put",
        _RATE_LIMITS,
        "adminSetRateLimit",
        "Override a subscription's delivery rate limit (outlives re-subscriptions)",
        _RATE_LIMIT_ANSWER,
        not_found=_NO_SUCH,
        parameters=(_RATE_LIMIT_ID,),
        body=RequestBody(model=bodies.RateLimitRequest),
    ),
    _admin(
        "delete",
        _RATE_LIMITS,
        "adminDeleteRateLimit",
        "Remove the override: the subscriber's limit, else the default",
        _RATE_LIMIT_ANSWER,
        not_found=_NO_SUCH,
        parameters=(_RATE_LIMIT_ID,),
    ),
    Route(
        "get",
        "/admin/subscriptions/{id}",
        "adminSubscription",
        "One subscription: state, cursor, lag, last success and last attempts",
        ("admin",),
        {
            "200": Answer("The subscription's record", bodies.SubscriptionRecord),
            "400": error("Not a subscription id (12 lowercase hex digits)"),
            "401": error("No token or signature, or a malformed, expired or future one"),
            "403": error("Wrong token or signature, a replayed one, or no hub.secret"),
            "404": error("No such subscription"),
            "503": UNAVAILABLE,
        },
        description="The admin token reads any record (without one, loopback clients of an "
        "open hub). A subscriber reads its own without it by signing the request with its "
        "hub.secret (X-RSHub-Timestamp, X-RSHub-Signature); each signature is accepted once. "
        "A subscription without a secret is for the admin only.",
        parameters=(
            _param("id", "path", "The subscription id (X-RSHub-Subscription)"),
            *_SIGNED_HEADERS,
        ),
    ),
    _admin(
        "post",
        "/admin/subscriptions/resume",
        "adminResumeSubscription",
        "Resume a suspended or disabled subscription now",
        Answer("The resumed subscription", bodies.Subscription),
        not_found=_NO_SUCH,
        body=_TARGET,
    ),
    _admin(
        "get",
        "/admin/subscriptions/{id}/dead-letters",
        "adminDeadLetters",
        "A subscription's dead letters: events not delivered within the retry window",
        Answer("The oldest dead letters and their total", bodies.DeadLetters),
        not_found=_NO_SUCH_ID,
        parameters=(
            _SUBSCRIPTION_ID,
            _param("limit", "query", "At most this many (1 to 1000, default 100)"),
            _param("after", "query", "Only those after this entry (the last page's last entry)"),
        ),
    ),
    _admin(
        "post",
        "/admin/subscriptions/{id}/dead-letters/replay",
        "adminReplayDeadLetters",
        "Re-deliver a subscription's dead letters now (out of order, marked X-RSHub-Replay: "
        "dead-letter), removing each once its callback took it",
        Answer(
            "Replayed and remaining counts, and the error that stopped the replay (or null)",
            bodies.DeadLetterReplay,
        ),
        not_found=_NO_SUCH_ID,
        parameters=(_SUBSCRIPTION_ID,),
        s409=error("A replay of this subscription is under way"),
    ),
    _admin(
        "get",
        "/admin/revocations",
        "adminRevocations",
        "Token revocations in force: fingerprint or jti, topic, when",
        Answer("The revocations", bodies.Revocations),
    ),
    _admin(
        "post",
        "/admin/revocations",
        "adminRevokeToken",
        "Revoke a token, for every topic or for one (that topic grant removed)",
        Answer("The revocation (`new`: false when it was in force already)", bodies.Revocation),
        body=_REVOCATION_BODY,
        description=_ADMIN_NOTE + _REVOCATION_EFFECT,
        s409=error("The hub keeps 10,000 revocations already"),
    ),
    _admin(
        "delete",
        "/admin/revocations",
        "adminLiftRevocation",
        "Lift a revocation: the token is accepted again",
        Answer("The lifted revocation", bodies.Lifted),
        not_found=error("No such revocation in force"),
        body=_REVOCATION_BODY,
    ),
    Route(
        "get",
        "/admin/overview.json",
        "overview",
        "The dashboard's data: topics, subscriptions with lag, live clients",
        ("operations",),
        {
            "200": Answer("The overview", bodies.Overview),
            "401": _NO_TOKEN,
            "403": error("Not allowed"),
            "503": UNAVAILABLE,
        },
        description="Needs the admin token or a hub-wide token; on a hub without tokens "
        "only direct loopback clients (never through a proxy). Private topics the token may "
        "not read are left out.",
    ),
    Route(
        "get",
        "/dashboard/{file}",
        "dashboardAsset",
        "The dashboard's script and style sheet",
        ("operations",),
        {"200": Answer("The file"), "404": error("No such file")},
        parameters=(_param("file", "path"),),
    ),
    Route(
        "get",
        "/openapi.json",
        "openapi",
        "This document",
        ("documentation",),
        {"200": Answer("OpenAPI 3.1", media={JSON: {"type": "object"}})},
    ),
    Route(
        "get",
        "/docs",
        "docs",
        "This document as an HTML page",
        ("documentation",),
        {"200": Answer("HTML", media={HTML: _STRING})},
    ),
)

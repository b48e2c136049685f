"""The hub's HTTP interface as an OpenAPI 3.1 document, kept as data, and its HTML rendering.

Served at ``/openapi.json`` and rendered for people at ``/docs`` (:func:`render_html`, a
self-contained page: no script, no external asset). Every route of
:func:`hub.web.app.create_app` is described here; a test fuzzes each operation against a
live hub and checks the answers against this document, so the two cannot drift apart.
"""

from __future__ import annotations

import html
import re
from typing import Any

from hub.core.topics import TOPIC_NAME
from hub.core.version import __version__

JSON = "application/json"
XML = "application/xml"
TEXT = "text/plain"

Schema = dict[str, Any]

_ERROR: Schema = {
    "type": "object",
    "description": "Every error the hub answers in JSON: a message and the HTTP status, "
    "plus fields that help (e.g. trimmed_through, resourcelist, rule, document, index).",
    "required": ["error", "status"],
    "properties": {
        "error": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
    },
    "additionalProperties": True,
}

_PUBLISH_ACCEPTED: Schema = {
    "type": "object",
    "required": ["topic", "accepted", "ids"],
    "properties": {
        "topic": {"type": "string"},
        "accepted": {"type": "integer", "minimum": 0},
        "ids": {"type": "array", "items": {"type": "string"}},
        "replayed": {"type": "boolean"},
        "fetched": {"type": "integer", "minimum": 0},
        "note": {"type": "string"},
        "content_type": {
            "type": "string",
            "description": "A plain WebSub topic's publish: the Content-Type its content was "
            "stored with (and is delivered with)",
        },
        "length": {"type": "integer", "minimum": 0, "description": "Its content's bytes"},
    },
}

#: A plain WebSub topic's content (``RSHUB_WEBSUB_TOPICS``): any media type, kept as it is.
_ANY_CONTENT: Schema = {"schema": {"type": "string", "format": "binary"}}

_HEALTH: Schema = {
    "type": "object",
    "required": ["status"],
    "description": "Anyone gets only ``status``; the other fields are for those who may see "
    "the overview (admin token, hub-wide token, or a direct loopback client of an open hub "
    "without admin token).",
    "properties": {
        "status": {"enum": ["ok", "degraded"]},
        "hub": {"type": "string"},
        "redis": {"type": "string"},
        "version": {"type": "string"},
        "pid": {"type": "integer"},
        "node": {"type": "string"},
        "nodes": {"type": "integer"},
        "embedded_redis": {"type": "object"},
    },
}

_SUBSCRIPTION: Schema = {
    "type": "object",
    "required": ["topic", "callback", "state"],
    "properties": {
        "topic": {"type": "string"},
        "topic_url": {"type": "string"},
        "callback": {"type": "string"},
        "id": {"type": "string", "description": "the subscription's label in /metrics"},
        "state": {"enum": ["active", "suspended", "disabled"]},
        "lease_seconds": {"type": "integer"},
        "expires_at": {"type": "number"},
        "created_at": {"type": "number"},
        "secret": {"type": "boolean", "description": "whether one is set (never its value)"},
        "failures": {"type": "integer"},
        "last_error": {"type": ["string", "null"]},
        "gaps": {
            "type": "integer",
            "description": "gap notices delivered (retention trimmed events it had not got)",
        },
        "last_gap": {"type": ["string", "null"], "description": "trimmed-through of the last"},
        "cursor": {"type": ["string", "null"]},
    },
}

# -- a subscription's delivery terms, as GET /admin/subscriptions shows them ---------------

_RATE_LIMIT_IN_FORCE: Schema = {
    "type": "object",
    "required": ["per_second", "burst", "source"],
    "properties": {
        "per_second": {"type": "number", "description": "deliveries per second (0: none)"},
        "burst": {"type": "integer"},
        "source": {"enum": ["admin", "subscriber", "default"]},
    },
}

_ADMIN_SUBSCRIPTION: Schema = {
    "type": "object",
    "required": (
        "id topic callback state signature previous_secret filter rate_limit strikes "
        "disabled_at last_success"
    ).split(),
    "properties": {
        **_SUBSCRIPTION["properties"],
        "last_id": {"type": ["string", "null"]},
        "lag_events": {"type": "integer"},
        "lag_capped": {"type": "boolean"},
        "lag_seconds": {"type": "number"},
        "retry_at": {"type": ["number", "null"]},
        "expires": {"type": ["string", "null"]},
        "signature": {"enum": ["websub", "standard-webhooks"]},
        "previous_secret": {
            "type": "boolean",
            "description": "whether a rotated-out secret still signs (never its value)",
        },
        "previous_secret_until": {
            "type": ["number", "null"],
            "description": "when it stops signing (epoch seconds)",
        },
        "filter": {
            "type": ["object", "null"],
            "description": "hub.filter.*: null for every change",
            "properties": {
                "changes": {"type": ["array", "null"], "items": {"type": "string"}},
                "prefixes": {"type": "array", "items": {"type": "string"}},
            },
        },
        "rate_limit": {**_RATE_LIMIT_IN_FORCE, "description": "the rate limit in force"},
        "strikes": {"type": "integer", "description": "weighted failures toward suspension"},
        "disabled_at": {"type": ["number", "null"]},
        "last_success": {
            "type": ["object", "null"],
            "properties": {
                "at": {"type": "number"},
                "time": {"type": ["string", "null"]},
                "event_id": {"type": "string"},
            },
        },
    },
}

_ADMIN_SUBSCRIPTIONS: Schema = {
    "type": "object",
    "required": ["subscriptions"],
    "properties": {
        "subscriptions": {
            "type": "array",
            "items": {"$ref": "#/components/schemas/AdminSubscription"},
        }
    },
}

_REVOCATION_FIELDS: Schema = {
    "fingerprint": {
        "type": ["string", "null"],
        "description": "The token's SHA-256 in hex (never the token)",
    },
    "jti": {"type": ["string", "null"], "description": "A signed read token's id"},
    "topic": {"type": ["string", "null"], "description": "null: every topic"},
}

_REVOCATION: Schema = {
    "type": "object",
    "required": ["fingerprint", "jti", "topic", "revoked_at", "revoked"],
    "properties": {
        **_REVOCATION_FIELDS,
        "revoked_at": {"type": "number", "description": "Epoch seconds"},
        "revoked": {"type": "string", "description": "The same, ISO 8601 (UTC)"},
        "new": {"type": "boolean", "description": "false: it was in force already"},
    },
}

_REVOCATIONS: Schema = {
    "type": "object",
    "required": ["revocations", "version"],
    "properties": {
        "revocations": {"type": "array", "items": {"$ref": "#/components/schemas/Revocation"}},
        "version": {"type": "integer", "description": "Moves with every change"},
    },
}

_LIFTED: Schema = {
    "type": "object",
    "required": ["fingerprint", "jti", "topic", "lifted"],
    "properties": {**_REVOCATION_FIELDS, "lifted": {"const": True}},
}

_SUBSCRIPTIONS: Schema = {
    "type": "object",
    "required": ["topic", "last_id", "subscriptions"],
    "properties": {
        "topic": {"type": "string"},
        "last_id": {"type": ["string", "null"]},
        "subscriptions": {"type": "array", "items": {"$ref": "#/components/schemas/Subscription"}},
    },
}

_OVERVIEW: Schema = {
    "type": "object",
    "required": ["topics", "subscriptions", "clients", "redis_ok", "version", "generated_ms"],
    "properties": {
        "topics": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "length", "published"],
                "properties": {
                    "name": {"type": "string"},
                    "length": {"type": "integer"},
                    "published": {"type": "integer"},
                    "last_id": {"type": ["string", "null"]},
                    "last_publish_ms": {"type": ["integer", "null"]},
                },
            },
        },
        "subscriptions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["topic", "callback", "state", "lag_events", "lag_seconds"],
                "properties": {
                    "topic": {"type": "string"},
                    "callback": {"type": "string"},
                    "id": {"type": "string"},
                    "state": {"type": "string"},
                    "failures": {"type": "integer"},
                    "last_error": {"type": ["string", "null"]},
                    "expires_at": {"type": "number"},
                    "cursor": {"type": ["string", "null"]},
                    "lag_events": {"type": "integer"},
                    "lag_capped": {"type": "boolean"},
                    "lag_seconds": {"type": "number"},
                    "gaps": {"type": "integer"},
                },
            },
        },
        "clients": {
            "type": "object",
            "description": "live WebSocket (ws) and SSE clients over every hub process",
            "additionalProperties": {"type": "integer"},
        },
        "redis_ok": {"type": "boolean"},
        "version": {"type": "string"},
        "generated_ms": {"type": "integer"},
        "notes": {"type": "array", "items": {"type": "string"}},
        "presence": {
            "type": "object",
            "additionalProperties": {"$ref": "#/components/schemas/Presence"},
        },
    },
}

# -- attempt log and presence ------------------------------------------------------------

_PRESENCE: Schema = {
    "type": "object",
    "description": "A topic's live WebSocket (ws) and SSE clients over every hub process, "
    "and its WebSub subscriptions by state.",
    "required": ["ws", "sse", "websub"],
    "properties": {
        "ws": {"type": "integer"},
        "sse": {"type": "integer"},
        "websub": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
}

_ATTEMPT: Schema = {
    "type": "object",
    "required": ["at", "status", "latency_ms", "error", "first_event_id", "last_event_id"],
    "properties": {
        "at": {"type": "number", "description": "When the POST was sent (epoch seconds)"},
        "time": {"type": ["string", "null"]},
        "status": {"type": ["integer", "null"], "description": "null: no HTTP answer"},
        "latency_ms": {"type": "number"},
        "error": {"type": ["string", "null"]},
        "first_event_id": {"type": "string"},
        "last_event_id": {"type": "string"},
        "events": {"type": "integer"},
    },
}

_SUBSCRIPTION_RECORD: Schema = {
    "type": "object",
    "required": [*_ADMIN_SUBSCRIPTION["required"], "cursor", "lag_events", "attempts"],
    "properties": {
        **_ADMIN_SUBSCRIPTION["properties"],
        "attempts": {"type": "array", "items": _ATTEMPT, "description": "Newest first"},
    },
}

_SIGNED_HEADERS = [
    {
        "name": name,
        "in": "header",
        "required": False,
        "description": text,
        "schema": {"type": "string"},
    }
    for name, text in (
        ("X-RSHub-Timestamp", "Self-service: unix seconds, within the tolerance (300 s)"),
        (
            "X-RSHub-Signature",
            "Self-service: sha256=<hex HMAC-SHA256 of '<timestamp>\\n<path>' keyed with the "
            "subscription's hub.secret>",
        ),
    )
]


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _xml(description: str) -> dict[str, Any]:
    return {"description": description, "content": {XML: {"schema": {"type": "string"}}}}


def _json(description: str, ref: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {JSON: {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }


_TOPIC = {"$ref": "#/components/parameters/topic"}
_AUTH_NOTE = "Needs `Authorization: Bearer <token>` when the hub has publisher tokens."
_BAD_NAME = _error("Invalid topic name or request")
_UNAVAILABLE = _error("Redis unavailable")
_DAMAGED = _error(
    "Stored data is damaged: Redis holds, under a key this request needs, what the hub did "
    "not write (the message names it). Not an outage; retrying does not help."
)
_PUBLISH_UNAVAILABLE = _error(
    "Redis unavailable; or, with RSHUB_REDIS_WAIT_REPLICAS, fewer replicas than asked "
    "acknowledged the changes in time: they are stored on the Redis primary but may or may "
    "not survive a failover (the message says how many acknowledged); or the document "
    "parser failed. Retry with the same Idempotency-Key: a stored publish is replayed "
    "(and waited for again), never stored twice."
)
_NOT_FOUND = _error("Unknown topic (nothing was ever published to it) or page")
_NOT_MODIFIED = {"description": "Not modified (If-None-Match / If-Modified-Since)"}
#: Reading a private topic (documents, streams): read tokens, signed read tokens (JWT).
_READ_REFUSED = {
    "401": _error(
        "A private topic and no token, or a signed read token that is expired, signed with "
        "another key or algorithm, without exp, whose exp is not a number or lies beyond "
        "RSHUB_JWT_MAX_TTL, or not a JWT (the message says which)"
    ),
    "403": _error(
        "The token may not read this topic (a signed one names other topics), or it was "
        "revoked (the message says so, naming its fingerprint)"
    ),
}
_ACCESS_TOKEN = {
    **{"name": "access_token", "in": "query", "required": False, "schema": {"type": "string"}},
    "description": "A read token or signed read token, for clients that cannot set "
    "`Authorization` (browsers' WebSocket and EventSource).",
}
_CONDITIONAL = [
    {"name": "If-None-Match", "in": "header", "required": False, "schema": {"type": "string"}},
]


def _document(summary: str, extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "tags": ["documents"],
            "parameters": [*(extra or []), *_CONDITIONAL],
            "responses": {
                "200": _xml("The document"),
                "304": _NOT_MODIFIED,
                "400": _BAD_NAME,
                **_READ_REFUSED,
                "404": _NOT_FOUND,
                "410": _error("The page was trimmed by retention"),
                "503": _UNAVAILABLE,
            },
        }
    }


def _changes_lost() -> dict[str, Any]:
    """What the marker entry of ``changes.xml`` names: always 410, saying what is lost."""
    return {
        "get": {
            "summary": "What changes.xml no longer lists: always 410 Gone, with `lost_through` "
            "(the newest change not listed, an event id; absent when nothing is lost), `from` "
            "(its time: after a new baseline, where to resume), `changes` and `resourcelist` "
            "(where to re-baseline from)",
            "tags": ["documents"],
            "parameters": [_TOPIC],
            "responses": {
                "400": _BAD_NAME,
                **_READ_REFUSED,
                "404": _NOT_FOUND,
                "410": _error("Changes before `from` are no longer listed: make a new baseline"),
                "503": _UNAVAILABLE,
            },
        }
    }


# -- signatures, filters, rate limit ----------------------------------------------------------

_SUBSCRIBE_EXTENSIONS: Schema = {
    "hub.signature": {
        "enum": ["websub", "standard-webhooks"],
        "description": "How deliveries are signed (with `hub.secret`): `X-Hub-Signature` "
        "(default) or Standard Webhooks (`webhook-id`, `webhook-timestamp`, "
        "`webhook-signature`); a `whsec_` secret is base64 after the prefix.",
    },
    "hub.filter.change": {
        "type": "string",
        "description": "Only these change types, comma-separated: created, updated, deleted.",
    },
    "hub.filter.prefix": {
        "type": "array",
        "items": {"type": "string"},
        "maxItems": 32,
        "description": "Only changes whose URI starts with one of these (repeatable).",
    },
    "hub.rate_limit": {
        "type": "string",
        "description": "`<deliveries per second>[,<burst>]`, e.g. `2` or `0.5,3`; 0 = none.",
    },
}

_RATE_LIMIT_BODY = {
    "required": True,
    "content": {
        JSON: {
            "schema": {
                "type": "object",
                "required": ["per_second"],
                "additionalProperties": False,
                "properties": {
                    "per_second": {"type": "number", "description": "deliveries per second"},
                    "burst": {"type": "integer", "minimum": 1},
                },
            }
        }
    },
}


def _rate_limit(operation: str, summary: str) -> dict[str, Any]:
    answer = _admin(operation, summary, "rate limit in force", not_found=True)
    answer["responses"]["200"] = {
        "description": "The rate limit in force and where it comes from",
        "content": {
            JSON: {
                "schema": {
                    "type": "object",
                    "required": ["id", "per_second", "burst", "source"],
                    "properties": {
                        "id": {"type": "string"},
                        "topic": {"type": "string"},
                        "callback": {"type": "string"},
                        **_RATE_LIMIT_IN_FORCE["properties"],
                    },
                }
            }
        },
    }
    return answer


def _rate_limit_path() -> dict[str, Any]:
    return {
        "parameters": [
            {
                "name": "id",
                "in": "path",
                "required": True,
                "description": "The subscription's id (as in /admin/subscriptions and /metrics)",
                "schema": {"type": "string", "pattern": "^[0-9a-f]{12}$"},
            }
        ],
        "get": _rate_limit("adminGetRateLimit", "A subscription's delivery rate limit"),
        "put": {
            **_rate_limit(
                "adminSetRateLimit",
                "Override a subscription's delivery rate limit (outlives re-subscriptions)",
            ),
            "requestBody": _RATE_LIMIT_BODY,
        },
        "delete": _rate_limit(
            "adminDeleteRateLimit", "Remove the override: the subscriber's limit, else the default"
        ),
    }


_TARGET = {
    "required": True,
    "description": "The subscription, as a form or a JSON object",
    "content": {
        ctype: {
            "schema": {
                "type": "object",
                "required": ["topic", "callback"],
                "properties": {"topic": {"type": "string"}, "callback": {"type": "string"}},
            }
        }
        for ctype in (JSON, "application/x-www-form-urlencoded")
    },
}


_REVOCATION_BODY = {
    "required": True,
    "description": "Exactly one of `token` (fingerprinted at once: never stored, shown or "
    "logged), `fingerprint` (its SHA-256, 64 hex digits) or `jti` (a signed read token's "
    "id); `topic` for that topic only (absent: every topic). Any other field is refused "
    "(400), so a misspelt `topic` never revokes a token everywhere. JSON or a form.",
    "content": {
        ctype: {
            "schema": {
                "type": "object",
                "properties": {
                    "token": {"type": "string", "minLength": 1, "maxLength": 4096},
                    "fingerprint": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
                    "jti": {"type": "string", "minLength": 1, "maxLength": 256},
                    "topic": {"type": "string"},
                },
                "additionalProperties": False,
            }
        }
        for ctype in (JSON, "application/x-www-form-urlencoded")
    },
}


def _revocations_path() -> dict[str, Any]:
    """``/admin/revocations``: list, revoke, lift."""
    effect = (
        " Every hub process on the same Redis applies it within RSHUB_REVOCATION_CHECK_SECONDS "
        "(0.25 s): a revoked token gets 403 wherever it was accepted (reading, publishing, "
        "WebSub), its open streams end (WebSocket close 4403, SSE a last `event: error`) and "
        "WebSub subscriptions made with it are removed (their callback gets `hub.mode=denied`)."
    )
    revoke = _admin(
        "adminRevokeToken",
        "Revoke a token, for every topic or for one (that topic grant removed)",
        "revocation (`new`: false when it was in force already)",
        not_found=True,
        schema="Revocation",
    )
    revoke["description"] += effect
    revoke["responses"]["409"] = _error("The hub keeps 10,000 revocations already")
    del revoke["responses"]["404"]
    lift = _admin(
        "adminLiftRevocation",
        "Lift a revocation: the token is accepted again",
        "lifted revocation",
        not_found=True,
        schema="Lifted",
    )
    lift["responses"]["404"] = _error("No such revocation in force")
    return {
        "get": _admin(
            "adminRevocations",
            "Token revocations in force: fingerprint or jti, topic, when",
            "revocations",
            schema="Revocations",
        ),
        "post": {**revoke, "requestBody": _REVOCATION_BODY},
        "delete": {**lift, "requestBody": _REVOCATION_BODY},
    }


def _admin(
    operation: str, summary: str, what: str, *, not_found: bool = False, schema: str = ""
) -> dict[str, Any]:
    """An operation of the /admin API: JSON answers, the operator token, errors as JSON."""
    answer = {"$ref": f"#/components/schemas/{schema}"} if schema else {"type": "object"}
    responses: dict[str, Any] = {
        "200": {"description": f"The {what}", "content": {JSON: {"schema": answer}}},
        "400": _error("Bad topic name, field or body"),
        "401": _error("No or malformed bearer token"),
        "403": _error(
            "Not the operator (or, on an open hub, not loopback, or another site's page: "
            "`header` names the Host, Origin or Sec-Fetch-Site refused)"
        ),
        "503": _UNAVAILABLE,
    }
    if not_found:
        responses["404"] = _error("No such topic or subscription")
        responses["415"] = _error("A body that is neither JSON nor a form")
    return {
        "operationId": operation,
        "summary": summary,
        "description": "Needs the operator token (RSHUB_ADMIN_TOKEN); without one, only "
        "loopback clients of an open hub, under the hub's own names and from its own pages "
        "(never another site's: a Host, Origin or Sec-Fetch-Site of one is refused, 403).",
        "tags": ["admin"],
        "responses": responses,
    }


# -- a subscription's dead letters ----------------------------------------------------------

_SUBSCRIPTION_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The subscription's id (12 lowercase hex digits, GET /admin/subscriptions)",
    "schema": {"type": "string"},
}


def _dead_letters_operation(
    operation: str, summary: str, what: str, *, replay: bool = False
) -> dict[str, Any]:
    op = _admin(operation, summary, what)
    op["responses"]["404"] = _error("No subscription with that id")
    if replay:
        op["responses"]["409"] = _error("A replay of this subscription is under way")
    op["parameters"] = [_SUBSCRIPTION_ID]
    return op


_DEAD_LETTER_PATHS: dict[str, Any] = {
    "/admin/subscriptions/{id}/dead-letters": {
        "get": {
            **_dead_letters_operation(
                "adminDeadLetters",
                "A subscription's dead letters: events not delivered within the retry window",
                "oldest dead letters (entry, id, loc, change, lastmod, dead_lettered_at, "
                "failing_since, error) and their total",
            ),
            "parameters": [
                _SUBSCRIPTION_ID,
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": "At most this many (1 to 1000, default 100)",
                    "schema": {"type": "string"},
                },
                {
                    "name": "after",
                    "in": "query",
                    "required": False,
                    "description": "Only those after this entry (the last page's last entry)",
                    "schema": {"type": "string"},
                },
            ],
        }
    },
    "/admin/subscriptions/{id}/dead-letters/replay": {
        "post": {
            **_dead_letters_operation(
                "adminReplayDeadLetters",
                "Re-deliver a subscription's dead letters now (out of order, marked "
                "X-RSHub-Replay: dead-letter), removing each once its callback took it",
                "replayed and remaining counts, and the error that stopped the replay (or null)",
                replay=True,
            ),
        }
    },
}


def _optional(name: str, where: str) -> dict[str, Any]:
    return {"name": name, "in": where, "required": False, "schema": {"type": "string"}}


#: The event id grammar (hub.core.events.parse_id) and the time grammar
#: (hub.core.resume_points) of a resume point.
_EVENT_ID_PATTERN = "^[0-9]{1,20}(-[0-9]{1,20})?$"
_TIME_PATTERN = (
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]{1,9})?)?"
    "([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
#: A composite resume id of a stream of several topics (hub.core.stream_positions).
_COMPOSITE_PATTERN = "^m1\\.[A-Za-z0-9_-]*$"


def _event_id(name: str, where: str, *, composite: bool = False) -> dict[str, Any]:
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
    return {
        **_optional(name, where),
        "description": text,
        "schema": {"type": "string", "anyOf": [{"pattern": p} for p in patterns]},
    }


def _stream_parameters(*, last_event_id: bool) -> list[dict[str, Any]]:
    """A stream's resume point (``since``, SSE's ``Last-Event-ID``) and its filters."""
    resume = [_event_id("since", "query")]
    if last_event_id:
        resume.append(_event_id("Last-Event-ID", "header"))
    return [*resume, _optional("change", "query"), _optional("prefix", "query"), _ACCESS_TOKEN]


def _topics_parameters(*, last_event_id: bool) -> list[dict[str, Any]]:
    """A stream of several topics: which (``topic``, ``topic_prefix``), from where, and the
    filters of a one-topic stream."""
    names = {
        "name": "topic",
        "in": "query",
        "required": False,
        "style": "form",
        "explode": True,
        "description": "A topic to follow (repeatable, or names separated by commas); at "
        "least one `topic` or `topic_prefix`. A private one the token may not read is "
        "401/403.",
        "schema": {"type": "array", "items": {"type": "string"}},
    }
    prefixes = {
        **names,
        "name": "topic_prefix",
        "description": "Follow every topic whose name starts with this (repeatable, at most "
        "32), those first published while the stream is open included, among those the "
        "token may read (the others are left out, never named).",
    }
    resume = [_event_id("since", "query", composite=True)]
    if last_event_id:
        resume.append(_event_id("Last-Event-ID", "header", composite=True))
    return [
        names,
        prefixes,
        *resume,
        _optional("change", "query"),
        _optional("prefix", "query"),
        _ACCESS_TOKEN,
    ]


_TOPICS_BAD = (
    "No topic or prefix, a bad name, prefix, resume id or filter, or more topics or a longer "
    "resume id than the hub's limits (stream_max_topics, stream_max_id_bytes), named"
)


def _publish_responses() -> dict[str, Any]:
    return {
        "202": _json("Stored (or replayed for a repeated Idempotency-Key)", "PublishAccepted"),
        "400": _error("Not a valid change notification, bad topic name or header"),
        "401": _error("No or malformed bearer token"),
        "403": _error("The token may not publish to this topic"),
        "409": _error("Idempotency-Key reused for a different body"),
        "413": _error("Body larger than the hub's limit"),
        "415": _error("Not XML (and the topic is not a plain WebSub topic)"),
        "503": _PUBLISH_UNAVAILABLE,
    }


def spec(server_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document of a hub whose base URL is ``server_url``."""
    name_pattern = f"^{TOPIC_NAME.pattern}$"
    paths: dict[str, Any] = {
        "/topics/{name}": {
            "parameters": [_TOPIC],
            "post": {
                "operationId": "publish",
                "summary": "Publish a change notification to a topic",
                "description": "A ResourceSync changelist-notification (or Change List) "
                "document; every change is stored before the 202. To a plain WebSub topic "
                "(`RSHUB_WEBSUB_TOPICS`), the body is its new content, of any type, stored "
                "with its Content-Type (one media type, at most 512 characters; none: "
                "application/octet-stream) and delivered whole. " + _AUTH_NOTE,
                "tags": ["publishing"],
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "maxLength": 200},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {XML: {"schema": {"type": "string"}}, "*/*": _ANY_CONTENT},
                },
                "responses": _publish_responses(),
            },
            "get": {
                "operationId": "topicUri",
                "summary": "The topic URI: its open Change List page, with WebSub Link headers",
                "description": "A plain WebSub topic's is its latest content, with the "
                "Content-Type it was published with and an ETag.",
                "tags": ["documents"],
                "parameters": _CONDITIONAL,
                "responses": {
                    **_document("")["get"]["responses"],
                    "200": {
                        "description": "The document (a plain WebSub topic: its content)",
                        "content": {XML: {"schema": {"type": "string"}}, "*/*": _ANY_CONTENT},
                    },
                },
            },
        },
        "/": {
            "post": {
                "operationId": "hub",
                "summary": "The WebSub hub URL: subscribe, unsubscribe, publish ping; or publish",
                "description": "A form (`hub.mode` = subscribe | unsubscribe | publish) is a "
                "WebSub request: subscriptions are answered 202 and verified in the "
                "background. An XML body is a publish to the topic named by "
                '`Link: <topic-url>; rel="self"`. A topic URL `/topics/{name}` on a host '
                "that is none of the hub's names (public URL, `--alias-url`, loopback names "
                "of a loopback hub) is refused with 400 naming them. For a plain WebSub "
                "topic (`RSHUB_WEBSUB_TOPICS`), a publish ping fetches its content, of any "
                "type, and a body of any type with that Link header is its new content. "
                + _AUTH_NOTE,
                "tags": ["websub", "publishing"],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {
                                "type": "object",
                                "required": ["hub.mode"],
                                "properties": {
                                    "hub.mode": {"enum": ["subscribe", "unsubscribe", "publish"]},
                                    "hub.topic": {"type": "string"},
                                    "hub.callback": {"type": "string"},
                                    "hub.lease_seconds": {"type": "integer", "minimum": 1},
                                    "hub.secret": {"type": "string", "maxLength": 199},
                                    "hub.since": {"type": "string"},
                                    "hub.url": {"type": "string"},
                                    **_SUBSCRIBE_EXTENSIONS,
                                },
                            }
                        },
                        XML: {"schema": {"type": "string"}},
                        "*/*": _ANY_CONTENT,
                    },
                },
                "responses": {
                    "202": {
                        "description": "Accepted: a subscription request (being verified), "
                        "a denial sent to the callback, or a stored publish / ping",
                        "content": {
                            TEXT: {"schema": {"type": "string"}},
                            JSON: {"schema": {"$ref": "#/components/schemas/PublishAccepted"}},
                        },
                    },
                    **{k: v for k, v in _publish_responses().items() if k != "202"},
                    "429": {
                        **_error(
                            "Too many publish pings from this publisher (its token; on an "
                            "open hub its client address), or too many refused for their "
                            "token from this client address"
                        ),
                        "headers": {
                            "Retry-After": {
                                "description": "Seconds until a ping can succeed",
                                "schema": {"type": "integer", "minimum": 1},
                            }
                        },
                    },
                    "502": _error(
                        "Fetching the pinged URL failed, or (a plain WebSub topic) its answer "
                        "cannot be delivered: a Content-Type that is not one media type or is "
                        "over 512 characters, a content coding, an empty body"
                    ),
                },
            },
            "get": {
                "operationId": "dashboard",
                "summary": "The operators' dashboard (HTML)",
                "tags": ["operations"],
                "responses": {
                    "200": {
                        "description": "HTML",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            },
        },
        "/topics/{name}/events": {
            "parameters": [_TOPIC],
            "get": {
                "operationId": "serverSentEvents",
                "summary": "Follow a topic as server-sent events (one change per event)",
                "tags": ["streams"],
                "parameters": _stream_parameters(last_event_id=True),
                "responses": {
                    "200": {
                        "description": "An endless event stream",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "400": _error("Bad topic name, resume id or filter"),
                    **_READ_REFUSED,
                    "410": _error("Events after the resume id are no longer retained"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/topics/{name}/ws": {
            "parameters": [_TOPIC],
            "get": {
                "operationId": "webSocket",
                "summary": "Follow a topic over a WebSocket (JSON arrays of changes)",
                "tags": ["streams"],
                "parameters": _stream_parameters(last_event_id=False),
                "responses": {
                    "101": {"description": "Switching to the WebSocket protocol"},
                    "400": _error("Not a WebSocket upgrade, or a bad name, resume id or filter"),
                    **_READ_REFUSED,
                    "403": _error(
                        "The token may not read this topic, or (with RSHUB_CORS_ORIGINS set) a "
                        "browser page's Origin is neither listed nor the hub's own"
                    ),
                    "410": _error("Events after the resume id are no longer retained"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/events": {
            "get": {
                "operationId": "serverSentEventsOfTopics",
                "summary": "Follow several topics as one stream of server-sent events",
                "description": "One event per change, naming its topic; each `id:` is the "
                "stream's resume id after that change (every topic resumes exactly from it), "
                "and the stream opens with an `id:` of where it starts.",
                "tags": ["streams"],
                "parameters": _topics_parameters(last_event_id=True),
                "responses": {
                    "200": {
                        "description": "An endless event stream",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "400": _error(_TOPICS_BAD),
                    **_READ_REFUSED,
                    "410": _error(
                        "Events of a topic after its resume point are no longer retained"
                    ),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/ws": {
            "get": {
                "operationId": "webSocketOfTopics",
                "summary": "Follow several topics over one WebSocket",
                "description": 'Each text message is `{"id": <resume id after it>, '
                '"events": [...]}`, each change naming its topic; the first has no events.',
                "tags": ["streams"],
                "parameters": _topics_parameters(last_event_id=False),
                "responses": {
                    "101": {"description": "Switching to the WebSocket protocol"},
                    "400": _error(f"Not a WebSocket upgrade. {_TOPICS_BAD}"),
                    **_READ_REFUSED,
                    "403": _error(
                        "The token may not read a named topic, or (with RSHUB_CORS_ORIGINS set) "
                        "a browser page's Origin is neither listed nor the hub's own"
                    ),
                    "410": _error(
                        "Events of a topic after its resume point are no longer retained"
                    ),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/.well-known/resourcesync": _document(
            "The Source Description: one Capability List per topic"
        ),
        "/topics/{name}/capabilitylist.xml": _document("A topic's Capability List", [_TOPIC]),
        "/topics/{name}/changelist.xml": _document("A topic's Change List index", [_TOPIC]),
        "/topics/{name}/changelist/{page}.xml": _document(
            "One Change List page",
            [
                _TOPIC,
                {"name": "page", "in": "path", "required": True, "schema": {"type": "string"}},
            ],
        ),
        "/topics/{name}/changes.xml": _document(
            "The latest change of every URI changed in the retained stream, as one Change "
            "List (at most 50,000 entries); it begins with a marker entry naming "
            "changes-lost when some change is no longer listed",
            [_TOPIC],
        ),
        "/topics/{name}/changes-lost": _changes_lost(),
        "/topics/{name}/resourcelist.xml": _document(
            "A topic's Resource List (an index when large)", [_TOPIC]
        ),
        "/topics/{name}/resourcelist/{page}.xml": _document(
            "One Resource List page of a snapshot",
            [
                _TOPIC,
                {"name": "page", "in": "path", "required": True, "schema": {"type": "string"}},
            ],
        ),
        "/topics/{name}/subscriptions": {
            "parameters": [_TOPIC],
            "get": {
                "operationId": "subscriptions",
                "summary": "A topic's WebSub subscriptions (never their secrets)",
                "description": "Needs the admin token or a token that may publish to "
                "the topic; on a hub without tokens only direct loopback clients (never "
                "through a proxy), and a private topic's only with a token that may read it.",
                "tags": ["operations"],
                "responses": {
                    "200": _json("The subscriptions", "Subscriptions"),
                    "400": _BAD_NAME,
                    "401": _error("No or malformed bearer token"),
                    "403": _error("Not allowed"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Health of the hub and its Redis",
                "description": 'Public: {"status": "ok"} or {"status": "degraded"}. Details '
                "(Redis, pid, node, embedded Redis) only for operators: the admin token, a "
                "hub-wide token, or a direct loopback client of an open hub.",
                "tags": ["operations"],
                "security": [{}, {"bearer": []}],
                "responses": {
                    "200": _json("Healthy", "Health"),
                    "503": _json("Redis unreachable", "Health"),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (text exposition format)",
                "description": "Public unless RSHUB_METRICS_TOKEN is set; then it needs that "
                "token or the admin token as a bearer. Subscriptions are labelled by id, "
                "never by callback URL; private topics the token may not read are summed "
                'under topic="(private)".',
                "tags": ["operations"],
                "security": [{}, {"bearer": []}],
                "responses": {
                    "200": {
                        "description": "Metrics",
                        "content": {TEXT: {"schema": {"type": "string"}}},
                    },
                    "401": _error("RSHUB_METRICS_TOKEN is set: no, malformed or wrong token"),
                },
            }
        },
        "/admin/topics": {
            "get": _admin(
                "adminTopics",
                "Every topic: length, first and last id, last publish, subscription count",
                "topics",
            ),
        },
        "/admin/topics/{name}": {
            "parameters": [_TOPIC],
            "get": _admin(
                "adminTopic",
                "One topic: Change List pages, Resource List size, presence (clients by kind)",
                "topic",
                not_found=True,
            ),
            "delete": _admin(
                "adminDeleteTopic",
                "Delete a topic: its stream, documents and subscriptions",
                "deleted",
                not_found=True,
            ),
        },
        "/admin/subscriptions": {
            "get": {
                **_admin(
                    "adminSubscriptions",
                    "Subscriptions with state, cursor, lag, last success and delivery terms",
                    "subscriptions",
                    schema="AdminSubscriptions",
                ),
                "parameters": [
                    {
                        "name": "topic",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "state",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "enum": ["active", "suspended", "disabled"]},
                    },
                ],
            },
            "delete": {
                **_admin(
                    "adminDeleteSubscription", "Delete one subscription", "deleted", not_found=True
                ),
                "requestBody": _TARGET,
            },
        },
        "/admin/subscriptions/{id}/rate-limit": _rate_limit_path(),
        "/admin/subscriptions/{id}": {
            "get": {
                **_admin(
                    "adminSubscription",
                    "One subscription: state, cursor, lag, last success and last attempts",
                    "subscription's record",
                    not_found=True,
                ),
                "description": "The admin token reads any record (without one, loopback "
                "clients of an open hub). A subscriber reads its own without it by signing "
                "the request with its hub.secret (X-RSHub-Timestamp, X-RSHub-Signature); each "
                "signature is accepted once. A subscription without a secret is for the "
                "admin only.",
                "parameters": [
                    {
                        "name": "id",
                        "in": "path",
                        "required": True,
                        "description": "The subscription id (X-RSHub-Subscription)",
                        "schema": {"type": "string"},
                    },
                    *_SIGNED_HEADERS,
                ],
                "responses": {
                    "200": _json("The subscription's record", "SubscriptionRecord"),
                    "400": _error("Not a subscription id (12 lowercase hex digits)"),
                    "401": _error("No token or signature, or a malformed, expired or future one"),
                    "403": _error("Wrong token or signature, a replayed one, or no hub.secret"),
                    "404": _error("No such subscription"),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/admin/subscriptions/resume": {
            "post": {
                **_admin(
                    "adminResumeSubscription",
                    "Resume a suspended or disabled subscription now",
                    "resumed",
                    not_found=True,
                ),
                "requestBody": _TARGET,
            },
        },
        **_DEAD_LETTER_PATHS,
        "/admin/revocations": _revocations_path(),
        "/admin/overview.json": {
            "get": {
                "operationId": "overview",
                "summary": "The dashboard's data: topics, subscriptions with lag, live clients",
                "description": "Needs the admin token or a hub-wide token; on a hub without "
                "tokens only direct loopback clients (never through a proxy). Private topics "
                "the token may not read are left out.",
                "tags": ["operations"],
                "responses": {
                    "200": _json("The overview", "Overview"),
                    "401": _error("No or malformed bearer token"),
                    "403": _error("Not allowed"),
                    "503": _UNAVAILABLE,
                },
            }
        },
        "/dashboard/{file}": {
            "get": {
                "operationId": "dashboardAsset",
                "summary": "The dashboard's script and style sheet",
                "tags": ["operations"],
                "parameters": [
                    {"name": "file", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {"description": "The file"},
                    "404": _error("No such file"),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "tags": ["documentation"],
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1",
                        "content": {JSON: {"schema": {"type": "object"}}},
                    }
                },
            }
        },
        "/docs": {
            "get": {
                "operationId": "docs",
                "summary": "This document as an HTML page",
                "tags": ["documentation"],
                "responses": {
                    "200": {
                        "description": "HTML",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
    }
    # Whatever reads Redis may meet data the hub did not write (docs/operations.md,
    # "Damaged data in Redis"): every operation with a storage 503 has that 500 too.
    for item in paths.values():
        for operation in item.values():
            responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
            if "503" in responses:
                responses.setdefault("500", _DAMAGED)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "rshub",
            "version": __version__,
            "description": "A ResourceSync change-notification hub: publish change "
            "notifications, follow them over WebSub, WebSocket or server-sent events, or poll "
            "the materialized Change Lists and Resource Lists. Browser pages on the origins "
            "in RSHUB_CORS_ORIGINS may use `/topics/...`, `/.well-known/resourcesync`, "
            "`POST /` and this document across origins (CORS, preflight `OPTIONS` included); "
            "private topics take signed read tokens (JWT, HS256, claims `topics` and `exp`) "
            "wherever they take a read token.",
        },
        "servers": [{"url": server_url}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "signedReadToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "HS256 with RSHUB_JWT_KEY; `topics`: the names it reads; "
                    "`exp` required, a number at most RSHUB_JWT_MAX_TTL (a day) ahead "
                    "(`rshub token --topic T --ttl 1h`). Access it gives ends with it: a "
                    "WebSub lease is cut to its life, a stream closes (WebSocket 4401, SSE "
                    '`event: error`) unless a WebSocket sends `{"access_token": ...}` first. '
                    "Revocable by its fingerprint or `jti` (`POST /admin/revocations`)",
                },
            },
            "parameters": {
                "topic": {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": "Topic name",
                    "schema": {"type": "string", "pattern": name_pattern},
                }
            },
            "schemas": {
                "Error": _ERROR,
                "PublishAccepted": _PUBLISH_ACCEPTED,
                "Health": _HEALTH,
                "Subscription": _SUBSCRIPTION,
                "Subscriptions": _SUBSCRIPTIONS,
                "Overview": _OVERVIEW,
                "Presence": _PRESENCE,
                "SubscriptionRecord": _SUBSCRIPTION_RECORD,
                "AdminSubscription": _ADMIN_SUBSCRIPTION,
                "AdminSubscriptions": _ADMIN_SUBSCRIPTIONS,
                "Revocation": _REVOCATION,
                "Revocations": _REVOCATIONS,
                "Lifted": _LIFTED,
            },
        },
    }


_METHODS = ("get", "post", "put", "delete", "patch")


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every (method, path, operation) of ``document``, in document order."""
    return [
        (method, path, item[method])
        for path, item in document["paths"].items()
        for method in _METHODS
        if method in item
    ]


def _prose(text: str) -> str:
    """Escaped text with its Markdown code spans (`x`) as ``<code>``, as OpenAPI means them."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def render_html(document: dict[str, Any]) -> str:
    """A self-contained HTML page listing every operation with its parameters and answers."""
    e = html.escape
    rows = []
    for method, path, op in operations(document):
        item = document["paths"][path]
        params = [*item.get("parameters", []), *op.get("parameters", [])]
        names = []
        for p in params:
            if "$ref" in p:
                p = document["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]
            names.append(f"<code>{e(p['name'])}</code> ({e(p['in'])})")
        body = ", ".join(
            f"<code>{e(t)}</code>" for t in op.get("requestBody", {}).get("content", {})
        )
        answers = "".join(
            f"<li><b>{e(code)}</b> {_prose(r.get('description', ''))}</li>"
            for code, r in op["responses"].items()
        )
        rows.append(
            f'<section id="{e(op.get("operationId", method + path))}">'
            f'<h2><span class="m {e(method)}">{e(method.upper())}</span> '
            f"<code>{e(path)}</code></h2>"
            f"<p>{_prose(op.get('summary', ''))}</p>"
            + (f"<p class=d>{_prose(op['description'])}</p>" if op.get("description") else "")
            + (f"<p>Parameters: {', '.join(names)}</p>" if names else "")
            + (f"<p>Body: {body}</p>" if body else "")
            + f"<ul>{answers}</ul></section>"
        )
    info = document["info"]
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{e(info['title'])} API</title>"
        "<style>body{font:15px/1.45 system-ui,sans-serif;max-width:60em;margin:2em auto;"
        "padding:0 1em;color:#222}section{border-top:1px solid #ddd;padding:.4em 0}"
        "h2{font-size:1.05em}.m{display:inline-block;min-width:3.6em;padding:.1em .4em;"
        "border-radius:4px;color:#fff;font-size:.85em;text-align:center}.get{background:#2a7}"
        ".post{background:#27b}code{background:#f4f4f4;padding:0 .2em}.d{color:#555}</style>"
        f"</head><body><h1>{e(info['title'])} {e(info['version'])}</h1>"
        f"<p>{_prose(info['description'])}</p>"
        '<p>Machine-readable: <a href="openapi.json">openapi.json</a> (OpenAPI 3.1).</p>'
        + "".join(rows)
        + "</body></html>"
    )

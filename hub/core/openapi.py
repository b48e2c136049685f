"""The hub's HTTP interface as an OpenAPI 3.1 document, made from its routes and models,
and its HTML rendering.

The document is generated, never written by hand: the operations from the route table
(:data:`hub.core.api_routes.ROUTES`), the JSON schemas from the models the web layer builds
its answers from (:mod:`hub.core.api_bodies`, through pydantic's ``model_json_schema``
machinery), so a changed answer changes its schema. Served at ``/openapi.json`` and
rendered for people at ``/docs`` (:func:`render_html`, a self-contained page: no script, no
external asset). Tests check it is valid OpenAPI 3.1, that it lists exactly the routes of
:func:`hub.web.app.create_app`, and fuzz every operation against a live hub, checking each
answer against it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import html
import re
from typing import Any

from pydantic import TypeAdapter

from hub.core import api_bodies
from hub.core.api_routes import FORM, JSON, ROUTES, Answer, RequestBody, Route, error
from hub.core.topics import TOPIC_NAME
from hub.core.version import __version__

Schema = dict[str, Any]

_REFS = "#/components/schemas/{model}"

#: What every operation may answer, whatever its handler: the hub's rule for headers runs
#: before any handler (hub.web.request_headers), Expect included (aiohttp's own answer to an
#: unknown expectation would quote the value).
_UNREADABLE = (
    "a header the hub reads whose value is not printable ASCII, `Expect` included (the "
    "message names the header)"
)
_UNKNOWN_EXPECTATION = error(
    "An `Expect` header asking for anything but `100-continue` (the message names `Expect`)"
)
#: Whatever reads Redis may meet data the hub did not write (docs/operations.md, "Damaged
#: data in Redis"): every operation with a storage 503 has this 500 too.
_DAMAGED = error(
    "Stored data is damaged: Redis holds, under a key this request needs, what the hub did "
    "not write (the message names it). Not an outage; retrying does not help."
)


@functools.cache
def _schemas() -> dict[str, Schema]:
    """Every model's JSON schema, by its name, with ``$ref``s between them: answers as they
    are serialized, request bodies as they are validated."""
    inputs = [
        ((model.__name__, mode), mode, TypeAdapter(model))
        for models, mode in (
            (api_bodies.RESPONSE_MODELS, "serialization"),
            (api_bodies.REQUEST_MODELS, "validation"),
        )
        for model in models
    ]
    _, definitions = TypeAdapter.json_schemas(inputs, ref_template=_REFS)  # type: ignore[arg-type]
    schemas: dict[str, Schema] = definitions.get("$defs", {})
    return schemas


def _ref(model: type[Any]) -> Schema:
    name = model.__name__
    if name not in _schemas():
        raise LookupError(f"{name} is not among api_bodies' RESPONSE_MODELS or REQUEST_MODELS")
    return {"$ref": _REFS.format(model=name)}


def _answer(answer: Answer) -> Schema:
    out: Schema = {"description": answer.description}
    content = {media: {"schema": schema} for media, schema in answer.media.items()}
    if answer.model is not None:
        content[JSON] = {"schema": _ref(answer.model)}
    if content:
        out["content"] = content
    if answer.headers:
        out["headers"] = dict(answer.headers)
    return out


def _request_body(body: RequestBody) -> Schema:
    content = {media: {"schema": schema} for media, schema in body.media.items()}
    if body.model is not None:
        content[JSON] = {"schema": _ref(body.model)}
        if body.form:
            content[FORM] = {"schema": _ref(body.model)}
    out: Schema = {"required": True, "content": content}
    if body.description:
        out["description"] = body.description
    return out


def _answers(route: Route) -> dict[str, Any]:
    answers = dict(route.answers)
    own = answers.get("400")
    if own is None:
        answers["400"] = error(_UNREADABLE[0].upper() + _UNREADABLE[1:])
    else:
        answers["400"] = dataclasses.replace(
            own, description=f"{own.description}; or {_UNREADABLE}"
        )
    answers["417"] = _UNKNOWN_EXPECTATION
    if "503" in answers:
        answers.setdefault("500", _DAMAGED)
    return {status: _answer(answers[status]) for status in sorted(answers)}


def _operation(route: Route) -> Schema:
    out: Schema = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": list(route.tags),
    }
    if route.description:
        out["description"] = route.description
    if route.optional_bearer:
        out["security"] = [{}, {"bearer": []}]
    if route.parameters:
        out["parameters"] = [dict(p) for p in route.parameters]
    if route.body is not None:
        out["requestBody"] = _request_body(route.body)
    out["responses"] = _answers(route)
    return out


def spec(server_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document of a hub whose base URL is ``server_url``."""
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method] = _operation(route)
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
                    "schema": {"type": "string", "pattern": f"^{TOPIC_NAME.pattern}$"},
                }
            },
            "schemas": copy.deepcopy(_schemas()),
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

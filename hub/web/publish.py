"""Publishing: a Source POSTs a change notification; its changes are stored, then 202.

``POST /topics/{name}`` names the topic in the path; ``POST /`` names it in the
``Link: <topic>; rel="self"`` header (WebSub's publish style). The answer comes only after
every change is in Redis: ``{"topic", "accepted", "ids", "replayed"}``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson
from aiohttp import web

from hub.core import metrics
from hub.core.auth import PublisherAuth
from hub.core.exceptions import BadRequest, UnsupportedMediaType
from hub.core.settings import Settings
from hub.core.topics import check_name, parse_link_header
from hub.live.ingest import Ingest
from hub.live.parsing import DocumentParser
from hub.web.access import request_urls
from hub.web.listener import read_body


@dataclass(frozen=True, slots=True)
class Publishing:
    """What a publish needs: who may publish, the parser, and the one way into the store
    and the live feeds."""

    settings: Settings
    auth: PublisherAuth
    parser: DocumentParser
    ingest: Ingest


PUBLISHING = web.AppKey("publishing", Publishing)

_XML_TYPES = {"application/xml", "text/xml", "application/octet-stream", ""}
_MAX_IDEMPOTENCY_KEY = 200


def _check_content_type(request: web.Request) -> None:
    ctype = request.content_type if "Content-Type" in request.headers else ""
    if ctype in _XML_TYPES or ctype.endswith("+xml"):
        return
    raise UnsupportedMediaType(
        f"a change notification must be XML (application/xml), got Content-Type {ctype!r}"
    )


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    key = key.strip()
    if not key or len(key) > _MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise BadRequest(f"Idempotency-Key must be 1-{_MAX_IDEMPOTENCY_KEY} printable characters")
    return key


#: Copied by each response: the same header as ``content_type=`` gives, without parsing it.
_JSON = {"Content-Type": "application/json"}


def accepted(answer: dict[str, object]) -> web.Response:
    """The 202 every publish (and publish ping) answers with."""
    return web.Response(body=orjson.dumps(answer), status=202, headers=_JSON)


async def publish(request: web.Request, topic: str) -> web.Response:
    """Validate, authorise and store one notification for ``topic``."""
    ctx = request.app[PUBLISHING]
    ctx.auth.check(topic, request.headers.get("Authorization"))
    _check_content_type(request)
    idempotency_key = _idempotency_key(request)
    body = await read_body(request, ctx.settings)
    changes = await ctx.parser.packed(body)
    # The digest only matters to tell a retry from a reuse of its Idempotency-Key.
    digest = hashlib.sha256(body).hexdigest() if idempotency_key is not None else ""
    stored = await ctx.ingest.append(topic, changes, digest=digest, idempotency_key=idempotency_key)
    metrics.published(len(body), len(stored.ids), stored.replayed)
    return accepted(
        {
            "topic": topic,
            "accepted": len(stored.ids),
            "ids": stored.ids,
            "replayed": stored.replayed,
        }
    )


async def publish_to_named_topic(request: web.Request) -> web.Response:
    return await publish(request, check_name(request.match_info["name"]))


async def publish_to_self_link(request: web.Request) -> web.Response:
    """``POST /`` with XML: the topic comes from ``Link: <...>; rel="self"``."""
    links = parse_link_header(request.headers.getall("Link", []))
    self_url = links.get("self")
    if not self_url:
        raise BadRequest('publishing to the hub URL needs a Link: <topic-url>; rel="self" header')
    return await publish(request, request_urls(request).name_from_url(self_url))

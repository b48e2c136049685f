"""Publishing: a Source POSTs a change notification; its changes are stored, then 202.

``POST /topics/{name}`` names the topic in the path; ``POST /`` names it in the
``Link: <topic>; rel="self"`` header (WebSub's publish style). The answer comes only after
every change is in Redis: ``{"topic", "accepted", "ids", "replayed"}``. The policy is
:mod:`hub.live.publication`'s, shared with the lean path (:mod:`hub.web.lean_publish`). A
plain WebSub topic's publish is its content, of any type (a fat ping,
:mod:`hub.live.content_publication`).
"""

from __future__ import annotations

import orjson
from aiohttp import web

from hub.core.api_bodies import PublishAccepted
from hub.core.exceptions import BadRequest
from hub.core.topics import check_name, parse_link_header
from hub.live.publication import Publishing, idempotency_key
from hub.web.access import check_own_site, request_urls
from hub.web.request_body import read_body

__all__ = ["PUBLISHING", "Publishing", "accepted", "publish"]

PUBLISHING = web.AppKey("publishing", Publishing)

#: Copied by each response: the same header as ``content_type=`` gives, without parsing it.
_JSON = {"Content-Type": "application/json"}


def accepted(answer: PublishAccepted) -> web.Response:
    """The 202 every publish (and publish ping) answers with (its keys checked by mypy)."""
    return web.Response(body=orjson.dumps(answer), status=202, headers=_JSON)


async def publish(request: web.Request, topic: str, topic_url: str | None = None) -> web.Response:
    """Validate, authorise and store one notification for ``topic`` (whose URL is
    ``topic_url``, by default this hub's ``/topics/{topic}``); or, for a plain WebSub topic,
    its content."""
    ctx = request.app[PUBLISHING]
    if ctx.auth.open:  # anyone who reaches it may publish: not another site's page
        check_own_site(request)
    headers = request.headers
    topic_url = topic_url or request_urls(request).topic(topic)
    if ctx.contents is not None and ctx.plain(topic, topic_url):
        ctx.auth.check(topic, headers.get("Authorization"))
        key = idempotency_key(headers.get("Idempotency-Key"))
        body = await read_body(request, ctx.settings)
        ctype = headers.get("Content-Type")
        return accepted(await ctx.contents.post(topic, topic_url, body, ctype, key))
    ctype = request.content_type if "Content-Type" in headers else ""
    key = ctx.admit(topic, headers.get("Authorization"), ctype, headers.get("Idempotency-Key"))
    body = await read_body(request, ctx.settings)
    changes = await ctx.parser.packed(body)
    return accepted(await ctx.store(topic, body, changes, key))


async def publish_to_named_topic(request: web.Request) -> web.Response:
    return await publish(request, check_name(request.match_info["name"]))


async def publish_to_self_link(request: web.Request) -> web.Response:
    """``POST /`` with XML: the topic comes from ``Link: <...>; rel="self"``."""
    links = parse_link_header(request.headers.getall("Link", []))
    self_url = links.get("self")
    if not self_url:
        raise BadRequest('publishing to the hub URL needs a Link: <topic-url>; rel="self" header')
    return await publish(request, request_urls(request).name_from_url(self_url), self_url)

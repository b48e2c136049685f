"""``GET /topics/{name}`` of a plain WebSub topic of this hub: its latest content, as published.

WebSub discovery fetches the topic URL, and a subscriber (websub.rocks' among them) compares
what it gets with what is delivered: the same bytes and the same ``Content-Type``, byte for
byte. So the topic URI of a plain topic (:mod:`hub.core.topic_content`) serves the content
its publisher last POSTed, with that ``Content-Type``, an ``ETag`` (its SHA-256) and the
discovery ``Link`` headers (``rel=hub``, ``rel=self``). Every other topic URI, and a plain
topic's before its first content, is the open Change List page (:mod:`hub.web.documents`);
the topic's other documents are served as for any topic.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from hub.core.topic_content import PlainTopics
from hub.core.topics import check_name
from hub.store.topic_contents import ContentStore
from hub.web import documents
from hub.web.access import check_read, link_urls


@dataclass(frozen=True, slots=True)
class ServingContent:
    """Which topics are plain, and where their content is."""

    plain: PlainTopics
    contents: ContentStore


SERVING_CONTENT = web.AppKey("serving_content", ServingContent)


async def topic_uri(request: web.Request) -> web.StreamResponse:
    """A plain topic's content, else the open Change List page."""
    ctx = request.app[SERVING_CONTENT]
    if ctx.plain:
        name = check_name(request.match_info["name"])
        u = link_urls(request)
        if ctx.plain.covers(name, u.topic(name)):
            check_read(request, name)
            content = await ctx.contents.get(name)
            if content is not None:
                tag = f'"{content.digest}"'
                headers = {
                    "Content-Type": content.content_type,
                    "Link": u.links(u.topic(name)),
                    "ETag": tag,
                    "Cache-Control": "no-cache",
                }
                if tag in request.headers.get("If-None-Match", ""):
                    return web.Response(status=304, headers=headers)
                return web.Response(body=content.body, headers=headers)
    return await documents.topic_uri(request)

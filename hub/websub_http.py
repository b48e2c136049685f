"""``POST /``: the WebSub hub URL (subscribe, unsubscribe, publish ping) or an XML publish."""

from __future__ import annotations

from aiohttp import web

from . import ingest
from .exceptions import BadRequest

_FORM = "application/x-www-form-urlencoded"


def setup(app: web.Application) -> None:
    """Attach the subscription machinery (filled in by ``hub.subscriptions``)."""


async def hub_endpoint(request: web.Request) -> web.StreamResponse:
    if request.content_type == _FORM:
        raise BadRequest("WebSub subscriptions are not implemented yet")
    return await ingest.publish_to_self_link(request)

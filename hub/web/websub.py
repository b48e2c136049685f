"""``POST /``: the WebSub hub URL (subscribe, unsubscribe, publish ping) or an XML publish.

A publish ping (``hub.mode=publish`` with ``hub.url`` or ``hub.topic``) is for a Source that
cannot POST its notifications: the hub fetches the topic URL while the pinger waits and
stores the changes it has not stored from earlier pings. The pinger learns the outcome:
``202`` with the ids stored (maybe none), ``4xx`` for a URL or document the hub will not
take, ``502`` when the fetch fails. Fetching obeys the same address rules as callbacks and
the same size limit as a publish. A topic URI of this hub has nothing to fetch (its
notifications are POSTed to it); a ping for one is acknowledged and stores nothing. A ping
for a plain WebSub topic fetches its content, of any type
(:meth:`hub.live.content_publication.ContentPublishing.ping`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from aiohttp import web

from hub.core import metrics, websub
from hub.core.access import given_token
from hub.core.auth import PublisherAuth
from hub.core.events import format_id
from hub.core.exceptions import BadRequest, Forbidden, Unauthorized
from hub.core.ping_budgets import PingBudgets
from hub.core.settings import Settings
from hub.live.content_publication import ContentPublishing
from hub.live.delivery import DeliveryService
from hub.live.http_client import HttpClient
from hub.live.ingest import Ingest
from hub.live.parsing import DocumentParser
from hub.web.access import check_own_site, client_address, read_grant, request_urls
from hub.web.publish import accepted, publish_to_self_link
from hub.web.request_body import read_form
from hub.web.streams import check_since


@dataclass(frozen=True, slots=True)
class Subscribing:
    """What WebSub requests need: delivery (verification), the outgoing client (address
    checks, publish-ping fetches), and for publish pings the parser and the ingest."""

    settings: Settings
    auth: PublisherAuth
    delivery: DeliveryService
    client: HttpClient
    parser: DocumentParser
    ingest: Ingest
    #: Publish pings' budgets (None: no limit).
    pings: PingBudgets | None = None
    #: Plain WebSub topics' pings: their content fetched (None: no such topics declared).
    contents: ContentPublishing | None = None


def ping_limit(settings: Settings) -> PingBudgets:
    """The publish-ping budgets ``settings`` ask for."""
    return PingBudgets(settings)


SUBSCRIBING = web.AppKey("subscribing", Subscribing)

_FORM = "application/x-www-form-urlencoded"
_MAX_FORM_BYTES = 16 * 1024


async def hub_endpoint(request: web.Request) -> web.StreamResponse:
    if request.content_type == _FORM:
        return await _websub_request(request)
    return await publish_to_self_link(request)


async def _websub_request(request: web.Request) -> web.Response:
    if (request.content_length or 0) > _MAX_FORM_BYTES:
        raise BadRequest(f"a WebSub request body must be under {_MAX_FORM_BYTES} bytes")
    ctx = request.app[SUBSCRIBING]
    if ctx.auth.open:  # anyone who reaches it may (un)subscribe: not another site's page
        check_own_site(request)
    settings = ctx.settings
    fields = await read_form(request, settings, limit=_MAX_FORM_BYTES)
    form = dict(fields)  # one value per name, the last (as the WebSub parameters are read)
    service, client = ctx.delivery, ctx.client
    try:
        parsed = websub.parse_request(
            form,
            urls=request_urls(request),
            lease_default=settings.lease_seconds_default,
            lease_min=settings.lease_seconds_min,
            lease_max=settings.lease_seconds_max,
            # The one parameter that repeats.
            prefixes=[v for k, v in fields if k == "hub.filter.prefix"],
        )
    except websub.TopicDenied as exc:
        await client.check_address(exc.callback)
        service.deny(exc.callback, exc.topic_url, exc.message)
        return web.Response(status=202, text=f"denied: {exc.message}\n")
    if isinstance(parsed, websub.PublishPing):
        return await _publish_ping(request, parsed)
    if parsed.mode is websub.Mode.SUBSCRIBE:
        # A lease no longer than the read token it was made with (hub.lease_seconds says so),
        # and the token kept: deliveries stop if it is revoked.
        grant = read_grant(request, parsed.topic)
        parsed = websub.within_grant(parsed, grant.ends_at, grant.credential)
    await client.check_address(parsed.callback)
    if parsed.since is not None and parsed.mode is websub.Mode.SUBSCRIBE:
        # An event id, or a time: the id its events come after becomes the cursor.
        start = await check_since(request, parsed.topic, parsed.since, "hub.since")
        parsed = replace(parsed, since=format_id(start))
    await service.request(parsed)
    return web.Response(
        status=202,
        text=f"{parsed.mode} request for {parsed.topic_url} accepted; verifying intent\n",
    )


async def _publish_ping(request: web.Request, ping: websub.PublishPing) -> web.Response:
    ctx = request.app[SUBSCRIBING]
    urls = request_urls(request)
    topic = urls.name_from_url(ping.url)
    authorization = request.headers.get("Authorization")
    # Counted once the token is checked: a refused ping spends the refusals' budget of its
    # address, never an authorised publisher's.
    try:
        ctx.auth.check(topic, authorization)
    except (Unauthorized, Forbidden):
        if ctx.pings is not None:
            ctx.pings.refused(client_address(request), time.monotonic())
        raise
    if ctx.pings is not None:
        token = None if ctx.auth.open else given_token(authorization)
        ctx.pings.granted(client_address(request), token, time.monotonic())
    if urls.is_own_topic(ping.url):
        note = "a topic of this hub: POST its notifications to it"
        return accepted({"topic": topic, "accepted": 0, "ids": [], "note": note})
    client = ctx.client
    await client.check_address(ping.url, what="hub.url")
    if ctx.contents is not None and ctx.contents.covers(topic, ping.url):
        return accepted(await ctx.contents.ping(topic, ping.url))
    changes = await ctx.parser.changes(await client.fetch_document(ping.url))
    ids = await ctx.ingest.append_unseen(topic, changes)
    metrics.CHANGES_ACCEPTED.inc(len(ids))
    return accepted({"topic": topic, "accepted": len(ids), "ids": ids, "fetched": len(changes)})

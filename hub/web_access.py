"""Read access and request identity in the web layer: private topics, trusted proxies.

:func:`check_read` guards everything that reveals a topic's changes (documents, streams,
WebSub subscriptions); the rules are :class:`hub.access.ReadAccess`'s. WebSocket and SSE
clients may pass the token as ``?access_token=`` (browsers cannot set headers on them).
Responses about a private topic are marked ``Cache-Control: private`` so no shared cache
keeps them. :func:`request_urls` is the hub's URL map as one request sees it: the public
base, the aliases, and the base a trusted proxy names for this request.
"""

from __future__ import annotations

import ipaddress

from aiohttp import web

from .forwarding import forwarded_base
from .topics import HubUrls
from .web_state import OPERATORS, READERS, TRUSTED_PEERS, URLS

#: Request key: the response is about a private topic.
_PRIVATE = web.RequestKey("private", bool)


def _authorization(request: web.Request, *, query_token: bool) -> str | None:
    header = request.headers.get("Authorization")
    if header is None and query_token and "access_token" in request.query:
        return "Bearer " + request.query["access_token"]
    return header


def check_read(request: web.Request, topic: str, *, query_token: bool = False) -> None:
    """401/403 unless the request may read ``topic``; marks private answers uncacheable."""
    readers = request.app[READERS]
    if readers.is_open(topic):
        return
    readers.check(topic, _authorization(request, query_token=query_token))
    request[_PRIVATE] = True


def readable(request: web.Request, topics: list[str]) -> list[str]:
    """The ``topics`` this request may read (for listings: no error for the others)."""
    readers = request.app[READERS]
    authorization = request.headers.get("Authorization")
    shown = [t for t in topics if readers.readable(t, authorization)]
    if any(not readers.is_open(t) for t in shown):
        request[_PRIVATE] = True
    return shown


async def private_cache_control(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: a private topic's documents are for their reader only."""
    if request.get(_PRIVATE):
        response.headers["Cache-Control"] = "private, no-cache"
        vary = response.headers.get("Vary")
        response.headers["Vary"] = f"{vary}, Authorization" if vary else "Authorization"


def _via_trusted_proxy(request: web.Request) -> bool:
    peers = request.app[TRUSTED_PEERS]
    return bool(peers) and peers.trusts(request.remote)


def request_urls(request: web.Request) -> HubUrls:
    """The URL map for this request: also recognises the base a trusted proxy names."""
    urls = request.app[URLS]
    if not _via_trusted_proxy(request):
        return urls
    base = forwarded_base(request.headers, request.scheme, urls.base)
    return urls if base is None else urls.with_alias(base)


def is_local_client(request: web.Request) -> bool:
    """A loopback peer that is not a trusted proxy speaking for someone else."""
    try:
        loopback = ipaddress.ip_address((request.remote or "").split("%", 1)[0]).is_loopback
    except ValueError:
        return False
    return loopback and not _via_trusted_proxy(request)


def check_operator(request: web.Request) -> None:
    """401/403 unless the request may use the admin API."""
    request.app[OPERATORS].check(
        request.headers.get("Authorization"), loopback=is_local_client(request)
    )

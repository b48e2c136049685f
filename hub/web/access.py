"""Read access and request identity in the web layer: private topics, trusted proxies.

:func:`check_read` guards everything that reveals a topic's changes (documents, streams,
WebSub subscriptions); the rules are :class:`hub.core.access.ReadAccess`'s. WebSocket and SSE
clients may pass the token as ``?access_token=`` (browsers cannot set headers on them).
Responses about a private topic are marked ``Cache-Control: private`` so no shared cache
keeps them. :func:`request_urls` is the hub's URL map as one request sees it: the public
base, the aliases, and the base a trusted proxy names for this request; :func:`link_urls`
is the map its links are built from. :func:`check_own_site` keeps other sites' pages from
what a hub without tokens lets anyone do (the admin API's loopback exemption, publishing,
subscribing): the loopback exemption is for this machine's own tools.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from hub.core.access import OPEN, OperatorAccess, ReadAccess, ReadGrant
from hub.core.exceptions import Forbidden, Unauthorized
from hub.core.forwarding import TrustedPeers, forwarded_base, forwarded_client
from hub.core.own_site import OwnSite
from hub.core.topics import HubUrls


@dataclass(frozen=True, slots=True)
class Access:
    """Who may read, who may operate, whose forwarded headers count: every handler's checks."""

    urls: HubUrls
    readers: ReadAccess
    operators: OperatorAccess
    trusted_peers: TrustedPeers
    #: The hub's own names and origins (:func:`check_own_site`).
    own_site: OwnSite
    #: ``alias_links``: a direct client's documents link under the alias it addressed.
    alias_links: bool = False


ACCESS = web.AppKey("access", Access)

#: Request key: the response is about a private topic.
_PRIVATE = web.RequestKey("private", bool)


def _authorization(request: web.Request, *, query_token: bool) -> str | None:
    header = request.headers.get("Authorization")
    if header is None and query_token and "access_token" in request.query:
        return "Bearer " + request.query["access_token"]
    return header


def check_read(request: web.Request, topic: str, *, query_token: bool = False) -> float | None:
    """401/403 unless the request may read ``topic``; marks private answers uncacheable.
    Returns when that access ends (a signed read token's end), None when it does not."""
    return read_grant(request, topic, query_token=query_token).ends_at


def read_grant(request: web.Request, topic: str, *, query_token: bool = False) -> ReadGrant:
    """:func:`check_read`, answering what the request reads with: when that access ends,
    and the token a revocation would name (what a stream or subscription keeps)."""
    readers = request.app[ACCESS].readers
    if readers.is_open(topic):
        return OPEN
    grant = readers.grant(topic, _authorization(request, query_token=query_token))
    request[_PRIVATE] = True
    return grant


def stream_reader(
    request: web.Request, authorization: str | None = None
) -> Callable[[str], ReadGrant | None]:
    """How a stream of several topics reads each topic: with ``authorization`` (default: the
    request's token, header or ``?access_token=``), checked once (401/403 for one that
    reads nothing: a wrong token must not pass for one that reads no private topic yet);
    then each topic gets its grant, or None when the token may not read it (a prefix stream
    leaves it out: a private topic is never streamed, nor named, to a client that may not
    read it)."""
    readers = request.app[ACCESS].readers
    if authorization is None:
        authorization = _authorization(request, query_token=True)
    readers.check_token(authorization)

    def grant_of(topic: str) -> ReadGrant | None:
        if readers.is_open(topic):
            return OPEN
        try:
            grant = readers.grant(topic, authorization)
        except (Unauthorized, Forbidden):
            return None
        request[_PRIVATE] = True
        return grant

    return grant_of


def readable(request: web.Request, topics: list[str]) -> list[str]:
    """The ``topics`` this request may read (for listings: no error for the others)."""
    readers = request.app[ACCESS].readers
    sees = readers.sight(request.headers.get("Authorization"))  # one token check in all
    shown = [t for t in topics if sees(t)]
    if any(not readers.is_open(t) for t in shown):
        request[_PRIVATE] = True
    return shown


def private_cache_control(request: web.Request, response: web.StreamResponse) -> None:
    """Part of the hub's ``on_response_prepare`` (:func:`hub.web.app.response_headers`): a
    private topic's documents are for their reader only."""
    if request.get(_PRIVATE):
        response.headers["Cache-Control"] = "private, no-cache"
        vary = response.headers.get("Vary")
        response.headers["Vary"] = f"{vary}, Authorization" if vary else "Authorization"


def _via_trusted_proxy(request: web.Request) -> bool:
    peers = request.app[ACCESS].trusted_peers
    return bool(peers) and peers.trusts(request.remote)


def request_urls(request: web.Request) -> HubUrls:
    """The URL map for this request: also recognises the base a trusted proxy names."""
    urls = request.app[ACCESS].urls
    if not _via_trusted_proxy(request):
        return urls
    base = forwarded_base(request.headers, request.scheme, urls.base)
    return urls if base is None else urls.with_alias(base)


def link_urls(request: web.Request) -> HubUrls:
    """The URL map to build this request's links from: with ``alias_links``, the alias a
    direct client's ``Host`` names.

    Documents link to other documents; a client must be able to follow them from where it
    stands (see :meth:`hub.core.topics.HubUrls.addressed_as`). A proxied request always
    gets the public base: the ``Host`` a proxy sends is often its upstream's own name.
    """
    access = request.app[ACCESS]
    urls, host = access.urls, request.headers.get("Host")
    if not access.alias_links or not urls.aliases or not host or _proxied(request):
        return urls
    return urls.addressed_as(f"{request.scheme}://{host.lower()}")


def client_address(request: web.Request) -> str:
    """Who sent the request, for rate limits: the peer, or the client a trusted proxy names."""
    peer = request.remote or ""
    if _via_trusted_proxy(request):
        return forwarded_client(request.headers) or peer
    return peer


#: Headers a reverse proxy adds: a request carrying one came through a proxy.
_PROXY_HEADERS = (
    "Forwarded",
    "X-Forwarded-For",
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
    "X-Real-IP",
)


def _proxied(request: web.Request) -> bool:
    headers = request.headers
    return _via_trusted_proxy(request) or any(h in headers for h in _PROXY_HEADERS)


def is_local_client(request: web.Request) -> bool:
    """A direct connection from this machine: a loopback peer that no proxy speaks for.

    Never local: a peer that is a trusted proxy (``forwarded_allow_ips``: the hub cannot
    tell its own requests from those it forwards), nor a request with a proxy's headers,
    trusted or not: a reverse proxy on this machine makes every client look like
    127.0.0.1, and what it says of the client (``X-Forwarded-For``) proves nothing.
    """
    try:
        loopback = ipaddress.ip_address((request.remote or "").split("%", 1)[0]).is_loopback
    except ValueError:
        return False
    if not loopback or _via_trusted_proxy(request):
        return False
    return not any(name in request.headers for name in _PROXY_HEADERS)


def check_own_site(request: web.Request) -> None:
    """403 naming the header unless the request is no other site's page's (DNS rebinding,
    a cross-site form): for what a hub without tokens lets anyone do who reaches it
    (:mod:`hub.core.own_site`)."""
    access, headers = request.app[ACCESS], request.headers
    proxied = _via_trusted_proxy(request)
    access.own_site.check(
        hosts=None if proxied else headers.getall("Host", []),
        origins=headers.getall("Origin", []),
        fetch_sites=headers.getall("Sec-Fetch-Site", []),
        scheme=request.scheme,
        forwarded=forwarded_base(headers, request.scheme, access.urls.base) if proxied else None,
    )


def check_operator(request: web.Request) -> None:
    """401/403 unless the request may use the admin API."""
    operators = request.app[ACCESS].operators
    operators.check(request.headers.get("Authorization"), loopback=is_local_client(request))
    if operators.token is None:  # the loopback exemption: this machine's tools, not pages
        check_own_site(request)


def is_admin(request: web.Request) -> bool:
    """The request carries the admin token (one is configured)."""
    return request.app[ACCESS].operators.admits(request.headers.get("Authorization"))


def sight(request: web.Request) -> Callable[[str], bool]:
    """Which topics this request may see named in hub-wide views: every one with the admin
    token, else those its token may read (:meth:`hub.core.access.ReadAccess.sight`)."""
    if is_admin(request):
        return lambda _topic: True
    return request.app[ACCESS].readers.sight(request.headers.get("Authorization"))

"""Which browser requests a hub without tokens takes: its own pages', never another site's.

A hub without tokens (the default loopback bind, or ``--open``) lets whoever reaches it
publish and subscribe, and, without an admin token, lets this machine's own tools use the
admin API. A browser on this machine reaches it too, on behalf of any page it shows: a page
on another site can post a form to it (cross-site request forgery), and a page whose DNS
name first points at its server and then at 127.0.0.1 (DNS rebinding) can even read the
answers, since to the browser both are the page's own origin. Such a request carries no
credential the hub could tell apart from its own tools', but it carries what the browser
says of it, and a browser always says it:

- ``Host``: the name the page used. A rebinding page's is its own DNS name. The hub takes
  its own names only: ``localhost``, an IP address (no DNS answer can move an address),
  the listen address, the host of the public base URL and of every alias URL
  (``--alias-url``). The port is not compared: no page decides what those names mean, and
  a tunnel (``ssh -L 9000:localhost:8080``) changes it.
- ``Origin``: the page that sent the request (every POST, every cross-origin fetch). It
  must be the hub's own origin: ``scheme://Host`` of the request itself, the public base
  URL or an alias URL (the dashboard's fetches), or an origin ``RSHUB_CORS_ORIGINS`` names
  (its ``*`` names none: a wildcard lets pages read, never act without a token).
- ``Sec-Fetch-Site: cross-site``: a request another site's page started (a link, an image,
  a navigation), sent even where ``Origin`` is not: refused unless an ``Origin`` says the
  page is one of the above.

A request with none of these headers is no browser's (curl, the ``rshub`` CLI, a script)
and goes on. For a request a trusted proxy forwards, the proxy chose by its own server
names which requests reach the hub, and ``Host`` is its upstream's: the caller leaves the
``Host`` out, and names the base the proxy forwarded (an own origin for that request).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from hub.core.exceptions import Forbidden
from hub.core.topics import DEFAULT_PORTS, url_origin

#: ``host[:port]``: a bracketed IPv6 address or a name/IPv4 of URL host characters.
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9._~!$&'()*+,;=%-]+)(?::([0-9]{0,5}))?")
#: ``scheme://host[:port]``, as browsers send an ``Origin``.
_ORIGIN = re.compile(r"(https?)://" + _HOST.pattern)

#: (scheme, host, port) of an origin, host in lower case and without brackets.
Origin = tuple[str, str, int]

_NOT_OURS = (
    "a hub without tokens takes admin and state-changing requests only from this "
    "machine's own tools and the hub's own pages"
)


def _shown(value: str) -> str:
    """A header value as quoted in a message: printable ASCII, bounded."""
    return ascii(value[:100])


def _name(host: str) -> str:
    """``host`` unbracketed and without one trailing dot (``localhost.`` is localhost)."""
    host = host[1:-1] if host.startswith("[") else host
    return host[:-1] if host.endswith(".") else host


def host_of(value: str) -> tuple[str, int | None] | None:
    """The name and port a ``Host`` header value says (lower case), None if it is none."""
    match = _HOST.fullmatch(value.strip().lower())
    if match is None:
        return None
    port = match.group(2)
    if port is not None and (not port or int(port) > 65535):
        return None
    return _name(match.group(1)), int(port) if port else None


def origin_of(value: str) -> Origin | None:
    """``scheme://host[:port]`` as compared (port defaulted), None if it is no origin."""
    match = _ORIGIN.fullmatch(value.strip().lower())
    if match is None:
        return None
    scheme, host, port = match.groups()
    if port is not None and (not port or int(port) > 65535):
        return None
    return scheme, _name(host), int(port) if port else DEFAULT_PORTS[scheme]


def _base_origin(base: str) -> Origin | None:
    origin = url_origin(urlsplit(base))
    if origin is None:
        return None
    scheme, host, port = origin
    return scheme, _name(host), port


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class OwnSite:
    """The hub's own names and origins, and the check of one request's browser headers.

    ``bases``: the public base URL and the alias URLs; ``listen_host``: the address the
    hub listens on; ``cors_origins``: ``RSHUB_CORS_ORIGINS`` (only the origins it names).
    """

    def __init__(
        self, bases: Iterable[str], *, listen_host: str = "", cors_origins: Iterable[str] = ()
    ) -> None:
        origins = {o for o in map(_base_origin, bases) if o is not None}
        self.origins = frozenset(origins)
        names = {"localhost", _name(listen_host.lower())} | {o[1] for o in origins}
        self.names = frozenset(names - {""})
        self.cors = frozenset(o for o in map(origin_of, cors_origins) if o is not None)

    def names_host(self, value: str) -> bool:
        """``value`` (a ``Host`` header) names this hub: one of its names, or an address."""
        host = host_of(value)
        return host is not None and (host[0] in self.names or _is_address(host[0]))

    def check(
        self,
        *,
        hosts: list[str] | None,
        origins: list[str],
        fetch_sites: list[str],
        scheme: str,
        forwarded: str | None = None,
    ) -> None:
        """403 naming the header unless a request with these headers is no other site's.

        ``hosts``: its ``Host`` values (None: not to be checked, the request came through
        a trusted proxy); ``origins`` and ``fetch_sites``: its ``Origin`` and
        ``Sec-Fetch-Site`` values; ``scheme``: the scheme it reached the hub with;
        ``forwarded``: the base URL a trusted proxy says the client used.
        """
        own = set(self.origins)
        for value in hosts or ():
            if not self.names_host(value):
                raise Forbidden(
                    f"Host {_shown(value)} does not name this hub: {_NOT_OURS}. A name of "
                    "this hub that is none of localhost, an IP address, the listen address "
                    "or the public URL's host is added with --alias-url (RSHUB_ALIAS_URLS)",
                    header="Host",
                )
            host = host_of(value)
            assert host is not None
            if scheme in DEFAULT_PORTS:
                own.add((scheme, host[0], host[1] or DEFAULT_PORTS[scheme]))
        if forwarded is not None and (origin := _base_origin(forwarded)) is not None:
            own.add(origin)
        for value in origins:
            origin = origin_of(value)
            if origin is None or (origin not in own and origin not in self.cors):
                raise Forbidden(
                    f"Origin {_shown(value)} is not this hub's: {_NOT_OURS}, never from "
                    "another site's page. An origin whose pages may is listed in "
                    "RSHUB_CORS_ORIGINS (or give the hub tokens)",
                    header="Origin",
                )
        # With an Origin, the browser said which page it is, and that page passed.
        if not origins and any(v.strip().lower() == "cross-site" for v in fetch_sites):
            raise Forbidden(
                f"Sec-Fetch-Site: cross-site: {_NOT_OURS}, never a request another site's "
                "page started. An origin whose pages may is listed in RSHUB_CORS_ORIGINS",
                header="Sec-Fetch-Site",
            )

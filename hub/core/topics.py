"""Topic names, the hub's URL map and its ``Link`` headers: plain data, no I/O.

Every URL the hub gives out (``/topics/...`` documents, the hub URL, the Source
Description) is built by :class:`HubUrls`, from the configured public base URL, so a hub
behind a proxy advertises the address its clients see. A topic URL is recognised under the
public base and under every alias base (other names of the same hub, such as
``http://hub:8080`` inside a compose network), so a topic is the same topic whichever host
name a client used.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from urllib.parse import SplitResult, urlsplit

from hub.core.exceptions import BadRequest, UnknownHubName
from rsclient.topic_names import TOPIC_NAME as TOPIC_NAME
from rsclient.topic_names import topic_name_problem

WELL_KNOWN = "/.well-known/resourcesync"


def check_name(name: str) -> str:
    """``name`` if it is a topic name (the clients check the same rule before sending)."""
    problem = topic_name_problem(name)
    if problem is not None:
        raise BadRequest(problem)
    return name


DEFAULT_PORTS = {"http": 80, "https": 443}

#: A base URL as compared: scheme, host (lower case) and port (defaulted), path prefix.
Origin = tuple[str, str, int, str]


def url_origin(parts: SplitResult) -> tuple[str, str, int] | None:
    """An http(s) URL's scheme, host (lower case, unbracketed) and port (defaulted); None
    for another scheme, no host or a port that is no number in range."""
    try:
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def _origin(parts: SplitResult, path: str) -> Origin | None:
    origin = url_origin(parts)
    return None if origin is None else (*origin, path)


def base_origin(base: str) -> Origin | None:
    """How a base URL (``scheme://host[:port][/prefix]``) is compared; None if it is not one."""
    parts = urlsplit(base.rstrip("/"))
    return _origin(parts, parts.path.rstrip("/"))


def loopback_aliases(host: str, port: int) -> tuple[str, ...]:
    """The names of a hub bound to loopback on ``port``: ``localhost``, ``127.0.0.1`` and
    ``[::1]`` reach the same socket, so they name the same hub (and its topics)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback or not port:
        return ()
    return tuple(f"http://{name}:{port}" for name in ("localhost", "127.0.0.1", "[::1]"))


@dataclass(frozen=True, slots=True)
class HubUrls:
    """Where everything of the hub lives, as clients see it.

    ``base`` is the public URL every link is built from; ``aliases`` are further base URLs
    under which topic URLs are recognised as this hub's (never used to build links).
    """

    base: str
    aliases: tuple[str, ...] = ()

    def addressed_as(self, base: str) -> HubUrls:
        """These URLs with ``base`` as the one links are built from, when it is an alias.

        A client that reached the hub under an alias (from the host, through a compose
        file's published port, while the base is the name other containers use) can only
        follow links under that alias. Anything else, such as an arbitrary ``Host``
        header, gets the public base: links never name a host the operator did not list.
        """
        if base == self.base or base not in self.aliases:
            return self
        return _rebased(self, base)

    def with_alias(self, base: str) -> HubUrls:
        """These URLs, also recognising topic URLs under ``base`` (one request's view)."""
        return self if base in self.aliases else replace(self, aliases=(*self.aliases, base))

    def _own_name(self, url: str) -> str | None:
        """The rest of ``url`` after ``/topics/`` when it is under one of our bases."""
        if url.startswith(self.topics_prefix):
            return url[len(self.topics_prefix) :]
        try:
            parts = urlsplit(url)
        except ValueError:  # not a URL at all: not one of ours
            return None
        for base in (self.base, *self.aliases):
            origin = base_origin(base)
            try:
                if origin is None or _origin(parts, origin[3]) != origin:
                    continue
            except ValueError:  # a port out of range, say
                return None
            prefix = origin[3] + "/topics/"
            rest = url.split("://", 1)[1].partition("/")[2]
            if ("/" + rest).startswith(prefix):
                return ("/" + rest)[len(prefix) :]
        return None

    def _hub_path(self, path: str) -> bool:
        """Whether ``path`` is where one of our bases keeps its topics (``/topics/{name}``)."""
        for base in (self.base, *self.aliases):
            origin = base_origin(base)
            rest = path.removeprefix(origin[3] if origin else "")
            if rest.startswith("/topics/") and TOPIC_NAME.fullmatch(rest[len("/topics/") :]):
                return True
        return False

    @property
    def hub(self) -> str:
        """The WebSub hub URL."""
        return self.base + "/"

    @property
    def source_description(self) -> str:
        return self.base + WELL_KNOWN

    @property
    def topics_prefix(self) -> str:
        return self.base + "/topics/"

    def topic(self, name: str) -> str:
        return self.topics_prefix + name

    def capabilitylist(self, name: str) -> str:
        return self.topic(name) + "/capabilitylist.xml"

    def changelist_index(self, name: str) -> str:
        return self.topic(name) + "/changelist.xml"

    def changelist_page(self, name: str, n: int) -> str:
        # Zero-padded so that lexical order is page order (resync reads an index's
        # sitemaps in sorted URI order).
        return f"{self.topic(name)}/changelist/{n:08d}.xml"

    def changes(self, name: str) -> str:
        """The latest change of every URI, one Change List (:mod:`hub.core.latest_changes`)."""
        return self.topic(name) + "/changes.xml"

    def changes_lost(self, name: str) -> str:
        """What ``changes.xml``'s marker entry names: answers 410, saying what was lost."""
        return self.topic(name) + "/changes-lost"

    def resourcelist(self, name: str) -> str:
        return self.topic(name) + "/resourcelist.xml"

    def resourcelist_page(self, name: str, snapshot: str, k: int) -> str:
        return f"{self.topic(name)}/resourcelist/{snapshot}-{k:05d}.xml"

    @property
    def tag(self) -> str:
        """A short digest of the base URL, part of every ETag (the URLs are in the bodies)."""
        return hashlib.blake2b(self.base.encode(), digest_size=4).hexdigest()

    def is_own_topic(self, url: str) -> bool:
        """True for a URL under ``/topics/`` of the public base or of an alias."""
        return self._own_name(url) is not None

    def name_from_url(self, url: str) -> str:
        """The topic name behind a topic URI.

        A URI under ``{base}/topics/`` (or an alias's) names its topic directly; any other
        absolute http(s) URI (a Source's own topic URI) gets a stable derived name: its
        host plus a digest.
        """
        own = self._own_name(url)
        if own is not None:
            return check_name(own)
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise BadRequest(f"topic is not a valid URL ({exc}): {url[:200]!r}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadRequest(f"topic must be an absolute http(s) URL, got {url[:200]!r}")
        if self._hub_path(parts.path):
            # Meant for this hub under a name it does not know: a derived topic would
            # silently be another one (and receive nothing).
            known = ", ".join(self.aliases) or "none"
            raise UnknownHubName(
                f"topic {url[:200]!r} is a hub topic URL on a host this hub does not know: "
                f"its topics are under {self.base}/topics/ (--alias-url: {known})"
            )
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        host = re.sub(r"[^A-Za-z0-9.-]", "-", parts.hostname)[:100].strip(".-") or "topic"
        return check_name(f"{host}-{digest}")

    def links(self, topic_url: str) -> str:
        """The WebSub discovery ``Link`` header value for ``topic_url`` (RFC 8288)."""
        return f'<{self.hub}>; rel="hub", <{topic_url}>; rel="self"'


_LINK = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]+)*)")
_PARAM = re.compile(r';\s*([A-Za-z0-9_*-]+)\s*=\s*(?:"([^"]*)"|([^;,\s]+))')


def parse_link_header(values: Iterable[str]) -> dict[str, str]:
    """Map each ``rel`` value of ``Link`` headers to its first target URL."""
    out: dict[str, str] = {}
    for value in values:
        for match in _LINK.finditer(value):
            url, params = match.group(1), match.group(2)
            for pmatch in _PARAM.finditer(params):
                if pmatch.group(1).lower() == "rel":
                    rels = pmatch.group(2) if pmatch.group(2) is not None else pmatch.group(3)
                    for rel in rels.split():
                        out.setdefault(rel.lower(), url.strip())
    return out


@functools.lru_cache(maxsize=64)
def _rebased(urls: HubUrls, base: str) -> HubUrls:
    """``urls`` with ``base`` (one of its aliases) and the public base swapped (memoized: at
    most one per alias, built once, not per request)."""
    others = tuple(b for b in (urls.base, *urls.aliases) if b != base)
    return HubUrls(base, others)

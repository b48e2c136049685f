"""Which URLs and network addresses the hub may send requests to (SSRF rules), as plain data.

A WebSub callback or a publish-ping URL must be an absolute http(s) URL without control
characters or credentials (:func:`check_http_url`). A callback given as an IRI is stored as
the URI it maps to (:func:`as_uri`), so every request line the hub writes is ASCII. The
address a request actually connects to must be public (:func:`refusal`): loopback, private,
link-local, multicast, reserved, unspecified, and the IPv6 forms that embed an IPv4 address
(IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96`` and
6to4 ``2002::/16``) are refused, since each of them can reach an internal IPv4 host. The
check runs on the connected address in :mod:`hub.web_client`, so a name that resolves
differently later (DNS rebinding) is caught.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, quote, urlsplit, urlunsplit

import idna

from .exceptions import BadRequest

MAX_URL_LENGTH = 2048

#: C0 controls, space, DEL and C1 controls: never part of a URL the hub sends a request to.
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_SIXTOFOUR = ipaddress.IPv6Network("2002::/16")


def check_http_url(url: str, what: str) -> SplitResult:
    """``url`` split, or :class:`BadRequest` naming ``what`` and the first rule it breaks."""
    if not url:
        raise BadRequest(f"{what} is required")
    if len(url) > MAX_URL_LENGTH:
        raise BadRequest(f"{what} is longer than {MAX_URL_LENGTH} characters")
    if _CONTROL.search(url) or not url.isprintable():
        raise BadRequest(f"{what} must not contain spaces or control characters, got {url[:200]!r}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port out of range
    except ValueError as exc:
        raise BadRequest(f"{what} is not a valid URL ({exc}): {url[:200]!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"{what} must be an absolute http(s) URL, got {url[:200]!r}")
    if parts.username is not None or parts.password is not None:
        raise BadRequest(f"{what} must not carry credentials")
    return parts


#: What stays as it is in a URI's path, query and fragment: RFC 3986's unreserved and
#: reserved characters and ``%`` (escapes already made).
_URI_SAFE = "!#$%&'()*+,/:;=?@[]~"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def as_uri(url: str, what: str) -> str:
    """``url`` (checked by :func:`check_http_url`) as a URI, RFC 3987 §3.1: the host
    IDNA-encoded (IDNA2008 with UTS #46 mapping), everything else that is not ASCII (or not
    allowed in a URI) percent-encoded from UTF-8. A plain URI comes back unchanged;
    :class:`BadRequest` names the rule an IRI breaks."""
    if _BAD_ESCAPE.search(url):
        raise BadRequest(
            f"{what} has a '%' not followed by two hex digits (RFC 3986 §2.1): {url[:200]!r}"
        )
    parts = urlsplit(url)
    netloc = parts.netloc
    host = parts.hostname or ""
    if not host.isascii():
        try:
            ascii_host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise BadRequest(
                f"{what} host {host[:100]!r} is not a valid internationalized domain name "
                f"(IDNA2008, RFC 5891): {exc}"
            ) from None
        netloc = ascii_host + (f":{parts.port}" if parts.port is not None else "")
    try:
        path, query, fragment = (
            quote(part, safe=_URI_SAFE, errors="strict")
            for part in (parts.path, parts.query, parts.fragment)
        )
    except UnicodeEncodeError:
        raise BadRequest(f"{what} is not valid Unicode (RFC 3987 §3.1 needs UTF-8)") from None
    if (netloc, path, query, fragment) == (parts.netloc, parts.path, parts.query, parts.fragment):
        return url
    return urlunsplit((parts.scheme, netloc, path, query, fragment))


def refusal(address: str) -> str | None:
    """Why the hub must not connect to ``address`` (an IP literal), or ``None`` if it may."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return "an IPv4-mapped IPv6 address"
        if ip in _NAT64 or ip in _NAT64_LOCAL:
            return "a NAT64 address (64:ff9b::/96)"
        if ip in _SIXTOFOUR:
            return "a 6to4 address (2002::/16)"
        if int(ip) >> 32 == 0 and int(ip) > 1:
            return "an IPv4-compatible IPv6 address (::a.b.c.d)"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "a reserved (not globally routable) address"
    return None


def is_public(address: str) -> bool:
    """True for an address the hub may connect to (:func:`refusal` has no objection)."""
    return refusal(address) is None

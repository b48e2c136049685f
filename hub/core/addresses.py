"""Which URLs and network addresses the hub may send requests to (SSRF rules), as plain data.

A WebSub callback or a publish-ping URL must be an absolute http(s) URL without control
characters or credentials (:func:`check_http_url`). A callback given as an IRI is stored as
the URI it maps to (:func:`as_uri`), so every request line the hub writes is ASCII. The
address a request actually connects to must be globally reachable (:func:`refusal`), by
classification rather than by a list of bad prefixes:

1. An IPv6 address that carries an IPv4 address is refused whatever it carries (the hub
   reaches an IPv4 host by its IPv4 address only): IPv4-mapped ``::ffff:a.b.c.d``,
   IPv4-translated ``::ffff:0:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64
   ``64:ff9b::/96`` and local-use ``64:ff9b:1::/48``, 6to4 ``2002::/16``, Teredo
   ``2001::/32`` (server, and client XORed). It is unwrapped so that the reason names the
   IPv4 address and, when that is not globally reachable either, why.
2. Any other address must be one that :mod:`ipaddress` calls ``is_global``, not multicast,
   (IPv6) inside the global unicast space ``2000::/3``, and outside the few prefixes the
   IANA special-purpose registries call not globally reachable that older Pythons still
   call global (:data:`NOT_GLOBALLY_REACHABLE`).

The check runs on the connected address in :mod:`hub.live.http_client` and
:mod:`hub.live.callback_connections`, so a name that resolves differently later (DNS rebinding)
is caught.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, quote, urlsplit, urlunsplit

import idna

from hub.core.exceptions import BadRequest
from rsclient.host_names import ascii_host, host_problem

MAX_URL_LENGTH = 2048

#: C0 controls, space, DEL and C1 controls: never part of a URL the hub sends a request to.
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")

IPv4 = ipaddress.IPv4Address
IPv6 = ipaddress.IPv6Address
_net4 = ipaddress.IPv4Network
_net6 = ipaddress.IPv6Network

#: IPv6 forms that carry an IPv4 address (rule 1).
_MAPPED = _net6("::ffff:0:0/96")
_TRANSLATED = _net6("::ffff:0:0:0/96")
_COMPATIBLE = _net6("::/96")
_NAT64 = _net6("64:ff9b::/96")
_SIXTOFOUR = _net6("2002::/16")
_TEREDO = _net6("2001::/32")
_NAT64_LOCAL = _net6("64:ff9b:1::/48")
#: The IPv6 global unicast space (IANA IPv6 Address Space registry); the rest is reserved,
#: unique-local, link-local, multicast or special-purpose.
_GLOBAL_UNICAST = _net6("2000::/3")
_SHARED = _net4("100.64.0.0/10")

#: Prefixes the IANA special-purpose registries call not globally reachable that some
#: Python still calls ``is_global`` (before 3.11.10/3.12.4, CVE-2024-4032, or newer entries),
#: and blocks whose few globally reachable anycast entries (PCP, TURN, AMT, AS112, ORCHIDv2)
#: newer Pythons let through: none of them is ever a callback, so the whole block is refused
#: on every Python.
NOT_GLOBALLY_REACHABLE: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = (
    (_net4("192.0.0.0/24"), "IETF protocol assignments (192.0.0.0/24)"),
    (_net6("2001::/23"), "IETF protocol assignments (2001::/23)"),
    (_net6("3fff::/20"), "documentation (3fff::/20)"),
    (_net6("5f00::/16"), "SRv6 SIDs (5f00::/16)"),
    (_net6("100:0:0:1::/64"), "the dummy IPv6 prefix (100:0:0:1::/64)"),
)


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
    problem = host_problem(parts.hostname)
    if problem is not None:
        raise BadRequest(
            f"{what} host {parts.hostname[:100]!r} is not a valid host name: {problem}"
        )
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
            name = ascii_host(host)
        except (idna.IDNAError, UnicodeError) as exc:
            raise BadRequest(
                f"{what} host {host[:100]!r} is not a valid internationalized domain name "
                f"(IDNA2008, RFC 5891): {exc}"
            ) from None
        netloc = name + (f":{parts.port}" if parts.port is not None else "")
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


def _low32(ip: IPv6) -> IPv4:
    return IPv4(int(ip) & 0xFFFFFFFF)


def _carried(ip: IPv6) -> tuple[str, list[IPv4]] | None:
    """The form of ``ip`` and the IPv4 addresses it carries, or ``None`` (a plain IPv6)."""
    if ip in _MAPPED:
        return "an IPv4-mapped IPv6 address", [_low32(ip)]
    if ip in _TRANSLATED:
        return "an IPv4-translated IPv6 address (::ffff:0:a.b.c.d)", [_low32(ip)]
    if ip in _COMPATIBLE and int(ip) > 1:  # (:: and ::1 are themselves)
        return "an IPv4-compatible IPv6 address (::a.b.c.d)", [_low32(ip)]
    if ip in _NAT64:
        return "a NAT64 address (64:ff9b::/96)", [_low32(ip)]
    if ip in _NAT64_LOCAL:  # RFC 6052 allows other positions too; /96 is the common one
        return "a local-use NAT64 address (64:ff9b:1::/48)", [_low32(ip)]
    if ip in _SIXTOFOUR:
        return "a 6to4 address (2002::/16)", [IPv4((int(ip) >> 80) & 0xFFFFFFFF)]
    if ip in _TEREDO:
        server = IPv4((int(ip) >> 64) & 0xFFFFFFFF)
        return "a Teredo address (2001::/32)", [server, IPv4(~int(ip) & 0xFFFFFFFF)]
    return None


def _classified(ip: IPv4 | IPv6) -> str | None:
    """Why ``ip`` itself is not globally reachable, by its class, or ``None``."""
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if isinstance(ip, IPv6) and ip.is_site_local:
        return "a site-local address"
    if ip.is_private:
        return "a private address"
    if isinstance(ip, IPv4) and ip in _SHARED:
        return "a reserved shared address (100.64.0.0/10, carrier-grade NAT)"
    for network, name in NOT_GLOBALLY_REACHABLE:
        if ip.version == network.version and ip in network:
            return f"not globally reachable: {name}"
    if isinstance(ip, IPv6) and ip not in _GLOBAL_UNICAST:
        return "outside the global unicast space (2000::/3)"
    if not ip.is_global:
        return "a reserved (not globally reachable) address"
    return None


def refusal(address: str) -> str | None:
    """Why the hub must not connect to ``address`` (an IP literal), or ``None`` if it may."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(ip, IPv6):
        carried = _carried(ip)
        if carried is not None:
            form, inner = carried
            for v4 in inner:
                why = _classified(v4)
                if why is not None:
                    return f"{form} carrying {v4}, {why}"
            return f"{form} carrying {inner[-1]}: connect to an IPv4 address as itself"
    return _classified(ip)


def is_public(address: str) -> bool:
    """True for an address the hub may connect to (:func:`refusal` has no objection)."""
    return refusal(address) is None

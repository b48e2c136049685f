"""Trusted proxy headers: which peers may name the base URL a client used, and which base.

A reverse proxy that reaches the hub under another name tells it the client's view with
``X-Forwarded-Host``/``X-Forwarded-Proto`` or ``Forwarded: host=...;proto=...`` (RFC 7239).
Anyone can send those headers, so they are believed only from the configured peers. The
proxy closest to the hub writes the last element of a list, so that one is used. The base
it names is accepted as one more name of this hub for that request (its topic URLs are
this hub's topics); links are still built from the public base URL. The client address it
names (``for=``, ``X-Forwarded-For``) is the one rate limits count (:func:`forwarded_client`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from hub.core.exceptions import ConfigurationError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: What a forwarded host may be: a DNS name, IPv4 or bracketed IPv6, with a port.
_HOST = re.compile(r"(?:[A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?")
_PAIR = re.compile(r'\s*([A-Za-z]+)\s*=\s*(?:"([^"]*)"|([^;,\s]*))\s*')


class TrustedPeers:
    """The peers whose forwarded headers are believed (``*`` = any peer)."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self.any = False
        self.networks: list[IPNetwork] = []
        for item in allowed:
            if item.strip() == "*":
                self.any = True
                continue
            try:
                self.networks.append(ipaddress.ip_network(item.strip(), strict=False))
            except ValueError:
                raise ConfigurationError(
                    f"forwarded_allow_ips: {item!r} is neither an IP address, a network nor *"
                ) from None

    def __bool__(self) -> bool:
        return self.any or bool(self.networks)

    def trusts(self, peer: str | None) -> bool:
        if self.any:
            return True
        try:
            address = ipaddress.ip_address((peer or "").split("%", 1)[0])
        except ValueError:
            return False
        return any(address in network for network in self.networks)


def _last(value: str | None) -> str | None:
    if not value:
        return None
    last = value.split(",")[-1].strip()
    return last or None


def _forwarded_pairs(value: str | None) -> dict[str, str]:
    """The parameters of the last element of a ``Forwarded`` header, lower-case names."""
    element = _last(value)
    pairs: dict[str, str] = {}
    for part in (element or "").split(";"):
        match = _PAIR.fullmatch(part)
        if match:
            pairs[match.group(1).lower()] = match.group(2) or match.group(3) or ""
    return pairs


def forwarded_base(headers: Mapping[str, str], scheme: str, public_base: str) -> str | None:
    """The base URL a trusted proxy says the client used, or None if it names none.

    ``scheme`` is the scheme the request reached the hub with (the default when the proxy
    names only a host); the path prefix is the public base URL's.
    """
    pairs = _forwarded_pairs(headers.get("Forwarded"))
    host = pairs.get("host") or _last(headers.get("X-Forwarded-Host"))
    proto = pairs.get("proto") or _last(headers.get("X-Forwarded-Proto")) or scheme
    if not host or not _HOST.fullmatch(host):
        return None
    proto = proto.lower()
    if proto not in ("http", "https"):
        return None
    prefix = urlsplit(public_base).path.rstrip("/")
    return f"{proto}://{host}{prefix}"


def forwarded_client(headers: Mapping[str, str]) -> str | None:
    """The client address the closest trusted proxy names (``Forwarded: for=``, else the
    last ``X-Forwarded-For``), or None when it names no IP address."""
    named = _forwarded_pairs(headers.get("Forwarded")).get("for") or _last(
        headers.get("X-Forwarded-For")
    )
    if not named or len(named) > 64:
        return None
    text = named.strip()
    if text.startswith("["):  # [v6]:port
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None

"""Which network addresses the hub may send requests to (SSRF rules), as plain data.

A WebSub callback or a publish-ping URL that resolves to a loopback, private, link-local,
multicast, reserved or unspecified address is refused unless the settings allow private
callbacks. The checks that resolve names live with the HTTP client (:mod:`hub.web_client`).
"""

from __future__ import annotations

import ipaddress


def is_public(address: str) -> bool:
    """True for a globally routable unicast address (an IPv4-mapped one by its IPv4)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast

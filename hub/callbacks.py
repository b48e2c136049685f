"""Where the hub may send requests: SSRF protection for WebSub callbacks.

A callback that resolves to a loopback, private, link-local, multicast, reserved or
unspecified address is refused unless the settings allow it (by default only when the hub
itself binds to loopback, i.e. a local development set-up).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from .exceptions import BadRequest


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_callback_address(
    url: str, *, allow_private: bool, timeout: float = 5.0, what: str = "hub.callback"
) -> None:
    """Raise :class:`BadRequest` unless ``url``'s host resolves only to allowed addresses.

    ``what`` names the URL in the error (the hub also fetches publish-ping URLs).
    """
    if allow_private:
        return
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout
        )
    except (OSError, TimeoutError) as exc:
        raise BadRequest(f"{what} host {host!r} does not resolve: {exc}") from None
    for info in infos:
        address = str(info[4][0])
        if not _is_public(address):
            raise BadRequest(
                f"{what} {host!r} resolves to non-public address {address}; private "
                "addresses are not allowed on this hub (RSHUB_ALLOW_PRIVATE_CALLBACKS)"
            )
